"""The watch's input surfaces: a run directory's report.json read for its job, the job's names in every view,
the /proc files the sampler reads.

`gpuprof analyze RUN_DIR` reads ``RUN_DIR/report.json`` for the job: a link there is not followed, a FIFO is not
opened (nothing blocks), a malformed job is one line naming the file (exit 2). A saved report's phase kinds are
strangers' text: inert in the terminal, markdown and the HTML page. A child's /proc stat line with parentheses
and spaces in its command name is parsed from the last parenthesis.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gpuprof.cli import cli

from .conftest import HTML_HOSTILE, PWNED, TEXT_HOSTILE

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

JOB = {"steps": 30, "phases": [
    {"kind": "steady", "start_step": 0, "end_step": 19, "step_time_median_us": 5000.0, "steps": 20,
     "step_time_min_us": 4900.0, "step_time_p90_us": 5100.0, "step_time_max_us": 5200.0, "data_wait_share": 0.1},
    {"kind": "slowdown", "start_step": 20, "end_step": 29, "step_time_median_us": 9000.0, "steps": 10,
     "step_time_min_us": 8900.0, "step_time_p90_us": 9100.0, "step_time_max_us": 9200.0, "data_wait_share": None}],
    "series": {"bucket": 10, "first_step": [0, 10, 20], "step_time_us": [5000.0, 5000.0, 9000.0],
               "step_time_min_us": [4900.0, 4900.0, 8900.0], "step_time_max_us": [5200.0, 5200.0, 9200.0],
               "data_wait_us": None, "cuda_allocated_mib": None, "cuda_reserved_mib": None, "cuda_peak_mib": None},
    "samples": None, "cores": 4, "h2d_copy_us": None}


def _report(job: Any) -> dict[str, Any]:
    return {"schema_version": "1.3", "tool": {"name": "gpuprof", "version": "0"}, "command": "capture", "inputs": [],
            "traces": [], "sections": [], "findings": [], "notes": [], "failed_rules": [], "failed_ranks": [],
            "job": job}


def _run_dir(tmp_path: Path) -> Path:
    """A run directory with one small real trace (from the sample that ships with gpuprof) and no report yet."""
    d = tmp_path / "run"
    d.mkdir(parents=True)
    src = next((REPO / "examples" / "sample_trace").rglob("*.pt.trace.json*"))
    shutil.copy(src, d / src.name)
    return d


def _analyze(*args: str) -> Any:
    return CliRunner().invoke(cli, ["analyze", *args, "--fail-on", "never"], catch_exceptions=False)


def test_run_dir_job_is_read(tmp_path: Path) -> None:
    d = _run_dir(tmp_path)
    (d / "report.json").write_text(json.dumps(_report(JOB)))
    r = _analyze(str(d), "--format", "json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["job"]["steps"] == 30


def test_symlinked_report_is_not_followed(tmp_path: Path) -> None:
    d = _run_dir(tmp_path)
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps(_report(JOB)))
    (d / "report.json").symlink_to(elsewhere)
    r = _analyze(str(d), "--format", "json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["job"] is None


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs")
def test_fifo_report_does_not_block(tmp_path: Path) -> None:
    d = _run_dir(tmp_path)
    os.mkfifo(d / "report.json")
    p = subprocess.run([sys.executable, "-m", "gpuprof", "analyze", str(d), "--format", "json", "--fail-on", "never"],
                       capture_output=True, text=True, timeout=60, env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["job"] is None


@pytest.mark.parametrize("bad", [{"phases": "many"}, {"steps": "3"}, {"phases": [{"kind": 1}]}, [1, 2]])
def test_malformed_job(tmp_path: Path, bad: Any) -> None:
    """Read back as a file, a malformed job is one line naming it (exit 2); in a run directory the report is a
    by-product: skipped with a note, the traces still analysed."""
    d = _run_dir(tmp_path)
    path = d / "report.json"
    path.write_text(json.dumps(_report(bad)))
    env = dict(os.environ, PYTHONPATH=str(REPO))
    p = subprocess.run([sys.executable, "-m", "gpuprof", "analyze", str(path)], capture_output=True, text=True,
                       timeout=60, env=env)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "report.json" in lines[0] and "Traceback" not in p.stderr
    p = subprocess.run([sys.executable, "-m", "gpuprof", "analyze", str(d), "--format", "json", "--fail-on", "never"],
                       capture_output=True, text=True, timeout=60, env=env)
    assert p.returncode == 0 and not p.stderr, p.stderr
    doc = json.loads(p.stdout)
    assert doc["job"] is None and doc["traces"]
    # the field named where the saved-report types say it (job.phases), else the job as a whole
    assert any(n.startswith("skipped ") and "report.json" in n and ("malformed job" in n or "malformed report: job"
                                                                      in n) for n in doc["notes"]), doc["notes"]


def _hostile_report(tmp_path: Path) -> Path:
    job = copy.deepcopy(JOB)
    kinds = HTML_HOSTILE + TEXT_HOSTILE
    job["phases"] = [dict(JOB["phases"][0], kind=k, start_step=i, end_step=i, steps=1) for i, k in enumerate(kinds)]
    job["steps"] = len(kinds)
    # recorded windows with hostile reasons: drawn as marks along the job chart and a table, as text
    job["windows"] = [{"start_step": i, "steps": 1, "reason": k} for i, k in enumerate(kinds)]
    path = tmp_path / "report.json"
    path.write_text(json.dumps(_report(job)))
    return path


def test_hostile_phase_kinds_are_inert_in_text(tmp_path: Path) -> None:
    path = _hostile_report(tmp_path)
    term = _analyze(str(path), "--format", "terminal")
    assert term.exit_code == 0, term.output
    assert "\x1b" not in term.output and "\x9b" not in term.output and "\x07" not in term.output
    md = _analyze(str(path), "--format", "markdown")
    assert md.exit_code == 0
    assert "<script>" not in md.output and "](javascript:" not in md.output
    job_table = md.output.split("## Job", 1)[1].split("\n\n", 2)[1]
    for row in [r for r in job_table.splitlines()[2:] if r.startswith("|")]:
        assert row.count(" | ") == 6, row  # seven cells: no kind breaks out of its cell


def test_hostile_phase_kinds_are_inert_in_the_page(tmp_path: Path) -> None:
    path = _hostile_report(tmp_path)
    out = tmp_path / "page.html"
    r = _analyze(str(path), "--html", str(out), "--format", "json")
    assert r.exit_code == 0, r.output
    page = out.read_text()
    assert PWNED not in page.split('<script id="data"', 1)[0]  # nothing before the data island holds it
    from .html_pages import page_data

    assert [p["kind"] for p in page_data(out)["job"]["phases"]] == HTML_HOSTILE + TEXT_HOSTILE  # data, intact


def test_child_stat_with_a_hostile_command_name(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuprof.capture.job import sampler as S

    # a worker may name itself anything: spaces, parentheses, fake fields
    line = b"4242 (evil) 0 0 0 0 0 0 0 0 0 0 0 0 999 999) S 1 1 1 0 -1 0 0 0 0 0 150 50 0 0 20 0 1 0\n"
    monkeypatch.setattr(S, "_read", lambda path: line if path.endswith("/stat") else None)
    reader = S.CpuReader.__new__(S.CpuReader)
    reader._tick = 100.0
    assert reader._child_s(4242) == pytest.approx(2.0)  # (150 + 50) ticks, from after the last ')'
    assert reader._demand_s(4242) is None  # no schedstat: the CPU used decides


@pytest.mark.parametrize("raw", [b"", b"\n", b"x y z\n", b"12\n", b"1e400 5 1\n", b"-\x00 7 1\n"])
def test_a_malformed_schedstat_is_no_figure(monkeypatch: pytest.MonkeyPatch, raw: bytes) -> None:
    """A worker's or the training thread's schedstat that does not read as two counts (the kernel writes it; a
    process cannot) gives no figure (None), never an exception on the sampler's thread; one that reads gives the
    same seconds for the workers' demand and the thread's figures."""
    from gpuprof.capture.job import sampler as S

    monkeypatch.setattr(S, "_read", lambda path: raw if path.endswith("/schedstat") else None)
    reader = S.CpuReader.__new__(S.CpuReader)
    reader._driver = "/proc/1/task/1/schedstat"
    assert reader._demand_s(4242) is None
    assert reader._driver_s() is None
    monkeypatch.setattr(S, "_read", lambda path: b"3000000000 1000000000 7\n")
    assert reader._demand_s(4242) == pytest.approx(4.0) and reader._driver_s() == pytest.approx((3.0, 1.0))


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium package (apt-get install -y chromium)")
def test_job_chart_draws_hostile_kinds_as_text(tmp_path: Path, browser: Any) -> None:
    path = _hostile_report(tmp_path)
    out = tmp_path / "page.html"
    assert _analyze(str(path), "--html", str(out), "--format", "json").exit_code == 0
    ctx = browser.new_context(offline=True, bypass_csp=True)  # inert by construction, not only by the policy
    try:
        page = ctx.new_page()
        dialogs: list[str] = []
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.goto(out.as_uri())
        page.wait_for_selector("body[data-rendered='1']")
        assert page.evaluate("document.body.dataset.jobPoints") == "3"
        page.locator("#job-phases tr").nth(3).hover()
        assert page.evaluate("window.__gpuprof_pwned") is None and not dialogs
        assert page.locator("rect.phase").count() == len(HTML_HOSTILE + TEXT_HOSTILE)
        # the recorded windows: one mark each along the top of the chart and one row each, reasons as text
        assert page.locator("rect.job-window").count() == len(HTML_HOSTILE + TEXT_HOSTILE)
        rows = page.locator("#job-windows tr")
        assert rows.count() == len(HTML_HOSTILE + TEXT_HOSTILE) + 1
        rows.nth(2).hover()
        assert page.evaluate("window.__gpuprof_pwned") is None and not dialogs
        reasons = page.evaluate("() => [...document.querySelectorAll('#job-windows tr')].slice(1).map(r => r.cells[0].textContent)")
        assert len(reasons) == len(HTML_HOSTILE + TEXT_HOSTILE) and all(r for r in reasons)
    finally:
        ctx.close()

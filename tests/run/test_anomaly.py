"""A job that slows down at step 150 of 300 (a planted sleep in its loader): an automatic anomaly window
records it, and GP650 names the slowdown, when it began and its cause; its figures are checked against the
raw trace events of the two windows."""

from __future__ import annotations

import gzip
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpuprof.capture.job.windows import ANOMALY_STEPS, WINDOW_WARMUP

REPO = Path(__file__).resolve().parents[2]
JOB = Path(__file__).parent / "jobs" / "slowdown_job.py"
SLOW_FROM = 150
SLOW_US = 40_000  # the job's planted SLOW_S


def _events(path: str) -> list[dict[str, Any]]:
    with gzip.open(path, "rt") as fh:
        doc = json.load(fh)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    return [e for e in events if isinstance(e, dict) and e.get("ph") == "X"]


def _raw(path: str) -> tuple[float, float]:
    """(median ProfilerStep duration, mean DataLoader __next__ time per step), in µs, from the raw events."""
    ev = _events(path)
    steps = [float(e["dur"]) for e in ev if str(e["name"]).startswith("ProfilerStep#")]
    loads = [float(e["dur"]) for e in ev if str(e["name"]).startswith("enumerate(DataLoader)")]
    return statistics.median(steps), sum(loads) / len(steps)


@pytest.fixture(scope="module")
def slowed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    pytest.importorskip("torch")
    logdir = tmp_path_factory.mktemp("slowdown")
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "OMP_NUM_THREADS": "1", "GPUPROF_RUNTIME_DIR": str(logdir / "reg")}
    proc = subprocess.run([sys.executable, str(JOB), str(logdir), str(SLOW_FROM)], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc: dict[str, Any] = json.loads((logdir / "job" / "report.json").read_text())
    doc["_path"] = str(logdir / "job" / "report.json")
    return doc


@pytest.mark.slow
def test_the_slowdown_records_an_anomaly_window_after_it_began(slowed: dict[str, Any]) -> None:
    wins = slowed["job"]["windows"]
    assert [w["reason"] for w in wins] == ["default", "anomaly"], wins
    anomaly = wins[1]
    # five slow steps in a row (150..154) fire it at the end of step 154: warm-up 155, recorded from 156; on a
    # busy machine a noisy step just before 150 may count as the first slow one (so from 154 or 155)
    earliest = SLOW_FROM + ANOMALY_STEPS + WINDOW_WARMUP
    assert earliest - 2 <= anomaly["start_step"] <= earliest + 3, anomaly
    assert anomaly["steps"] == 5  # as many as the default window (Schedule.active)


@pytest.mark.slow
def test_the_verdict_names_the_slowdown_its_onset_and_the_data_wait(slowed: dict[str, Any]) -> None:
    found = [f for f in slowed["findings"] if f["code"] == "GP650"]
    assert len(found) == 1, [f["code"] for f in slowed["findings"]]
    f = found[0]
    ev = f["evidence"][0]["extra"]
    assert ev["anomaly"] == "slowdown"
    assert SLOW_FROM - 2 <= ev["onset_step"] <= SLOW_FROM + 1  # when it began (give or take a noisy step)
    assert f"slowed down from step {ev['onset_step']}" in f["message"]
    assert "data wait +" in f["message"] and "waiting for data" in f["advice"]
    parts = ev["parts_change_us"]
    assert max(parts, key=lambda k: parts[k]) == "data_loading"  # the cause: the planted sleep in the loader
    assert f["location"]["file"].endswith("slowdown_job.py")
    # the figures against the raw events of the two windows' traces
    traces = {Path(t["path"]).name: t for t in slowed["traces"]}
    assert len(traces) == 2
    steady, anomaly = sorted(slowed["sections"][-1]["traces"], key=lambda p: _raw(p)[0])
    step_b, load_b = _raw(steady)
    step_a, load_a = _raw(anomaly)
    assert ev["step_time_before_us"] == pytest.approx(step_b, rel=0.01)
    assert ev["step_time_after_us"] == pytest.approx(step_a, rel=0.01)
    assert f["evidence"][0]["value"] == pytest.approx(step_a - step_b, rel=0.01)
    assert parts["data_loading"] == pytest.approx(load_a - load_b, rel=0.05)
    assert parts["data_loading"] >= 0.9 * SLOW_US  # the planted 40 ms (a sleep lasts at least that long)
    assert f["cost_us_per_step"] > 0.9 * SLOW_US


@pytest.mark.browser
def test_the_page_marks_both_windows_on_the_job_chart(slowed: dict[str, Any], browser: Any, tmp_path: Path) -> None:
    import shutil

    if not (shutil.which("chromium") or shutil.which("chromium-browser")):
        pytest.skip("needs Debian's chromium")
    from click.testing import CliRunner

    from gpuprof.cli import cli

    page = tmp_path / "job.html"
    r = CliRunner().invoke(cli, ["analyze", slowed["_path"], "--html", str(page), "--format", "json", "--fail-on", "never"])
    assert r.exit_code == 0, r.output
    ctx = browser.new_context(offline=True)
    try:
        pg = ctx.new_page()
        pg.goto(page.as_uri())
        pg.wait_for_selector("body[data-rendered='1']")
        marks = pg.evaluate("() => [...document.querySelectorAll('rect.job-window')].map(r => [r.dataset.reason, +r.getAttribute('x')])")
        assert [m[0] for m in marks] == [w["reason"] for w in slowed["job"]["windows"]] == ["default", "anomaly"]
        assert marks[0][1] < marks[1][1]  # the anomaly window is drawn later in the job than the default one
        rows = pg.evaluate("() => [...document.querySelectorAll('#job-windows tr')].slice(1).map(r => [...r.cells].map(c => c.textContent))")
        assert [(row[0], int(row[1].replace(',', ''))) for row in rows] == [
            (w["reason"], w["start_step"]) for w in slowed["job"]["windows"]]
    finally:
        ctx.close()

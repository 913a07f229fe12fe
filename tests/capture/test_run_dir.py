"""`gpuprof analyze <run dir>` after a real CPU capture: the capture's runtime findings come back,
marked as from the capture, and the leak (GP640) points at the statement that allocates what stays."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.capture.conftest import run_dir, tiny_model

torch = pytest.importorskip("torch")

import gpuprof  # noqa: E402
from gpuprof.capture import Schedule  # noqa: E402

KEPT: list[Any] = []


def _keep_a_tensor() -> None:
    KEPT.append(torch.randn(256, 256))  # 256 KiB kept every step: the planted leak


RESULTS: list[Any] = []


@pytest.fixture(scope="module")
def leaky_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    logdir = tmp_path_factory.mktemp("leak")
    torch.set_num_threads(1)
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(64, 16), torch.randint(0, 4, (64,))
    # GP656 (host contention, info) left out: present or not by the machine's load of the moment
    with gpuprof.profile(logdir, schedule=Schedule(wait=1, warmup=1, active=4), print_report=False,
                         tensorboard=False, ignore=["GP656"]) as prof:
        for _ in range(7):
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            _keep_a_tensor()
            prof.step()
    KEPT.clear()
    RESULTS.append(prof.result)
    return run_dir(logdir)


def _leak_line() -> int:
    return inspect.getsourcelines(_keep_a_tensor)[1] + 1  # the statement inside it, not its def line


def _analyze(path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpuprof", "analyze", str(path), *args],
                          capture_output=True, text=True, timeout=120)


def test_capture_report_points_the_leak_at_the_allocating_statement(leaky_run: Path) -> None:
    report = json.loads((leaky_run / "report.json").read_text())
    leak = next(f for f in report["findings"] if f["code"] == "GP640")
    assert leak["location"]["file"].endswith("test_run_dir.py")
    assert (leak["location"]["line"], leak["location"]["function"]) == (_leak_line(), "_keep_a_tensor")
    kept = next(e for e in leak["evidence"] if e["metric"] == "leak_site_kept_bytes")
    assert kept["value"] >= 2 * 256 * 256 * 4  # at least two recorded steps' tensors
    assert kept["extra"]["statement"] is True
    assert kept["extra"]["function_first_line"] == inspect.getsourcelines(_keep_a_tensor)[1]
    assert "_keep_a_tensor()" in leak["message"] and "a statement of" in leak["message"]


def test_analyze_run_dir_merges_the_captures_runtime_findings(leaky_run: Path) -> None:
    out = _analyze(leaky_run, "--format", "json")
    assert out.returncode == 1, out.stderr  # 1: findings at or above the default bar (the leak)
    doc = json.loads(out.stdout)
    leak = next(f for f in doc["findings"] if f["code"] == "GP640")
    assert leak["origin"] == "runtime" and leak["source"] == str(leaky_run / "report.json")
    assert leak["location"]["line"] == _leak_line()
    assert any("from the capture's" in n for n in doc["notes"])
    md = _analyze(leaky_run, "--format", "markdown").stdout
    assert "GP640" in md and "**From:** the capture's runtime checks" in md
    term = _analyze(leaky_run).stdout
    assert "GP640" in term and "the capture's runtime checks" in term and f":{_leak_line()}" in term
    # the trace file alone has no runtime findings: they belong to the run, not to one trace
    trace = next(leaky_run.glob("*.pt.trace.json.gz"))
    alone = json.loads(_analyze(trace, "--format", "json").stdout)
    assert not any(f["code"] == "GP640" for f in alone["findings"])


def test_analyze_run_dir_skips_a_broken_report_with_a_note(tmp_path: Path, leaky_run: Path) -> None:
    import shutil

    copy = tmp_path / "run"
    shutil.copytree(leaky_run, copy)
    hostile = {"code": "GP640", "name": "memory-growth", "severity": "warning", "message": {"not": "text"},
               "advice": "", "origin": "runtime"}
    # the one saved-report reader's checks, the field named (gpuprof.saved)
    for content, why in (('{"schema_version": "1.6", "command": "capture", "findings": [{"code": 7}]}',
                          "findings[0].code is 7, not a string"),
                         (json.dumps({"schema_version": "1.6", "command": "capture", "findings": [hostile]}),
                          "findings[0].message is {'not': 'text'}, not a string"),
                         ("{not json", "not a valid JSON report")):
        (copy / "report.json").write_text(content)
        out = _analyze(copy, "--format", "json")
        assert out.returncode in (0, 1) and not out.stderr, out.stderr  # the traces are still analysed
        doc = json.loads(out.stdout)
        assert not any(f["code"] == "GP640" for f in doc["findings"])
        assert any("skipped" in n and "report.json" in n and why in n for n in doc["notes"]), doc["notes"]


def test_capture_result_is_plain_and_round_trips_through_json(leaky_run: Path) -> None:
    from gpuprof.capture import CaptureResult

    (result,) = RESULTS
    assert isinstance(result, CaptureResult) and result.run_dir == str(leaky_run) and result.steps == 7
    # every file it lists exists, and it lists every file the run wrote
    assert set(result.files) == {str(p) for p in leaky_run.iterdir()}
    assert [(t.first_step, t.last_step) for t in result.traces] == [(2, 5)]
    assert [r.final for r in result.reports] == [False, True]  # the window's report, then the run's
    assert result.report == json.loads((leaky_run / "report.json").read_text())  # what report.json holds
    assert [f.code for f in result.runtime_findings] == ["GP640"]
    assert result.runtime_findings[0] in result.findings()
    text = result.to_json()
    back = CaptureResult.from_json(text)
    assert back == result and back.to_json() == text
    assert json.loads(text)["runtime_findings"][0]["location"]["function"] == "_keep_a_tensor"
    # read where torch is absent: the result module and the findings need no torch
    code = ("import sys; sys.modules['torch'] = None\n"
            "from gpuprof import CaptureResult\n"
            "r = CaptureResult.from_json(sys.stdin.buffer.read())\n"
            "print(r.steps, [f.code for f in r.findings() if f.origin == 'runtime'])")
    out = subprocess.run([sys.executable, "-c", code], input=text, capture_output=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.decode().split() == ["7", "['GP640']"]

"""``gpuprof memory diff TRACE`` on current traces (steps as ``ProfilerStep#N`` user annotations)."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpuprof.memory.diff import DiffOptions, diff_report
from gpuprof.memory.load import load_memory

from .conftest import V100_TOTALS, real_trace

MiB = 1 << 20
STEPS = 6


def _grow(kept: list, torch) -> None:  # type: ignore[no-untyped-def]
    kept.append(torch.ones(MiB))  # PLANTED: 4 MiB that survive each step


def _capture(out: Path) -> None:
    """Profile a CPU loop that keeps 4 MiB per step (in ``_grow``)."""
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile, schedule

    kept = []
    x = torch.randn(64, 64)
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=STEPS),
                 profile_memory=True, record_shapes=True, with_stack=True,
                 on_trace_ready=lambda p: p.export_chrome_trace(str(out))) as prof:
        for _ in range(STEPS + 1):
            y = (x @ x).relu()  # freed every step
            _grow(kept, torch)
            del y
            prof.step()


def test_diff_of_a_fresh_capture_names_the_planted_growth(tmp_path: Path) -> None:
    trace = tmp_path / "cap.pt.trace.json"
    _capture(trace)
    events = json.loads(trace.read_text())["traceEvents"]
    steps = [e for e in events if str(e.get("name", "")).startswith("ProfilerStep#")]
    assert steps and {e["cat"] for e in steps} <= {"user_annotation", "cpu_op"}  # the current vocabulary
    data = load_memory(str(trace))
    assert len(data.steps) >= 3
    report = diff_report(str(trace), None, DiffOptions(min_growth=2 * MiB))
    dev = next(d for d in report.sections[0].devices if d["device"] == "cpu")
    n = len(dev["step_allocated"])
    assert dev["before"] != dev["after"] and n >= 3
    top = dev["sites"][0]
    assert top["file"].endswith("test_diff_current_trace.py") and top["function"] == "_grow"
    # the line is the one the profiler recorded for the _grow frame (an independent read of the raw events)
    frames = {e["name"] for e in events if e.get("cat") == "python_function" and e["name"].endswith(": _grow")}
    line = top["line"]
    assert any(n.endswith(f"({line}): _grow") for n in frames)
    assert top["growth"] == (n - 1) * 4 * MiB  # one 4 MiB tensor kept per step between the two step ends
    leak = [f for f in report.findings if f.code == "GP520"]
    assert leak and leak[0].location.line == line  # type: ignore[union-attr]
    allocated = [s["allocated"] for s in dev["step_allocated"]]
    assert all(b - a >= 4 * MiB for a, b in zip(allocated, allocated[1:]))
    assert any(f.code == "GP521" for f in report.findings)
    # and through the CLI, as a user runs it
    res = subprocess.run([sys.executable, "-m", "gpuprof", "memory", "diff", str(trace), "--format", "json"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode in (0, 1), res.stderr
    assert "fewer than 2 ProfilerStep" not in res.stderr
    out = json.loads(res.stdout)
    assert any(f["code"] == "GP521" for f in out["findings"])


@pytest.mark.slow
def test_diff_of_a_real_current_trace_uses_its_annotated_steps() -> None:
    p = real_trace(V100_TOTALS)
    with gzip.open(p, "rt") as fh:
        raw = json.load(fh)["traceEvents"]
    marks = {e["name"] for e in raw if str(e.get("name", "")).startswith("ProfilerStep#") and e.get("ph") == "X"}
    report = diff_report(str(p), None)
    dev = next(d for d in report.sections[0].devices if d["device"] == "cuda:1")
    ids = [s["step"] for s in dev["step_allocated"]]
    assert {f"ProfilerStep#{i}" for i in ids} == marks
    assert dev["before"] == f"end of step {min(ids)}" and dev["after"] == f"end of step {max(ids)}"
    # each step end's allocated total is the file's Total Allocated of the last cuda:1 [memory] event before it
    mem = sorted((e["ts"], e["args"]["Total Allocated"]) for e in raw
                 if e.get("name") == "[memory]" and e["args"].get("Device Type") == 1 and e["args"].get("Device Id") == 1)
    ends = {int(e["name"].split("#")[1]): e["ts"] + e["dur"] for e in raw if e.get("name") in marks}
    for s in dev["step_allocated"]:
        assert s["allocated"] == [a for t, a in mem if t <= ends[s["step"]]][-1]

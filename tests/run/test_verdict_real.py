"""GP650's comparison on real traces: the V100 ResNet-50 samples, num_workers=4 as the steady window and
num_workers=0 as the anomaly window. The verdict must name the data wait, with the figures of an independent
reading of the raw events (ProfilerStep durations, DataLoader __next__ time per step)."""

from __future__ import annotations

import gzip
import json
import statistics
from pathlib import Path
from typing import Any

import pytest

from gpuprof.analysis import analyze
from gpuprof.capture.job.verdict import job_windows, window_verdicts
from gpuprof.capture.job.windows import Anomaly, PlannedWindow
from gpuprof.capture.run import TraceFile
from gpuprof.report import JobWindow
from gpuprof_testing.realtraces import v100_samples

Span = tuple[float, float]
GPU_CATS = {"kernel", "Kernel", "gpu_memcpy", "Memcpy", "gpu_memset", "Memset", "cuda_runtime", "Runtime",
            "cuda_driver"}


def _union(spans: list[Span]) -> list[Span]:
    out: list[Span] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _intersect(x: list[Span], y: list[Span]) -> list[Span]:
    out, i, j = [], 0, 0
    while i < len(x) and j < len(y):
        a, b = max(x[i][0], y[j][0]), min(x[i][1], y[j][1])
        if a < b:
            out.append((a, b))
        if x[i][1] < y[j][1]:
            i += 1
        else:
            j += 1
    return out


def _length(x: list[Span]) -> float:
    return sum(b - a for a, b in x)


def _raw(path: Path) -> tuple[list[int], float, float]:
    """(step ids, median ProfilerStep µs, data wait µs per step) from the raw events: the DataLoader's
    ``__next__`` time inside the steps that no GPU work or CUDA runtime call covers (the breakdown's priority:
    kernels, copies and runtime calls come before data loading)."""
    with gzip.open(path, "rt") as fh:
        doc = json.load(fh)
    ev = [e for e in doc["traceEvents"] if isinstance(e, dict) and e.get("ph") == "X"]
    steps = [e for e in ev if str(e.get("name", "")).startswith("ProfilerStep#")]
    ids = sorted(int(e["name"].split("#")[1]) for e in steps)
    span = lambda e: (float(e["ts"]), float(e["ts"]) + float(e["dur"]))  # noqa: E731
    windows = _union([span(e) for e in steps])
    loads = _intersect(_union([span(e) for e in ev if str(e["name"]).startswith("enumerate(DataLoader)")]), windows)
    covered = _intersect(loads, _union([span(e) for e in ev if e.get("cat") in GPU_CATS]))
    return ids, statistics.median(float(e["dur"]) for e in steps), (_length(loads) - _length(covered)) / len(steps)


@pytest.mark.slow  # analyzes the real V100 traces end to end (about 3 s)
def test_the_verdict_on_real_traces_names_the_data_wait_with_the_raw_figures() -> None:
    files = v100_samples()
    steady_p = next(p for p in files if "num_workers_4" in str(p))
    slow_p = next(p for p in files if "num_workers_0" in str(p))
    ids_s, step_s, load_s = _raw(steady_p)
    ids_a, step_a, load_a = _raw(slow_p)
    report = analyze([str(steady_p), str(slow_p)])
    anomaly = Anomaly("slowdown", 100, 104, "test", before_s=step_s / 1e6, after_s=step_a / 1e6)
    traces = [TraceFile(steady_p, ids_s[0], ids_s[-1]),
              TraceFile(slow_p, 100, 100 + len(ids_a) - 1, window=PlannedWindow(99, len(ids_a), "anomaly", "x",
                                                                                    anomaly))]
    assert job_windows(traces) == [JobWindow(ids_s[0], len(ids_s), "default"), JobWindow(100, len(ids_a), "anomaly")]
    (f,) = window_verdicts(traces, report, None)
    ev: dict[str, Any] = f.evidence[0].extra
    assert f.code == "GP650" and "slowed down from step 100" in f.message
    parts = ev["parts_change_us"]
    assert max(parts, key=lambda k: parts[k]) == "data_loading" and "data wait +" in f.message
    assert "waiting for data" in f.advice and str(slow_p) in f.advice  # the gpuprof diff command of the two
    assert ev["step_time_before_us"] == pytest.approx(step_s, rel=0.02)
    assert ev["step_time_after_us"] == pytest.approx(step_a, rel=0.02)
    assert parts["data_loading"] == pytest.approx(load_a - load_s, rel=0.01)
    # a window with no trace in the report (its analysis failed) gives no verdict, never a wrong one
    report.traces = [t for t in report.traces if Path(t.path).name != slow_p.name]
    assert window_verdicts(traces, report, None) == []

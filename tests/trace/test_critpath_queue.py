"""Stream semantics of the step graph (issue 42): work queued behind its stream is the stream's, whatever the gap.

Each trace is built by :class:`~gpuprof_testing.tracegen.TraceBuilder`; its ``stream_gaps_us`` starts queued GPU work
4-9 µs after the previous work of its stream ends, as real GPUs do (above the graph's 3 µs tolerance). The expected
figures are computed from the events the builder wrote, not from gpuprof's graph.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpuprof.trace.critpath.graph import build_graph
from gpuprof.trace.critpath.path import critical_path
from gpuprof.trace.critpath.rows import CriticalPath
from gpuprof.trace.load import load_trace
from gpuprof.trace.metrics import TraceMetrics, compute_metrics
from gpuprof_testing.tracegen import TraceBuilder

GAPS = (4.0, 6.0, 9.0, 5.0, 7.0, 8.0)


def _metrics(b: TraceBuilder, tmp_path: Path) -> TraceMetrics:
    return compute_metrics(load_trace(str(b.write(tmp_path / "t.pt.trace.json"))))


def _kinds(cp: CriticalPath) -> dict[str, float]:
    out: dict[str, float] = {}
    for p in cp.parts:
        out[p.kind] = out.get(p.kind, 0.0) + p.us
    return out


def _gpu(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]


def test_gpu_bound_step_with_4_to_9_us_gaps_runs_through_its_kernels(tmp_path: Path) -> None:
    b = TraceBuilder(stream_gaps_us=GAPS)
    for _ in range(3):
        with b.step():
            for i in range(40):
                b.kernel(f"k{i % 4}", us=200.0)  # the host launches 40 kernels in 280 µs; the GPU runs them for 8 ms
            b.device_synchronize()
    doc = b.to_dict()
    m = _metrics(b, tmp_path)
    cp = critical_path(m)
    assert cp is not None
    # independent: the GPU's time per step from its first kernel's start to its last kernel's end (the kernels and
    # the stream's own gaps between them), from the builder's events
    gpu = _gpu(doc["traceEvents"])
    spans = [gpu[i * 40:(i + 1) * 40] for i in range(3)]
    per_step = sum(float(s[-1]["ts"]) + float(s[-1]["dur"]) - float(s[0]["ts"]) for s in spans) / 3
    gaps = [float(b2["ts"]) - float(a["ts"]) - float(a["dur"]) for s in spans for a, b2 in zip(s, s[1:])]
    assert min(gaps) >= 4.0 and max(gaps) <= 9.0 + 1e-6  # the trace does have the gaps
    kinds = _kinds(cp)
    assert kinds["kernel"] == pytest.approx(per_step, abs=0.01)
    assert kinds["kernel"] > 0.95 * cp.length_us
    # the launch gap is the first launch only (the stream was empty then): the call and its latency, not the queue
    assert kinds.get("launch_gap", 0.0) < 20.0
    # the host ran ahead: the path's kernels were launched on average ms before they started (independent mean,
    # weighted by each kernel's time on the path: its start to the next one's start, the last one's to its end)
    launches = {e["args"]["correlation"]: float(e["ts"]) for e in doc["traceEvents"]
                if e.get("name") == "cudaLaunchKernel"}
    num = den = 0.0
    for s in spans:
        for k, nxt in zip(s, s[1:] + [None]):
            w = (float(nxt["ts"]) if nxt else float(k["ts"]) + float(k["dur"])) - float(k["ts"])
            num += w * (float(k["ts"]) - launches[k["args"]["correlation"]])
            den += w
    assert cp.host_ahead_us == pytest.approx(num / den, rel=1e-6)
    assert cp.host_ahead_us > 3000.0


def test_queued_pageable_copy_is_the_streams_time_not_a_launch_gap(tmp_path: Path) -> None:
    # a pageable host->device copy issued while the GPU still runs the step's kernels: CUDA queues it behind them,
    # and the call returns once the copy is done (a blocking copy): the host waits for the GPU, not the reverse
    b = TraceBuilder(stream_gaps_us=GAPS)
    for _ in range(3):
        with b.step():
            for _ in range(10):
                b.kernel("compute", us=500.0)
            b.copy_h2d(64 << 20, pageable=True, blocking=False, us=800.0)
            b.kernel("after", us=300.0)
            b.device_synchronize()
    doc = b.to_dict()
    m = _metrics(b, tmp_path)
    g = m.memo(build_graph)
    copies = [i for i in range(g.n_gpu) if g.names[int(g.g_name[i])].startswith("Memcpy")]
    assert len(copies) == 3
    # the copy started 4-9 µs after the kernel before it (the trace's own gap), and was queued behind it
    gpu = _gpu(doc["traceEvents"])
    for c in (e for e in gpu if e["cat"] == "gpu_memcpy"):
        before = max((e for e in gpu if e["cat"] == "kernel" and float(e["ts"]) < float(c["ts"])),
                     key=lambda e: float(e["ts"]))
        assert float(c["ts"]) - float(before["ts"]) - float(before["dur"]) >= 4.0
    assert all(g.g_queued[i] and g.g_run[i] < i for i in copies)
    cp = critical_path(m)
    assert cp is not None
    kinds = _kinds(cp)
    # independent: per step, the GPU's time from its first event to its last, less the one break the host caused
    # (the kernel after the copy is launched once the copy call returned: over 9 µs later, a real launch gap)
    steps = [gpu[i * 12:(i + 1) * 12] for i in range(3)]
    busy = 0.0
    for s in steps:
        gaps = [float(y["ts"]) - float(x["ts"]) - float(x["dur"]) for x, y in zip(s, s[1:])]
        busy += float(s[-1]["ts"]) + float(s[-1]["dur"]) - float(s[0]["ts"]) - sum(x for x in gaps if x > 9.0 + 1e-6)
    assert kinds["kernel"] + kinds["copy"] == pytest.approx(busy / 3, abs=0.01)
    assert {p.name for p in cp.parts if p.kind == "launch_gap"} <= {"cudaLaunchKernel"}  # no "launch cudaMemcpyAsync"
    assert kinds.get("launch_gap", 0.0) < 20.0


def test_launch_blocked_by_a_full_queue_waits_for_the_gpu(tmp_path: Path) -> None:
    # the launch queue holds 8 kernels: the host's launch calls block until a kernel ends (as CUDA's 1024-entry
    # queue does); the step's host range ends with its last launch, long before the GPU is done
    b = TraceBuilder(stream_gaps_us=GAPS, max_queue=8)
    for _ in range(4):
        with b.step():
            for _ in range(30):
                b.kernel("k", us=300.0)
    m = _metrics(b, tmp_path)
    cp = critical_path(m)
    assert cp is not None
    kinds = _kinds(cp)
    # steady state: the host is paced by the GPU (each blocked launch returns when a kernel ends), so the path runs
    # through the kernels, not through "cudaLaunchKernel" host time
    assert kinds["kernel"] > 0.7 * cp.length_us
    launch_host = sum(p.us for p in cp.parts if p.name == "cudaLaunchKernel")
    assert launch_host < 0.2 * cp.length_us


def test_launch_blocked_on_the_autograd_thread_waits_for_the_gpu(tmp_path: Path) -> None:
    # backward(): the main thread records nothing while autograd's thread launches the backward kernels; with the
    # launch queue full, those launches block until a kernel ends: the main thread's step waits for the GPU there
    b = TraceBuilder(stream_gaps_us=GAPS, max_queue=8)
    autograd = b.main_tid + 11
    for _ in range(4):
        with b.step():
            for _ in range(10):
                b.kernel("forward_k", us=300.0)
            with b.thread(autograd, join=True):
                with b.op("autograd::engine::evaluate_function: AddmmBackward0"):
                    for _ in range(20):
                        b.kernel("backward_k", us=300.0)
    m = _metrics(b, tmp_path)
    cp = critical_path(m)
    assert cp is not None
    kinds = _kinds(cp)
    assert kinds["kernel"] > 0.7 * cp.length_us
    backward_host = sum(p.us for p in cp.parts if p.name.startswith("autograd::engine"))
    assert backward_host < 0.2 * cp.length_us


def test_markdown_says_how_far_the_host_ran_ahead(tmp_path: Path) -> None:
    from gpuprof.analysis import analyze
    from gpuprof.render import render

    b = TraceBuilder(stream_gaps_us=GAPS)
    for _ in range(3):
        with b.step():
            for _ in range(40):
                b.kernel("k", us=200.0)
            b.device_synchronize()
    report = analyze(str(b.write(tmp_path / "gpu" / "t.pt.trace.json")))
    cp = report.traces[0].critical_path
    assert cp is not None and cp.host_ahead_us > 3000.0
    text = render(report, "markdown")
    assert "The host ran " in text and "ahead of the GPU on the path" in text
    b = TraceBuilder()
    for _ in range(3):
        with b.step():
            b.cpu(us=500, name="aten::host_a")
    assert "ahead of the GPU on the path" not in render(analyze(str(b.write(tmp_path / "cpu" / "t.pt.trace.json"))),
                                                        "markdown")

"""The critical path and the what-if replay on synthetic traces with a hand-computed schedule.

Each trace is built by :class:`~gpuprof_testing.tracegen.TraceBuilder`, whose clock
makes the schedule: a kernel starts when its launch call returns or its stream
is free, a sync returns 2 µs after the GPU work it waits for. The expected
figures below are computed from the events the builder returned, not from
gpuprof's graph.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gpuprof.trace.critpath.graph import WAIT_DATA, WAIT_SYNC, build_graph
from gpuprof.trace.critpath.path import PATH_KINDS, critical_path, critical_segments
from gpuprof.trace.critpath.replay import Removal, Replayer, replay_saving
from gpuprof.trace.critpath.rows import CriticalPath
from gpuprof.trace.load import load_trace
from gpuprof.trace.metrics import TraceMetrics, compute_metrics
from gpuprof_testing.tracegen import TraceBuilder


def _metrics(b: TraceBuilder, tmp_path: Path) -> TraceMetrics:
    return compute_metrics(load_trace(str(b.write(tmp_path / "t.pt.trace.json"))))


def _by_name(cp: CriticalPath, kind: str) -> dict[str, float]:
    return {p.name: p.us for p in cp.parts if p.kind == kind}


def _sums(cp: CriticalPath, m: TraceMetrics) -> None:
    assert cp.length_us == pytest.approx(m.mean_step_time)
    assert sum(p.us for p in cp.parts) == pytest.approx(cp.length_us, abs=1e-6)
    assert {p.kind for p in cp.parts} <= set(PATH_KINDS)


def _end(ev: dict[str, Any]) -> float:
    return float(ev["ts"]) + float(ev["dur"])


def test_gpu_bound_steps_run_through_the_kernels(tmp_path: Path) -> None:
    b = TraceBuilder()
    kernels = []
    for _ in range(3):
        with b.step():
            kernels.append((b.kernel("k1", us=1000), b.kernel("k2", us=1000)))
            b.device_synchronize()
    m = _metrics(b, tmp_path)
    cp = critical_path(m)
    assert cp is not None
    _sums(cp, m)
    # each step: both kernels whole (k2 queued right behind k1), then the sync's 2 µs return
    assert _by_name(cp, "kernel") == pytest.approx({"k1": 1000.0, "k2": 1000.0})
    assert _by_name(cp, "sync_wait")["cudaDeviceSynchronize"] == pytest.approx(2.0)
    # the first kernel waited for its launch: the launch call (5 µs) is the launch gap
    assert _by_name(cp, "launch_gap")["cudaLaunchKernel"] == pytest.approx(5.0)


def test_host_bound_steps_run_through_the_host(tmp_path: Path) -> None:
    b = TraceBuilder()
    for _ in range(3):
        with b.step():
            b.cpu(us=500, name="aten::host_a")
            b.kernel("short", us=100)
            b.cpu(us=500, name="aten::host_b")
    m = _metrics(b, tmp_path)
    cp = critical_path(m)
    assert cp is not None
    _sums(cp, m)
    ops = _by_name(cp, "operator")
    assert ops["aten::host_a"] == pytest.approx(500.0) and ops["aten::host_b"] == pytest.approx(500.0)
    assert "short" not in _by_name(cp, "kernel")  # hidden under the host's work


def test_multi_stream_wait_event_follows_the_other_stream(tmp_path: Path) -> None:
    b = TraceBuilder()
    for _ in range(3):
        with b.step():
            b.kernel("side_short", us=300, stream=7)
            b.kernel("other_long", us=500, stream=8)
            b.kernel("after_wait", us=200, stream=7, wait_for=[8])  # cudaStreamWaitEvent on stream 8
            b.device_synchronize()
    m = _metrics(b, tmp_path)
    cp = critical_path(m)
    assert cp is not None
    _sums(cp, m)
    kernels = _by_name(cp, "kernel")
    assert kernels == pytest.approx({"other_long": 500.0, "after_wait": 200.0})  # not the short one on stream 7


def test_segments_of_the_median_step_tile_it(tmp_path: Path) -> None:
    b = TraceBuilder()
    for us in (800, 1000, 1200):
        with b.step():
            b.kernel("k", us=us)
            b.device_synchronize()
    m = _metrics(b, tmp_path)
    segs = critical_segments(m)
    median = sorted(m.steps, key=lambda s: s.dur)[1]
    assert sum(e - s for _, s, e, _, _ in segs) == pytest.approx(median.dur)
    assert all(median.start - 1e-6 <= s < e <= median.end + 1e-6 for _, s, e, _, _ in segs)
    lanes = {lane for lane, *_ in segs}
    assert lanes <= {f"host:{b.pid}:{b.main_tid}", "gpu:0:7"} and "gpu:0:7" in lanes
    k = [x for x in segs if x[3] == "kernel"]
    assert len(k) == 1 and k[0][2] - k[0][1] == pytest.approx(1000.0)


def test_segments_named_by_another_threads_operator_lie_on_that_thread(tmp_path: Path) -> None:
    # the main thread waits in backward() while the autograd thread runs the backward operators: the path's host
    # time there is named by them and drawn on their thread's lane, where the user sees them run
    b = TraceBuilder()
    autograd = b.main_tid + 11
    for _ in range(3):
        with b.step():
            b.cpu(us=300, name="aten::forward_op")
            with b.thread(autograd, join=True):
                b.cpu(us=700, name="AddmmBackward0")
            b.cpu(us=200, name="aten::step_op")
    m = _metrics(b, tmp_path)
    segs = critical_segments(m)
    main, other = f"host:{b.pid}:{b.main_tid}", f"host:{b.pid}:{autograd}"
    back = [x for x in segs if x[4] == "AddmmBackward0"]
    assert back and {x[0] for x in back} == {other}
    assert sum(x[2] - x[1] for x in back) == pytest.approx(700.0)
    assert {x[0] for x in segs if x[4] in ("aten::forward_op", "aten::step_op")} == {main}
    # the per-step parts are unchanged by where the segments are drawn
    cp = critical_path(m)
    assert cp is not None and _by_name(cp, "operator")["AddmmBackward0"] == pytest.approx(700.0)


def test_real_v100_backward_thread_segments_are_on_its_lane() -> None:
    from gpuprof_testing.realtraces import shared_path

    m = compute_metrics(load_trace(str(shared_path("tbplugin", "samples", "resnet50_num_workers_0",
                                                   "worker0.1623143566756.pt.trace.json.gz"))))
    segs = critical_segments(m)
    # an independent look at the raw thread of each backward operator: which thread ran the Backward ops
    threads = {(str(e.pid), str(e.tid)) for ops in m.threads.ops.values() for e in ops if "Backward" in e.name}
    assert len(threads) == 1
    pid, tid = threads.pop()
    back = [x for x in segs if x[3] == "operator" and "Backward" in x[4]]
    assert back and {x[0] for x in back} == {f"host:{pid}:{tid}"}
    assert f"host:{pid}:{tid}" != f"host:{m.main_thread[0]}:{m.main_thread[1]}"  # type: ignore[index]


def test_replay_of_the_unchanged_graph_is_the_recording(tmp_path: Path) -> None:
    b = TraceBuilder()
    for _ in range(3):
        with b.step():
            b.dataloader(ms=0.5)
            b.kernel("k1", us=700)
            b.sync_item()
            b.cpu(us=300)
    m = _metrics(b, tmp_path)
    r = Replayer(m.memo(build_graph))
    assert replay_saving(r, Removal()) == 0.0
    last = m.steps[-1]
    assert r.end() == pytest.approx(max(last.cpu_end, max(k.end for k in m.trace.kernels)))


def test_sync_that_starves_the_gpu_saves_the_host_work_it_serialised(tmp_path: Path) -> None:
    b = TraceBuilder()
    firsts, seconds, syncs = [], [], []
    for _ in range(3):
        with b.step():
            firsts.append(b.kernel("a", us=1000))
            syncs.append(b.device_synchronize())
            b.cpu(us=800)
            seconds.append(b.kernel("b", us=1000))
            b.device_synchronize()
    m = _metrics(b, tmp_path)
    g = m.memo(build_graph)
    r = Replayer(g)
    starts = [float(s["ts"]) for s in syncs]  # the first sync of every step, found by its start
    drop = frozenset(int(w) for w in r.waits if g.w_kind[w] == WAIT_SYNC
                     and min(abs(float(g.w_ts[w]) - t) for t in starts) < 0.01)
    assert len(drop) == 3
    # hand schedule: without the sync the host runs on at once, so b is launched earlier by the sync's length;
    # b then starts at max(its launch + 5 µs, a's end); the steps are back to back, each saves the same
    saved = 0.0
    for a, s, k in zip(firsts, syncs, seconds):
        launch = float(k["ts"]) - 5.0 - float(s["dur"])
        start = max(launch + 5.0, _end(a))
        saved += _end(k) - (start + 1000.0)
    assert replay_saving(r, Removal(drop=drop)) == pytest.approx(saved / 3, abs=0.5)
    assert saved / 3 > 700.0  # the host work it serialised, not the sync's own 2 µs


def test_data_wait_over_a_long_gpu_queue_saves_nothing(tmp_path: Path) -> None:
    b = TraceBuilder()
    for _ in range(4):
        with b.step():
            b.dataloader(ms=1.0, single_process=False)  # the GPU still runs the previous step's kernel
            b.device_synchronize()
            b.kernel("long", us=3000)
    m = _metrics(b, tmp_path)
    g = m.memo(build_graph)
    r = Replayer(g)
    data = frozenset(int(w) for w in r.waits if g.w_kind[w] == WAIT_DATA)
    assert len(data) == 4
    assert replay_saving(r, Removal(drop=data)) == pytest.approx(1000.0 / 4, abs=5.0)  # only the first step's
    cp = critical_path(m)
    assert cp is not None
    _sums(cp, m)
    # on the path: the first step's data wait only (nothing was queued yet); after it, the GPU's kernel
    assert _by_name(cp, "data_wait")["data loading"] == pytest.approx(1000.0 / 4, abs=5.0)
    assert _by_name(cp, "kernel")["long"] > 0.7 * cp.length_us


def test_data_wait_before_the_gpu_work_saves_all_of_it(tmp_path: Path) -> None:
    b = TraceBuilder()
    for _ in range(3):
        with b.step():
            b.dataloader(ms=2.0, single_process=False)
            b.kernel("k", us=500)
            b.device_synchronize()
    m = _metrics(b, tmp_path)
    g = m.memo(build_graph)
    r = Replayer(g)
    data = frozenset(int(w) for w in r.waits if g.w_kind[w] == WAIT_DATA)
    waits = [float(g.w_end[w] - g.w_ts[w]) for w in sorted(data)]
    assert replay_saving(r, Removal(drop=data)) == pytest.approx(sum(waits) / 3, abs=0.5)
    cp = critical_path(m)
    assert cp is not None and _by_name(cp, "data_wait")["data loading"] == pytest.approx(sum(waits) / 3, abs=0.5)


def test_launch_bound_steps_close_their_gaps(tmp_path: Path) -> None:
    b = TraceBuilder(launch_us=5.0, gap_us=2.0)
    for _ in range(3):
        with b.step():
            for _ in range(50):
                b.kernel("tiny", us=2.0)  # 7 µs of host per 2 µs kernel
            b.device_synchronize()
    m = _metrics(b, tmp_path)
    r = Replayer(m.memo(build_graph))
    saving = replay_saving(r, Removal(close_launch_gaps=True))
    # as one graph launch: the 50 kernels back to back (100 µs) after the first launch, no launch calls on the host
    step = m.mean_step_time
    assert saving == pytest.approx(step - (5.0 + 100.0 + 2.0 + 2.0), abs=12.0)


def test_a_graph_launch_is_one_node_with_its_kernels(tmp_path: Path) -> None:
    import json

    b = TraceBuilder()
    for _ in range(3):
        with b.step():
            b.kernel("graph_k0", us=10, launch="cudaGraphLaunch")
            b.idle(us=20)  # the replayed graph's own gaps between its kernels (over 3 µs)
            b.kernel("graph_k1", us=10, launch="cudaGraphLaunch")
            b.idle(us=20)
            b.kernel("graph_k2", us=10, launch="cudaGraphLaunch")
            b.device_synchronize()
    doc = b.to_dict()
    events = doc["traceEvents"]
    # as Kineto records a graph replay: one cudaGraphLaunch call; its kernels carry its correlation id
    launches = [e for e in events if e.get("name") == "cudaGraphLaunch"]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    drop = set()
    for i in range(0, len(launches), 3):
        corr = launches[i]["args"]["correlation"]
        for j in (i + 1, i + 2):
            drop.add(id(launches[j]))
            kernels[j]["args"]["correlation"] = corr
    doc["traceEvents"] = [e for e in events if id(e) not in drop and e.get("ph") not in ("s", "f")]
    path = tmp_path / "graph.pt.trace.json"
    path.write_text(json.dumps(doc))
    m = compute_metrics(load_trace(str(path)))
    g = m.memo(build_graph)
    assert (g.g_run == np.repeat(np.arange(0, g.n_gpu, 3), 3)).all()  # one node: each kernel follows the previous
    cp = critical_path(m)
    assert cp is not None
    _sums(cp, m)
    # the sync waits for the end of graph_k2: the path runs through the three kernels and the graph's own gaps
    # between them (each kernel's span reaches the next one's start), back to the one launch call
    kernels_on = _by_name(cp, "kernel")
    assert set(kernels_on) == {"graph_k0", "graph_k1", "graph_k2"}
    spans = [float(k["ts"]) for k in kernels[:3]]
    assert sum(kernels_on.values()) == pytest.approx(spans[2] + 10.0 - spans[0], abs=0.01)
    assert list(_by_name(cp, "launch_gap")) == ["cudaGraphLaunch"]
    assert Replayer(g).end() == pytest.approx(max(m.steps[-1].cpu_end, float(g.g_end.max())))

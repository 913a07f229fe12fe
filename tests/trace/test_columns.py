"""The shared columns (:mod:`gpuprof.trace.columns`) and the metrics rewritten over them.

* each column equals the field read event by event; codes index the distinct values;
  ``by_thread`` is :func:`group_by_thread`; the cache hands back one object per trace
  and list, rebuilds a list that changed length and drops a freed trace; arrays are read-only;
* ``op_stats``/``kernel_stats`` equal the loops they replaced, to the last bit, on real traces
  (the loops are kept here as the reference) and on random nested threads.
"""

from __future__ import annotations

import gc
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuprof.trace import columns as columns_mod
from gpuprof.trace.columns import Columns, columns, gpu_columns
from gpuprof.trace.load import load_trace
from gpuprof.trace.metrics import compute_metrics
from gpuprof.trace.model import Event, Trace
from gpuprof.trace.statrows import KernelStat, OpStat
from gpuprof.trace.stats import kernel_stats, op_stats
from gpuprof.trace.threads import ThreadIndex, group_by_thread
from gpuprof.trace.vocab import Kind
from gpuprof_testing.realtraces import shared_path

REAL = [
    ("hta", "HolisticTraceAnalysis", "tests", "data", "ns_resolution_trace", "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"),
    ("tbplugin", "historical_2021-01", "resnet50_autograd_api_num_workers_0", "worker0.pt.trace.json.gz"),
    ("hta", "TraceLens", "tests", "traces", "h100", "Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"),
]


def _real(parts: tuple[str, ...]) -> Path:
    return shared_path(*parts)


def _ev(name: str, ts: float, dur: float, pid: int | str = 1, tid: int | str = 1, **kw: int) -> Event:
    return Event(kind=Kind.CPU_OP, name=name, ts=ts, dur=dur, pid=pid, tid=tid, **kw)


def test_columns_are_the_fields() -> None:
    evs = [_ev("a", 1.5, 2.0, ext=3, corr=7, device=0, stream=9), _ev("b", 2.0, 0.25, pid="p", tid=2),
           _ev("a", 4.0, 1.0, tid=2)]
    c = Columns(evs)
    assert c.ts.tolist() == [1.5, 2.0, 4.0]
    assert c.dur.tolist() == [2.0, 0.25, 1.0]
    assert c.end.tolist() == [e.end for e in evs]
    assert c.ext.tolist() == [3, -1, -1] and c.corr.tolist() == [7, -1, -1]
    assert c.device.tolist() == [0, -1, -1] and c.stream.tolist() == [9, -1, -1]
    assert c.names == ["a", "b"] and c.name_code.tolist() == [0, 1, 0]
    assert c.threads == [(1, 1), ("p", 2), (1, 2)] and c.thread_code.tolist() == [0, 1, 2]
    with pytest.raises(ValueError):
        c.ts[0] = 0.0  # shared: read-only


def test_empty_list() -> None:
    c = Columns([])
    assert len(c.ts) == 0 and c.names == [] and c.by_thread == []


@pytest.mark.parametrize("parts", REAL, ids=lambda p: p[-1][:30])
def test_real_trace_columns_and_threads(parts: tuple[str, ...]) -> None:
    trace = load_trace(_real(parts))
    for events in (trace.ops, trace.runtime, trace.kernels, trace.python):
        c = columns(trace, events)
        assert columns(trace, events) is c  # built once
        assert np.array_equal(c.ts, [e.ts for e in events]) and np.array_equal(c.dur, [e.dur for e in events])
        assert np.array_equal(c.end, [e.ts + e.dur for e in events])
        assert [c.names[k] for k in c.name_code.tolist()] == [e.name for e in events]
        groups = group_by_thread(events)
        assert c.threads == list(groups)
        for key, gi in zip(c.threads, c.by_thread):
            assert [events[i] for i in gi.tolist()] == groups[key]
    g = gpu_columns(trace)
    assert np.array_equal(g.corr, [e.corr for e in trace.gpu_events()])
    ti = ThreadIndex.build(trace)
    assert ti.ops == group_by_thread(trace.ops) and ti.runtime == group_by_thread(trace.runtime)
    assert {k: ti.op_starts[k] for k in ti.ops} == {k: [e.ts for e in v] for k, v in ti.ops.items()}


def test_cache_follows_the_trace() -> None:
    trace = Trace(path="x")
    trace.ops = [_ev("a", 0.0, 1.0)]
    c = columns(trace, trace.ops)
    trace.ops.append(_ev("b", 1.0, 1.0))  # changed after use: read again, not a stale column
    assert columns(trace, trace.ops) is not c and columns(trace, trace.ops).n == 2
    key = id(trace)
    assert key in columns_mod._CACHE
    del trace, c
    gc.collect()
    assert key not in columns_mod._CACHE


# --------------------------------------------------------------------------- the loops replaced
def _op_stats_loop(trace: Trace, threads: ThreadIndex) -> list[tuple[str, int, float, float]]:
    """The operator host times as the loop before the columns computed them (reference)."""
    new: list[float] = []
    agg: dict[str, list[float] | None] = {n: None for n in {o.name for o in trace.ops} if n.startswith("ProfilerStep#")}
    for ops in threads.ops.values():
        stack: list[tuple[float, list[float] | None]] = []
        for o in ops:
            while stack and stack[-1][0] <= o.ts:
                stack.pop()
            a = agg.get(o.name, new)
            if a is None:
                stack.append((o.ts + o.dur, None))
                continue
            if a is new:
                a = agg[o.name] = [0, 0.0, o.dur]
            else:
                a[2] += o.dur
            a[0] += 1
            a[1] += o.dur
            end = o.ts + o.dur
            if stack:
                top_end, top = stack[-1]
                if end <= top_end and top is not None:
                    top[2] -= o.dur
            stack.append((end, a))
    return [(n, int(v[0]), v[1], max(v[2], 0.0)) for n, v in agg.items() if v is not None]


def _kernel_stats_loop(trace: Trace) -> list[tuple[str, int, float, float]]:
    agg: dict[str, list[float]] = {}
    total = 0.0
    for k in trace.kernels:
        a = agg.setdefault(k.name, [0, 0.0])
        a[0] += 1
        a[1] += k.dur
        total += k.dur
    return [(n, int(c), t, t / total if total else 0.0) for n, (c, t) in agg.items()]


def _host(stats: list[OpStat]) -> list[tuple[str, int, float, float]]:
    return [(s.name, s.count, s.total_us, s.self_us) for s in stats]


def _kern(stats: list[KernelStat]) -> list[tuple[str, int, float, float]]:
    return [(s.name, s.count, s.total_us, s.share_of_gpu) for s in stats]


@pytest.mark.parametrize("parts", REAL, ids=lambda p: p[-1][:30])
def test_stats_equal_the_loops_on_real_traces(parts: tuple[str, ...]) -> None:
    trace = load_trace(_real(parts))
    m = compute_metrics(trace)
    want = _op_stats_loop(trace, ThreadIndex.build(trace))
    got = _host(m.op_stats)
    assert sorted(got) == sorted(want)  # the same floats, bit for bit
    # ties in the table's order keep the loop's order of first call
    order = {n: i for i, (n, *_rest) in enumerate(want)}
    for a, b in zip(m.op_stats, m.op_stats[1:]):
        if (a.gpu_us, a.self_us) == (b.gpu_us, b.self_us):
            assert order[a.name] < order[b.name]
    assert sorted(_kern(kernel_stats(trace))) == sorted(_kernel_stats_loop(trace))


@st.composite
def _nested_ops(draw: st.DrawFn) -> list[Event]:
    evs = []
    t = 0.0
    for _ in range(draw(st.integers(1, 40))):
        t += draw(st.sampled_from([0.0, 0.1, 0.3, 1.0, 2.5]))
        name = draw(st.sampled_from(["a", "b", "c", "ProfilerStep#1"]))
        evs.append(_ev(name, t, draw(st.sampled_from([0.0, 0.1, 0.7, 1.3, 4.0, 1e-9])), tid=draw(st.integers(1, 2))))
    return evs


@settings(max_examples=150, deadline=None)
@given(_nested_ops())
def test_op_stats_equal_the_loop_on_random_threads(ops: list[Event]) -> None:
    trace = Trace(path="x")
    trace.ops = ops
    threads = ThreadIndex.build(trace)
    got = op_stats(trace, threads)
    want = _op_stats_loop(trace, ThreadIndex.build(trace))
    assert sorted(_host(got)) == sorted(want)

"""Columns taken from other columns instead of read from the rows again (issue 44), and the loader's
kernel-configuration look-up by value.

* a host thread's group (:func:`gpuprof.trace.threads.grouped_by_thread`, what ``ThreadIndex`` holds)
  is the group :func:`group_by_thread` makes, and its columns, taken from its kind's by position,
  equal the columns read from its own rows: every field, the names and threads in order of first
  appearance, the same key objects;
* the GPU work's columns (:func:`gpu_columns`), concatenated from the kinds', equal those read from
  ``trace.gpu_events()``;
* a kernel's launch configuration is the one its own values give, whichever equal-looking
  configuration came first (``true`` is not 1; 38.0 registers are 38).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from gpuprof.trace.columns import Columns, columns, gpu_columns
from gpuprof.trace.load import load_trace
from gpuprof.trace.model import Event, Trace, kernel_config
from gpuprof.trace.threads import ThreadIndex, group_by_thread, grouped_by_thread
from gpuprof.trace.vocab import Kind
from gpuprof_testing.realtraces import shared_path

REAL = [
    ("hta", "HolisticTraceAnalysis", "tests", "data", "ns_resolution_trace", "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"),
    ("tbplugin", "samples", "resnet50_num_workers_0", "worker0.1623143566756.pt.trace.json.gz"),  # str tids
    ("hta", "TraceLens", "tests", "traces", "h100", "Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"),
]
FIELDS = ("ts", "dur", "end", "ext", "corr", "device", "stream", "name_code", "thread_code")


def _same_columns(got: Columns, events: list[Event]) -> None:
    want = Columns(list(events))  # read from the rows
    for f in FIELDS:
        a, b = getattr(got, f), getattr(want, f)
        assert a.dtype == b.dtype and np.array_equal(a, b), f
    assert got.names == want.names
    assert got.threads == want.threads
    assert [type(x) for th in got.threads for x in th] == [type(x) for th in want.threads for x in th]


def _check_groups(trace: Trace, events: list[Event]) -> None:
    want = group_by_thread(events)
    columns(trace, events).ts  # noqa: B018  # the kind's columns partly built first, as in an analysis
    got = grouped_by_thread(trace, events)
    assert list(got) == list(want)
    assert [type(x) for k in got for x in k] == [type(x) for k in want for x in k]
    for key, group in got.items():
        assert group == want[key]
        assert all(a is b for a, b in zip(group, want[key]))
        _same_columns(columns(trace, group), group)


@pytest.mark.slow  # three real traces loaded whole (about 2 s)
@pytest.mark.parametrize("parts", REAL, ids=lambda p: p[-1][:30])
def test_groups_and_gpu_columns_equal_the_rows_on_real_traces(parts: tuple[str, ...]) -> None:
    trace = load_trace(shared_path(*parts))
    assert trace.ops and trace.runtime and trace.kernels
    _check_groups(trace, trace.ops)
    _check_groups(trace, trace.runtime)
    columns(trace, trace.kernels).corr  # noqa: B018  # one part built before the GPU columns, the rest after
    g = gpu_columns(trace)
    _same_columns(g, list(trace.gpu_events()))
    ti = ThreadIndex.build(trace)
    assert ti.ops == group_by_thread(trace.ops) and ti.runtime == group_by_thread(trace.runtime)


def _op(name: str, ts: float, pid: object, tid: object, ext: int = -1) -> Event:
    return Event(int(Kind.CPU_OP), name, ts, 1.0, pid, tid, ext)  # type: ignore[arg-type]


def test_groups_keep_the_first_key_and_names_of_each_thread() -> None:
    # (1.0, 2) and (1, 2) are one thread to a dict: the group's key is the first event's, in both ways
    ops = [_op("b", 0.0, 1.0, 2, ext=5), _op("a", 1.0, "p", "t"), _op("a", 2.0, 1, 2), _op("c", 3.0, "p", "t"),
           _op("b", 4.0, 1, 2, ext=7)]
    trace = Trace(path="x", ops=ops)
    _check_groups(trace, trace.ops)
    (k1, g1), (k2, g2) = grouped_by_thread(trace, trace.ops).items()
    assert type(k1[0]) is float and k2 == ("p", "t")
    c1 = columns(trace, g1)
    assert c1.names == ["b", "a"] and c1.name_code.tolist() == [0, 1, 0] and c1.ext.tolist() == [5, -1, 7]
    assert columns(trace, g2).names == ["a", "c"]


def test_kernel_configurations_by_their_own_values(tmp_path: Path) -> None:
    def kernel(ts: float, grid: object, regs: object, occ: object = 50) -> dict[str, object]:
        return {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": ts, "dur": 1.0,
                "args": {"device": 0, "stream": 7, "correlation": 1, "grid": grid, "block": [128, 1, 1],
                         "registers per thread": regs, "est. achieved occupancy %": occ}}

    # true == 1 and 1.0 == 1 to a dict: a look-up by value must not take them for the grid size 1
    events = [kernel(1.0, [1, 1, 1], 38), kernel(2.0, [True, 1, 1], 38), kernel(3.0, [1, 1, 1], 38.0),
              kernel(4.0, [1.0, 1, 1], 38), kernel(5.0, [1, 1, 1], 38, 25), kernel(6.0, [1, 1, 1], 2e6)]
    p = tmp_path / "k.json"
    p.write_text(json.dumps({"traceEvents": events}))
    got = [kernel_config(k) for k in load_trace(p).kernels]
    assert all(c is not None for c in got)
    grids = [c.grid for c in got if c is not None]
    assert grids == [(1, 1, 1), None, (1, 1, 1), None, (1, 1, 1), (1, 1, 1)]  # true and 1.0 are no grid size
    assert [c.registers for c in got if c is not None] == [38, 38, 38, 38, 38, -1]
    assert [c.occupancy for c in got if c is not None] == [0.5, 0.5, 0.5, 0.5, 0.25, 0.5]
    assert got[0] is got[2]  # one shared object per distinct configuration


def test_many_threads_keep_their_positions() -> None:
    # past a few threads each group holds its positions (int32) instead of finding them again
    ops = [_op(f"n{i % 7}", float(i), 1, i % 23, ext=i) for i in range(300)]
    trace = Trace(path="x", ops=ops)
    _check_groups(trace, trace.ops)
    assert len(grouped_by_thread(trace, trace.ops)) == 23

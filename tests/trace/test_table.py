"""Python frames loaded as columns (:mod:`gpuprof.trace.table`).

* the table holds what the file says: each frame equals an independent reading of the JSON
  (``json``, the ``python_function`` X events, stable-sorted by start), by iteration, index and slice;
* codes index the distinct names and threads in order of first appearance, as ``Columns`` numbers
  them; grouping, thread selection and name selection equal the same done on a list of Events;
* the whole analysis (metrics, every rule, the views) gives the same summary and findings with the
  frames as a table and as a plain list of the same Events, on real traces with Python stacks;
* the columns cost far less than Events (the point of the table).
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import sys
from bisect import bisect_right
from pathlib import Path

import numpy as np
import pytest

from gpuprof.analysis import analyze_trace
from gpuprof.findings import SourceLocation
from gpuprof.trace.columns import Columns, columns, named
from gpuprof.trace.load import load_trace
from gpuprof.trace.model import Event
from gpuprof.trace.stacks import StackIndex, user_location
from gpuprof.trace.table import EventTable, TableBuilder, is_table
from gpuprof.trace.threads import group_by_thread, on_thread
from gpuprof.trace.vocab import Kind
from gpuprof_testing.realtraces import shared_path

TRACELENS = ("hta", "TraceLens", "tests", "traces")
REAL = [
    (*TRACELENS, "h100", "Falconsai_nsfw_image_detection__1016002.json.gz"),
    (*TRACELENS, "inference", "sglang_prefilldecode", "sglang_Qwen3-8B_prefilldecode.json.gz"),
    (*TRACELENS, "mi300", "resnet_act_checkpoint.json.gz"),
    ("tbplugin", "generated_cpu_torch2.13", "tiny_cpu_nw0", "cpuworker.1795297193849114643.pt.trace.json.gz"),
]
PY = int(Kind.PYTHON_FUNCTION)


def _real(parts: tuple[str, ...]) -> Path:
    p = shared_path(*parts)
    if not p.exists():
        pytest.skip(f"shared trace not available: {p}")
    return p


def _frames_from_json(path: Path) -> list[tuple[object, ...]]:
    """The file's python_function X events as (name, ts, dur, pid, tid), read with json, sorted by start."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        doc = json.load(f)
    out = []
    for e in doc["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") == "python_function" and e.get("ts") is not None:
            dur = e.get("dur")
            out.append((e.get("name"), float(e["ts"]), float(dur) if dur is not None and dur > 0 else 0.0,
                        e.get("pid", -1), e.get("tid", -1)))
    out.sort(key=lambda r: r[1])  # stable, as the loader's order
    return out


def _walk_location(frames: list[Event], t: float, max_scan: int) -> SourceLocation | None:
    """The reference: back from the last frame started at or before ``t`` (at most ``max_scan``), the
    first open at ``t`` that is a user frame, reading one Event at a time."""
    i = bisect_right([f.ts for f in frames], t) - 1
    stop = max(-1, i - max_scan)
    while i > stop:
        fr = frames[i]
        if fr.ts + fr.dur >= t:
            loc = user_location(fr.name)
            if loc is not None:
                return loc
        i -= 1
    return None


def _fields(e: Event) -> tuple[object, ...]:
    return (e.name, e.ts, e.dur, e.pid, e.tid)


@pytest.mark.slow  # slow pass: a real trace (or job) analysed whole; the README's fast command stays under 300 CPU s on a 2-core VM
@pytest.mark.parametrize("parts", REAL, ids=lambda p: p[-1][:30])
def test_table_holds_the_files_frames(parts: tuple[str, ...]) -> None:
    path = _real(parts)
    trace = load_trace(path)
    table = trace.python
    assert is_table(table)
    want = _frames_from_json(path)
    assert want, "the trace has Python frames"
    assert [_fields(e) for e in table] == want
    assert all(e.kind == PY for e in table[:50])
    n = len(want)
    for i in (0, 1, n // 2, n - 1, -1, -n):
        assert _fields(table[i]) == want[i]
    assert [_fields(e) for e in table[3:40:7]] == want[3:40:7]
    with pytest.raises(IndexError):
        table[n]
    # codes: distinct values in order of first appearance, as Columns numbers a list
    ref = Columns(list(table))
    assert table.names == ref.names and table.threads == ref.threads
    assert table.name_code.tolist() == ref.name_code.tolist()
    assert table.thread_code.tolist() == ref.thread_code.tolist()
    cols = columns(trace, table)
    assert cols.ts is table.ts and cols.end.tolist() == [e.end for e in table]
    assert cols.ext.tolist() == [e.ext for e in table] and cols.device.tolist() == [-1] * n
    with pytest.raises(ValueError):
        table.ts[0] = 0.0  # shared: read-only


@pytest.mark.slow  # slow pass: a real trace (or job) analysed whole; the README's fast command stays under 300 CPU s on a 2-core VM
@pytest.mark.parametrize("parts", REAL[:2], ids=lambda p: p[-1][:30])
def test_grouping_and_selection_equal_the_list_forms(parts: tuple[str, ...]) -> None:
    trace = load_trace(_real(parts))
    table = trace.python
    assert is_table(table)
    events = list(table)
    groups = table.by_thread()
    ref = group_by_thread(events)
    assert list(groups) == list(ref)
    for k in ref:
        assert list(groups[k]) == ref[k]
    key = next(iter(ref))
    keys = frozenset({key})
    assert list(on_thread(table, keys)) == list(on_thread(events, keys))
    assert list(on_thread(table, frozenset({("no", "such")}))) == []
    wanted = lambda n: "(" in n and n.endswith("forward")  # noqa: E731
    assert named(table, wanted) == named(events, wanted) == [e for e in events if wanted(e.name)]
    # the innermost user frame at many moments: the columns' scan agrees with a plain walk over the
    # thread's Events (the loop StackIndex ran over lists), and a Trace built with a list agrees too
    listed = dataclasses.replace(trace, python=events)
    a, b = StackIndex(trace), StackIndex(listed)
    lo, hi = float(table.ts[0]), float((table.ts + table.dur).max())
    for t in np.linspace(lo, hi, 400).tolist() + table.ts[:: max(1, len(table) // 200)].tolist():
        for pid, tid in ref:
            want = _walk_location(ref[(pid, tid)], t, StackIndex.MAX_SCAN)
            assert a.location(pid, tid, t) == want
            assert b.location(pid, tid, t) == want


@pytest.mark.parametrize("parts", REAL, ids=lambda p: p[-1][:30])
def test_analysis_is_the_same_with_frames_as_a_list(parts: tuple[str, ...]) -> None:
    trace = load_trace(_real(parts))
    assert is_table(trace.python)
    listed = dataclasses.replace(trace, python=list(trace.python), load_notes=list(trace.load_notes))
    s1, f1 = analyze_trace(trace)
    s2, f2 = analyze_trace(listed)
    assert s1 == s2
    assert f1 == f2


def test_builder_keeps_file_order_on_ties_float_ids_and_ids() -> None:
    b = TableBuilder(PY)
    b.add("b", 2.0, 1.0, 1, 7, -1, -1)
    b.add("a", 1.0, 5.0, "p", 7, 12, -1)
    b.add("c", 2.0, 0.0, 1.0, 7, -1, -1)  # a float pid is kept as written: not int 1's thread
    b.add("a", 2.0, 3.0, 1, 7, -1, 4)
    t = b.table()
    assert [(e.name, e.ts, e.pid, e.ext, e.corr) for e in t] == [
        ("a", 1.0, "p", 12, -1), ("b", 2.0, 1, -1, -1), ("c", 2.0, 1.0, -1, -1), ("a", 2.0, 1, -1, 4)]
    assert type(t[2].pid) is float and type(t[1].pid) is int
    assert t.names == ["a", "b", "c"] and t.threads == [("p", 7), (1, 7), (1.0, 7)]
    assert len(b) == 0  # the builder let its arrays go
    empty = TableBuilder(PY).table()
    assert len(empty) == 0 and not empty and list(empty) == [] and empty.by_thread() == {}
    assert t == list(t) and t != list(t)[:2]
    assert t + [] == list(t) and [] + t == list(t)


def _rows_table(rows: list[tuple], chunks: list[int]) -> tuple[EventTable, EventTable]:  # type: ignore[type-arg]
    """The table of ``rows`` made by add (one row at a time) and by add_columns (``chunks``: rows per call)."""
    one = TableBuilder(PY)
    for r in rows:
        one.add(*r)
    many = TableBuilder(PY)
    at = 0
    for size in chunks:
        part = rows[at : at + size]
        at += size
        codes = [many.name_codes.setdefault(r[0], len(many.name_codes)) for r in part]
        ids = [(i, r[5], r[6]) for i, r in enumerate(part) if r[5] != -1 or r[6] != -1]
        many.add_columns(codes, [(r[3], r[4]) for r in part], [r[1] for r in part], [r[2] for r in part], ids)
    assert at == len(rows)
    return one.table(), many.table()


def _same_table(a: EventTable, b: EventTable) -> None:
    assert a.names == b.names and a.threads == b.threads
    assert [type(p) for p, _ in a.threads] == [type(p) for p, _ in b.threads]
    for f in ("name_code", "thread_code", "ts", "dur", "ext", "corr"):
        x, y = getattr(a, f), getattr(b, f)
        assert (x is None) == (y is None), f
        if x is not None:
            assert x.dtype == y.dtype and np.array_equal(x, y), f
    assert list(a) == list(b)


def test_add_columns_makes_the_table_add_makes() -> None:
    rng = np.random.default_rng(7)
    rows = []
    for _ in range(3000):
        ext = int(rng.integers(0, 1000)) if rng.random() < 0.05 else -1
        corr = int(rng.integers(0, 1000)) if rng.random() < 0.03 else -1
        pid, tid = [(1, 7), ("Spans", 7), (1, "7"), (2, 99999)][int(rng.integers(0, 4))]
        rows.append((f"f{int(rng.integers(0, 40))}", float(rng.integers(0, 500)), float(rng.random()), pid, tid, ext, corr))
    # new names and threads in later calls, ties in start across calls, rows with and without ids
    _same_table(*_rows_table(rows, [1, 999, 1500, 500]))
    # no frame with an id: no ext/corr columns, as with add
    plain = [(n, t, d, p, q, -1, -1) for n, t, d, p, q, _, _ in rows]
    a, b = _rows_table(plain, [3000])
    assert a.ext is None and b.ext is None and a.corr is None and b.corr is None
    _same_table(a, b)


def test_add_columns_keeps_a_float_pid_or_tid_as_written() -> None:
    # 1.0 must not share int 1's thread, whichever comes first, within a call or across calls
    rows = [("a", 1.0, 1.0, 1, 7, -1, -1), ("b", 2.0, 1.0, 1.0, 7, 3, -1), ("c", 3.0, 1.0, 1, 7.0, -1, 5),
            ("d", 4.0, 1.0, 1, 7, -1, -1)]
    for chunks in ([4], [1, 3], [2, 2], [1, 1, 1, 1]):
        a, b = _rows_table(rows, chunks)
        _same_table(a, b)
        assert b.threads == [(1, 7), (1.0, 7), (1, 7.0)] and type(b.threads[1][0]) is float and type(b.threads[2][1]) is float


def test_table_costs_a_fraction_of_events() -> None:
    b = TableBuilder(PY)
    for i in range(20_000):
        b.add(f"f{i % 50}.py(1): g", float(i), 1.0, 1, 2, -1, -1)
    t = b.table()
    col_bytes = sum(a.nbytes for a in (t.ts, t.dur, t.name_code, t.thread_code))
    events = list(t)
    event_bytes = sum(sys.getsizeof(e) + sys.getsizeof(e.ts) + sys.getsizeof(e.dur) for e in events)
    assert t.ext is None and t.corr is None  # no frame has ids: no columns for them
    assert col_bytes * 4 < event_bytes
    assert isinstance(t, EventTable)

"""The loader's shared values: one object per distinct pid/tid, ``Input type`` read once per distinct text.

These keep per-event memory down (see gpuprof.trace.normalise.Builder);
what is read must stay exactly what the file says.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

import gpuprof.trace.normalise as N
from gpuprof.trace.decode import EVENTS_DECODER
from gpuprof.trace.load import load_trace
from gpuprof.trace.model import DTYPE_BF16, DTYPE_FLOAT, DTYPE_FP16, DTYPE_HALF, op_dtypes
from gpuprof_testing.realtraces import shared_path

XDIT = ("hta", "TraceLens", "tests", "traces", "inference", "xdit_sd_3.5", "profile_trace_rank_0.json.gz")
V100_2021 = ("tbplugin", "samples", "resnet50_num_workers_0", "worker0.1623143566756.pt.trace.json.gz")


def _write(tmp_path: Path, events: list[dict]) -> Path:
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": events}))
    return p


def _op(ts: float, args: dict, pid: object = 1, tid: object = 1, ph: str = "X") -> dict:
    ev = {"ph": ph, "cat": "cpu_op", "name": "aten::mm", "pid": pid, "tid": tid, "ts": ts, "args": args}
    if ph == "X":
        ev["dur"] = 1.0
    return ev


def test_pid_and_tid_are_one_object_per_value_in_a_real_trace() -> None:
    t = load_trace(shared_path(*XDIT))
    events = [e for lst in t.lists().values() for e in lst]
    assert len(events) > 100_000
    for field in ("pid", "tid"):
        values = [getattr(e, field) for e in events]
        # as many objects as distinct values (each value equal to the file's: see the next test)
        assert len({id(v) for v in values}) == len(set(values)) < 10


def test_shared_ids_keep_the_file_values_and_types(tmp_path: Path) -> None:
    # a string tid (2021 traces), an int, and a float pid that must not become the int 7
    p = _write(tmp_path, [_op(1.0, {}, pid=7, tid="7"), _op(2.0, {}, pid=7.0, tid=7), _op(3.0, {}, pid=70000, tid="7")])
    ops = load_trace(p).ops
    assert [(type(o.pid), o.pid) for o in ops] == [(int, 7), (float, 7.0), (int, 70000)]
    assert [(type(o.tid), o.tid) for o in ops] == [(str, "7"), (int, 7), (str, "7")]
    assert ops[0].tid is ops[2].tid


@pytest.mark.slow  # slow pass: a real trace (or job) analysed whole; the README's fast command stays under 300 CPU s on a 2-core VM
def test_input_type_flags_match_the_file_in_a_real_trace() -> None:
    p = shared_path(*V100_2021)
    with gzip.open(p, "rb") as f:
        raw = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "Operator")]
    raw.sort(key=lambda e: e["ts"])  # stable, as the loader sorts
    ops = load_trace(p).ops
    assert len(ops) == len(raw) > 1000
    want = [DTYPE_FLOAT if "float" in e.get("args", {}).get("Input type", []) else 0 for e in raw]
    assert sum(1 for w in want if w) > 100
    assert [op_dtypes(o) & DTYPE_FLOAT for o in ops] == want


def test_odd_input_types_load_with_no_flags(tmp_path: Path) -> None:
    # not a list of names: no dtype, and the trace still loads (before, a number made it unreadable)
    odd = [5, "float", {"a": 1}, "BIG", None, ["c10::BFloat16", 3, None]]
    p = _write(tmp_path, [_op(float(i), {"Input type": v, "External id": i}) for i, v in enumerate(odd)])
    p.write_text(p.read_text().replace('"BIG"', "[1e400]"))  # no float holds it: unreadable
    ops = load_trace(p).ops
    assert [op_dtypes(o) for o in ops] == [0, 0, 0, 0, 0, DTYPE_HALF | DTYPE_BF16]


def test_input_type_of_begin_end_pairs_outlives_its_chunk(tmp_path: Path) -> None:
    # B/E events are paired after every chunk is read: their undecoded Input type is copied out of
    # the chunk's buffer (a view into it would read whatever text replaced it); an E's fills a B's null
    events = []
    for i in range(3000):  # several 1 MiB chunks of padding between the B and its E
        events.append({"ph": "X", "cat": "cpu_op", "name": f"pad{i}", "pid": 1, "tid": 2, "ts": float(i), "dur": 0.5,
                       "args": {"Input type": ["double"] * 40, "pad": "x" * 400}})
    begin = _op(0.0, {"Input type": ["float", "c10::Half"]}, ph="B")
    begin2 = _op(1.0, {"Input type": None}, tid=3, ph="B")
    end2 = _op(5.0, {"Input type": ["c10::BFloat16"]}, tid=3, ph="E")
    end = _op(4000.0, {}, ph="E")
    p = _write(tmp_path, [begin, begin2, *events, end2, end])
    ops = {(o.tid, o.name): o for o in load_trace(p).ops if not o.name.startswith("pad")}
    assert op_dtypes(ops[(1, "aten::mm")]) == DTYPE_FLOAT | DTYPE_HALF | DTYPE_FP16
    assert op_dtypes(ops[(3, "aten::mm")]) == DTYPE_HALF | DTYPE_BF16


def test_input_type_cache_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    # a generated trace of all-different Input type lists: the table stops growing, the flags stay right
    monkeypatch.setattr(N, "_TYPE_CACHE_MAX", 10)
    text = json.dumps([_op(float(i), {"Input type": ["float"] + ["Scalar"] * i}) for i in range(50)]).encode()
    b = N.Builder("generated.json")
    b.ingest(EVENTS_DECODER.decode(text))
    assert len(b._type_flags) == 10
    assert [op_dtypes(o) for o in b.finish().ops] == [DTYPE_FLOAT] * 50


def _ev(cat: str, ts: float, dur: float, args: dict, name: str = "k") -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": args}


def test_ids_durations_and_memory_numbers_are_one_object_per_value(tmp_path: Path) -> None:
    # issue 44: an int past 256 or a float the decoder reads is an object of its own each time; the operator, its
    # launch and its kernel share their ids, and durations, a [memory] event's size, totals and address repeat
    ids = {"External id": 70001, "correlation": 90001}
    mem = {"Bytes": 4096, "Total Allocated": 1 << 30, "Total Reserved": 1 << 31, "Addr": 140000000000000,
           "Device Id": 0, "Device Type": 1}
    events = [
        _ev("cpu_op", 10.0, 12.5, {"External id": 70001}, "aten::mm"),
        _ev("cuda_runtime", 11.0, 12.5, ids, "cudaLaunchKernel"),
        _ev("kernel", 30.0, 12.5, {**ids, "device": 0, "stream": 7}),
        _ev("kernel", 50.0, 12.5, {"External id": 70002, "correlation": 90002, "device": 0, "stream": 7}),
        {"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": 12.0, "args": mem},
        {"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": 13.0, "args": {**mem, "Bytes": -4096}},
        {"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": 14.0, "args": {**mem, "Bytes": 4096}},
    ]
    t = load_trace(_write(tmp_path, events))
    (op,), (call,), (k1, k2) = t.ops, t.runtime, t.kernels
    # the values as written, with their types
    assert [(type(e.ext), e.ext, e.corr, type(e.dur), e.dur) for e in (op, call, k1, k2)] == [
        (int, 70001, -1, float, 12.5), (int, 70001, 90001, float, 12.5), (int, 70001, 90001, float, 12.5),
        (int, 70002, 90002, float, 12.5)]
    assert op.ext is call.ext is k1.ext and call.corr is k1.corr
    assert op.dur is call.dur is k1.dur is k2.dur
    m1, m2, m3 = t.memory
    assert [m.nbytes for m in t.memory] == [4096, -4096, 4096] and m1.nbytes is m3.nbytes
    for field in ("allocated", "reserved", "addr"):
        values = [getattr(m.extra, field) for m in t.memory]
        assert values == [getattr(m1.extra, field)] * 3 and values[0] is values[1] is values[2]
    assert (m1.extra.allocated, m1.extra.reserved, m1.extra.addr) == (1 << 30, 1 << 31, 140000000000000)


def test_shared_numbers_tables_are_bounded_and_emptied(monkeypatch: pytest.MonkeyPatch) -> None:
    # a generated trace of all-different ids and durations: each table is emptied once it holds _NUMBERS_MAX
    # values (checked per chunk), and both are emptied when loading is done; the values stay the file's
    monkeypatch.setattr(N, "_NUMBERS_MAX", 10)
    monkeypatch.setattr(N, "_DURATIONS_MAX", 10)
    b = N.Builder("generated.json")
    for chunk in range(3):
        evs = [_ev("cuda_runtime", float(i), 1.0 + i / 64, {"External id": 1000 + i, "correlation": 5000 + i})
               for i in range(chunk * 8, chunk * 8 + 8)]
        b.ingest(EVENTS_DECODER.decode(json.dumps(evs).encode()))
        assert len(b._numbers) <= 2 * 8 + 10 and len(b._durations) <= 8 + 10
    t = b.finish()
    assert not b._numbers and not b._durations
    assert [(r.ext, r.corr, r.dur) for r in t.runtime] == [(1000 + i, 5000 + i, 1.0 + i / 64) for i in range(24)]

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
from gpuprof.testing.realtraces import shared_path
from gpuprof.trace.decode import EVENTS_DECODER
from gpuprof.trace.load import load_trace
from gpuprof.trace.model import DTYPE_BF16, DTYPE_FLOAT, DTYPE_FP16, DTYPE_HALF, op_dtypes

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

"""Event payload accessors (gpuprof.trace.model) against the raw JSON of real traces."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from gpuprof.capture.settings import trace_op_facts
from gpuprof.trace.load import load_trace
from gpuprof.trace.model import (
    DTYPE_DOUBLE,
    DTYPE_FLOAT,
    DTYPE_HALF,
    copy_kind,
    memory_addr,
    memory_totals,
    op_call_stack,
    op_dtypes,
    op_records_autograd,
)
from gpuprof_testing.realtraces import shared_path

V100_2021 = ("tbplugin", "samples", "resnet50_num_workers_0", "worker0.1623143566756.pt.trace.json.gz")
CPU_MEMORY = ("tbplugin", "generated_cpu_torch2.13", "tiny_cpu_nw0", "cpuworker.1795297193849114643.pt.trace.json.gz")
MATMULS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear")


def _raw_events(path: object) -> list[dict]:
    with gzip.open(path, "rb") as f:  # type: ignore[arg-type]
        return json.load(f)["traceEvents"]


@pytest.mark.slow  # analyzes real traces with and without stacks (about 2 s)
def test_fp32_matmuls_count_ops_with_a_call_stack_too() -> None:
    # The settings check read an op's dtype flags only when the payload was a
    # bare int, so every 2021-era op that also carried a "Call stack" counted as
    # "no input types": half the FP32 matmuls of this trace were missed.
    p = shared_path(*V100_2021)
    half = ("c10::Half", "c10::BFloat16", "Half", "BFloat16")
    expected = sum(
        1
        for e in _raw_events(p)
        if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "Operator") and e.get("name") in MATMULS
        and "float" in e["args"].get("Input type", []) and not set(half) & set(e["args"]["Input type"])
    )
    with_stack = [o for o in load_trace(p).ops if o.name in MATMULS and op_call_stack(o)]
    assert with_stack and all(op_dtypes(o) & DTYPE_FLOAT for o in with_stack)
    assert trace_op_facts([str(p)])["fp32_matmuls"] == expected > len(with_stack)


def test_memory_payload_matches_the_file() -> None:
    p = shared_path(*CPU_MEMORY)  # torch 2.13, profile_memory=True: Addr and both totals
    raw = [e for e in _raw_events(p) if e.get("name") == "[memory]" and e.get("ph") in ("i", "I")]
    raw.sort(key=lambda e: e["ts"])  # stable, as the loader sorts
    mem = load_trace(p).memory
    assert len(mem) == len(raw) > 50
    assert [memory_addr(e) for e in mem] == [int(r["args"]["Addr"]) for r in raw]
    assert [memory_totals(e) for e in mem] == [
        (r["args"]["Total Allocated"], r["args"]["Total Reserved"]) for r in raw
    ]


def test_accessors_give_defaults_for_other_kinds() -> None:
    t = load_trace(shared_path(*V100_2021))
    k = t.kernels[0]
    assert (op_dtypes(k), op_call_stack(k), copy_kind(k), memory_totals(k), memory_addr(k)) == (0, None, None, None, -1)
    assert op_dtypes(None) == 0
    assert t.memcpys and all(copy_kind(c) is not None and c.name.startswith("Memcpy " + copy_kind(c).direction)
                             for c in t.memcpys)
    assert not any(op_dtypes(o) & DTYPE_HALF for o in t.ops)  # an FP32 run


@pytest.mark.slow  # slow pass: a real trace (or job) analysed whole; the README's fast command stays under 300 CPU s on a 2-core VM
def test_autograd_flag_matches_the_file_and_leaves_dtypes_alone() -> None:
    # 2021 dialect: "Operator" events, most of them with a "Call stack" (tuple payload)
    p = shared_path(*V100_2021)
    raw = [e for e in _raw_events(p) if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "Operator")]
    expected = sum(1 for e in raw if e.get("args", {}).get("Sequence number") is not None)
    ops = load_trace(p).ops
    flagged = [o for o in ops if op_records_autograd(o)]
    assert len(flagged) == expected > 5000
    assert any(op_call_stack(o) for o in flagged)  # the (flags, stack) payload keeps the bit
    # the bit is not a dtype: ops that recorded autograd still read as plain float32 ones
    assert {op_dtypes(o) for o in flagged} <= {0, DTYPE_FLOAT, DTYPE_DOUBLE, DTYPE_FLOAT | DTYPE_DOUBLE}
    assert any(op_dtypes(o) == DTYPE_FLOAT for o in flagged)


def test_autograd_flag_on_begin_end_pairs_and_odd_values(tmp_path: Path) -> None:
    def op(ph: str, ts: float, name: str, **args: object) -> dict:
        return {"ph": ph, "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": 1.0, "args": args}

    events = [
        op("X", 0.0, "aten::linear", **{"Sequence number": 3, "Input type": ["float"]}),
        op("X", 2.0, "aten::t", **{"Sequence number": "three"}),  # any value: only presence counts
        op("X", 4.0, "aten::relu", **{"Sequence number": [1, {"x": 1e400}]}),
        op("X", 6.0, "aten::mm", **{"Input type": ["c10::Half"]}),
        op("X", 8.0, "aten::add", **{"Input type": ["float"]}),
        {"ph": "B", "cat": "cpu_op", "name": "aten::addmm", "pid": 1, "tid": 1, "ts": 10.0,
         "args": {"Sequence number": 4, "Input type": ["double"]}},
        {"ph": "B", "cat": "cpu_op", "name": "aten::sub", "pid": 1, "tid": 1, "ts": 10.5},
        {"ph": "E", "pid": 1, "tid": 1, "ts": 11.0, "args": {"Sequence number": 5}},  # the E's args fill the B's
        {"ph": "E", "pid": 1, "tid": 1, "ts": 12.0},
    ]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}).replace("1e+400", "1e400").replace("Infinity", "1e400"))
    got = {o.name: (op_records_autograd(o), op_dtypes(o)) for o in load_trace(path).ops}
    assert got == {
        "aten::linear": (True, DTYPE_FLOAT), "aten::t": (True, 0), "aten::relu": (True, 0),
        "aten::mm": (False, op_dtypes_of_half()), "aten::add": (False, DTYPE_FLOAT),
        "aten::addmm": (True, DTYPE_DOUBLE), "aten::sub": (True, 0),
    }


def op_dtypes_of_half() -> int:
    from gpuprof.trace.model import DTYPE_FP16

    return DTYPE_HALF | DTYPE_FP16

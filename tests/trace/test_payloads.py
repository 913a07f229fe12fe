"""Event payload accessors (gpuprof.trace.model) against the raw JSON of real traces."""

from __future__ import annotations

import gzip
import json

from gpuprof.capture.settings import trace_op_facts
from gpuprof.testing.realtraces import shared_path
from gpuprof.trace.load import load_trace
from gpuprof.trace.model import (
    DTYPE_FLOAT,
    DTYPE_HALF,
    copy_kind,
    memory_addr,
    memory_totals,
    op_call_stack,
    op_dtypes,
)

V100_2021 = ("tbplugin", "samples", "resnet50_num_workers_0", "worker0.1623143566756.pt.trace.json.gz")
CPU_MEMORY = ("tbplugin", "generated_cpu_torch2.13", "tiny_cpu_nw0", "cpuworker.1795297193849114643.pt.trace.json.gz")
MATMULS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear")


def _raw_events(path: object) -> list[dict]:
    with gzip.open(path, "rb") as f:  # type: ignore[arg-type]
        return json.load(f)["traceEvents"]


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

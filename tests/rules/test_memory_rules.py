"""GP501 (GPU memory near capacity, from the trace's [memory] events)."""

from __future__ import annotations

import gzip
import json

import pytest

from gpuprof.analysis import analyze
from gpuprof.findings import Severity
from gpuprof.report import DeviceInfo
from gpuprof.rules.memory import device_peaks
from gpuprof.trace.load import load_trace
from gpuprof.trace.model import Event, MemoryPayload, Trace
from gpuprof.trace.vocab import Kind
from gpuprof_testing.realtraces import shared_path
from gpuprof_testing.tracegen import TraceBuilder

GIB = 1 << 30


def _gp501(path, **options):
    found = analyze(path, select=["GP501"], options={"GP501": options}).findings
    return found


def _training(tmp_path, peak: int, reserved: int | None = None, total: int = 16 * GIB):
    """Three steps; in step 1 the activations grow to ``peak`` bytes allocated (``reserved`` if given)."""
    tb = TraceBuilder(device="Tesla V100-SXM2-16GB", cc=(7, 0), total_memory=total, profile_memory=True)
    for i in range(3):
        with tb.step():
            tb.gemm("float", us=500)
            if i == 1:
                tb.memory(alloc=peak, total_reserved=reserved)
                tb.gemm("float", us=500)
                tb.memory(free=peak, total_reserved=reserved)
            else:
                tb.memory(alloc=GIB)
                tb.memory(free=GIB)
    return tb.write(tmp_path / "mem.json")


def test_gp501_bad(tmp_path):
    (f,) = _gp501(_training(tmp_path, peak=int(15.6 * GIB)))
    assert f.severity is Severity.ERROR  # 15.6 GiB reserved of 16 GiB = 97.5% >= error_share 0.97
    ev = f.evidence[0]
    assert ev.value == pytest.approx(15.6 / 16, abs=0.002)
    assert ev.extra["device"] == 0 and ev.extra["capacity_bytes"] == 16 * GIB
    assert ev.extra["step_id"] == 1
    assert ev.events and ev.events[0].name == "[memory]"
    assert "15.6 GiB of 16.0 GiB (98%)" in f.message and "in step 1" in f.message
    assert "fragmentation" not in f.message  # reserved == allocated, rounded to 2 MiB blocks
    assert "activation checkpointing" in f.advice and "gpuprof memory" in f.advice
    assert f.cost_us_per_step is None


def test_gp501_bad_warning_and_fragmentation(tmp_path):
    # 9 GiB in live tensors at most, but the allocator holds 14.8 GiB (92.5%): fragmented cache.
    (f,) = _gp501(_training(tmp_path, peak=9 * GIB, reserved=int(14.8 * GIB)))
    assert f.severity is Severity.WARNING
    frag = f.evidence[1]
    assert frag.extra["reserved_never_allocated_bytes"] == int(14.8 * GIB) - 9 * GIB
    assert frag.value == pytest.approx(5.8 / 14.8, abs=0.001)
    assert "fragmentation" in f.message
    assert f.advice.startswith("Cut fragmentation first") and "expandable_segments:True" in f.advice


def test_gp501_good(tmp_path):
    assert _gp501(_training(tmp_path, peak=8 * GIB)) == []  # 50% of the GPU


def test_gp501_good_host_memory_does_not_count(tmp_path):
    tb = TraceBuilder(total_memory=16 * GIB, profile_memory=True)
    with tb.step():
        tb.gemm("float")
        tb.memory(alloc=15 * GIB, device=-1)  # CPU memory (Device Type 0)
    assert _gp501(tb.write(tmp_path / "host.json")) == []


def test_device_peaks_reads_hip_device_type_and_unknown_capacity():
    # ROCm builds write Device Type 6 (HIP); a device without totalGlobalMem cannot be judged.
    t = Trace(path="x", devices=[DeviceInfo(id=0, name="AMD Instinct MI300X", total_memory=192 * GIB, vendor="amd"),
                                 DeviceInfo(id=1, name="AMD Instinct MI300X", total_memory=None, vendor="amd")])
    for dev, ts, alloc, res in [(0, 1.0, 10, 20), (0, 2.0, 150 * GIB, 180 * GIB), (0, 3.0, 5, 180 * GIB), (1, 1.0, 1, 1)]:
        t.memory.append(Event(int(Kind.MEMORY), "[memory]", ts, 0.0, 1, 1, device=dev, stream=6, extra=MemoryPayload(alloc, res, -1)))
    (p,) = device_peaks(t)
    assert (p.device, p.capacity, p.reserved, p.allocated, p.max_allocated) == (0, 192 * GIB, 180 * GIB, 150 * GIB, 150 * GIB)
    assert p.at.ts == 2.0


def _raw_memory_peaks(path) -> tuple[dict[int, int], dict[int, int]]:
    """Peak Total Reserved per CUDA device and totalGlobalMem, read with the json module."""
    with gzip.open(path, "rt") as fh:
        doc = json.load(fh)
    peaks: dict[int, int] = {}
    for e in doc["traceEvents"]:
        a = e.get("args") or {}
        if e.get("name") == "[memory]" and a.get("Device Type") == 1 and "Total Reserved" in a:
            d = a["Device Id"]
            peaks[d] = max(peaks.get(d, 0), a["Total Reserved"])
    return peaks, {p["id"]: p["totalGlobalMem"] for p in doc["deviceProperties"]}


@pytest.mark.slow  # analyzes a real trace with its memory events (about 2.5 s)
def test_gp501_real_df_index_resolver():
    path = shared_path("hta", "HolisticTraceAnalysis", "tests", "data", "df_index_resolver", "df_index_resolver.json.gz")
    assert _gp501(path) == []  # the V100 job used ~12 GB of 32 GB
    peaks, capacity = _raw_memory_peaks(path)
    (f,) = _gp501(path, warn_share=0.3)  # forced, to check the numbers against the raw file
    ev = f.evidence[0]
    dev = ev.extra["device"]
    assert ev.extra["peak_reserved_bytes"] == peaks[dev]
    assert ev.extra["capacity_bytes"] == capacity[dev]
    assert ev.value == pytest.approx(peaks[dev] / capacity[dev], abs=1e-4)
    assert ev.extra["step_id"] is not None


def test_gp501_real_traces_without_totals_are_skipped():
    # The 2021 tb_plugin samples' [memory] events carry only Bytes: nothing to compare.
    path = shared_path("tbplugin", "samples", "resnet50_num_workers_0", "worker0.1623143089861.pt.trace.json.gz")
    assert device_peaks(load_trace(path)) == []

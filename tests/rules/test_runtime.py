"""GP205 expensive-runtime-calls: synthetic and real traces."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuprof.analysis import analyze
from gpuprof.rules.runtime import _calls_by_kind, is_allocator_call
from gpuprof.trace.model import Event
from gpuprof.trace.vocab import Kind
from gpuprof_testing.realtraces import shared_path
from gpuprof_testing.tracegen import TraceBuilder, simple_training


def _gp205(path, **options):
    return [f for f in analyze(path, select=["GP205"], options={"GP205": options} if options else None).findings]


def _empty_cache_loop(tmp_path: Path, steps: int = 5, hip: bool = False) -> Path:
    """torch.cuda.empty_cache() at the end of each step: cudaFree, then cudaMalloc again in the next."""
    tb = TraceBuilder(hip=hip)
    for _ in range(steps):
        with tb.step():
            with tb.frames(("train.py", 20, "train")):
                tb.cuda_malloc(us=400.0)
                for _ in range(4):
                    tb.gemm(us=1000)
            with tb.frames(("train.py", 31, "train")):
                tb.cuda_free(us=300.0)
    return tb.write(tmp_path / f"empty_cache_{hip}.json")


def test_gp205_bad(tmp_path):
    found = _gp205(_empty_cache_loop(tmp_path))
    assert len(found) == 1, found
    f = found[0]
    ev = f.evidence[0]
    assert ev.value == 1.0  # allocator calls in every step
    assert ev.extra["calls_per_step"] == {"cudaMalloc": 1.0, "cudaFree": 1.0}
    # cudaFree waits for the ~4 ms of queued GEMMs (GPU busy) and then frees for 300 µs (GPU idle);
    # cudaMalloc's 400 µs run while the GPU is idle at the start of the step
    assert ev.extra["allocator_us_per_step"] > 4000
    assert 600 < f.cost_us_per_step < 900
    assert "cudaFree ×1" in f.message and "cudaMalloc ×1" in f.message and "5 of 5 steps" in f.message
    assert "empty_cache" in f.advice and "expandable_segments" in f.advice
    assert f.location is not None and f.location.file == "train.py"


def test_gp205_bad_hip(tmp_path):
    found = _gp205(_empty_cache_loop(tmp_path, hip=True))
    assert len(found) == 1
    assert set(found[0].evidence[0].extra["calls_per_step"]) == {"hipMalloc", "hipFree"}


def test_gp205_bad_long_synchronous_call(tmp_path):
    tb = TraceBuilder()
    for _ in range(4):
        with tb.step():
            with tb.frames(("train.py", 12, "train")):
                tb.runtime("cudaStreamCreateWithFlags", ms=3.0)
            for _ in range(4):
                tb.gemm(us=1000)
            tb.cpu(ms=5.0)  # the GPU drains before the next step
    found = _gp205(tb.write(tmp_path / "streams.json"))
    assert len(found) == 1, found
    f = found[0]
    ev = f.evidence[0]
    assert ev.extra["call"] == "cudaStreamCreateWithFlags"
    assert ev.value == 3000.0
    assert ev.extra["calls_per_step"] == 1
    assert 2900 < f.cost_us_per_step <= 3000  # the GPU has nothing to do meanwhile
    assert "cudaStreamCreateWithFlags takes 3.00 ms per step" in f.message
    assert f.location is not None and f.location.line == 12


def test_gp205_long_calls_of_several_names(tmp_path):
    # two timed names, interleaved, each slow every step; allocator calls too: one finding per timed name
    # (and one for the allocator calls), each with its own calls only
    tb = TraceBuilder()
    for _ in range(4):
        with tb.step():
            with tb.frames(("train.py", 12, "train")):
                tb.runtime("cudaStreamCreateWithFlags", ms=2.0)
                tb.cuda_malloc(us=400.0)
                tb.runtime("cudaEventCreateWithFlags", ms=3.0)
                tb.runtime("cudaStreamCreateWithFlags", ms=1.0)
            for _ in range(4):
                tb.gemm(us=1000)
            tb.cpu(ms=5.0)
    found = _gp205(tb.write(tmp_path / "two_names.json"))
    by_call = {f.evidence[0].extra.get("call"): f for f in found}
    assert set(by_call) == {"cudaEventCreateWithFlags", "cudaStreamCreateWithFlags", None}, list(by_call)
    assert "cudaMalloc" in by_call[None].evidence[0].extra["calls_per_step"]
    stream, event = by_call["cudaStreamCreateWithFlags"], by_call["cudaEventCreateWithFlags"]
    assert stream.evidence[0].extra["calls_per_step"] == 2 and event.evidence[0].extra["calls_per_step"] == 1
    assert stream.evidence[0].value == 3000.0 and event.evidence[0].value == 3000.0
    assert {e.name for e in stream.evidence[0].events} == {"cudaStreamCreateWithFlags"}


def test_gp205_good(tmp_path):
    # cudaMalloc only in the first (warm-up) step of five: the cache is reused afterwards
    path = simple_training(TraceBuilder(), steps=5, warmup_steps=1).write(tmp_path / "warmup.json")
    assert _gp205(path) == []
    # ... though it would count as churn if one step in five were enough
    assert len(_gp205(path, min_step_fraction=0.2)) == 1


def test_gp205_good_without_step_markers(tmp_path):
    # One big "step": set-up calls cannot be told from per-step ones, so nothing is claimed.
    tb = TraceBuilder()
    tb.cuda_malloc(us=5000.0)
    for _ in range(4):
        tb.gemm(us=1000)
    tb.cuda_free(us=3000.0)
    assert _gp205(tb.write(tmp_path / "nosteps.json")) == []


def test_allocator_call_names():
    for name in ("cudaMalloc", "cudaFree", "cudaMallocHost", "cudaHostAlloc", "cudaFreeHost", "hipFree", "hipMalloc",
                 "cuMemMap", "cuMemUnmap", "cuMemCreate", "cudaMallocAsync"):
        assert is_allocator_call(name), name
    for name in ("cudaLaunchKernel", "cudaMemcpyAsync", "cudaStreamSynchronize", "cudaEventRecord"):
        assert not is_allocator_call(name), name


@pytest.mark.slow
def test_gp205_quiet_on_real_multi_step_traces(v100_samples):
    paths = list(v100_samples) + [
        shared_path("hta", "HolisticTraceAnalysis", "tests", "data", "df_index_resolver", "df_index_resolver.json.gz"),
        shared_path("hta", "HolisticTraceAnalysis", "tests", "data", "nccl_parser_config", "nccl_data.json.gz"),
    ]
    for path in paths:
        assert _gp205(path) == [], path


def test_first_use_calls_of_a_trace_with_only_syncs_and_copies() -> None:
    """No call of a kind that can be start-up work (a copy and a sync only): no one-off call, no error."""
    calls = [Event(kind=Kind.RUNTIME, name="cudaMemcpyAsync", ts=0.0, dur=900.0, pid=1, tid=1, corr=1),
             Event(kind=Kind.RUNTIME, name="cudaStreamSynchronize", ts=1000.0, dur=5000.0, pid=1, tid=1)]
    first, kinds = _calls_by_kind(calls, {}, 10.0)
    assert first == {1: calls[0]} and kinds == []

"""GP201 pageable-copy, GP202 blocking-copy, GP204 small-dtoh-copies: synthetic and real traces."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from gpuprof.analysis import analyze
from gpuprof_testing.realtraces import shared_path
from gpuprof_testing.tracegen import TraceBuilder, simple_training

BATCH = 19_267_584  # 32 x 3 x 224 x 224 float32, the V100 samples' batch
LABELS = 256  # 32 int64 labels


def _findings(path, code, **options):
    return [f for f in analyze(path, select=[code], options={code: options} if options else None).findings]


def _one(path, code, **options):
    found = _findings(path, code, **options)
    assert len(found) <= 1, found
    return found[0] if found else None


def _pageable_loop(tmp_path: Path, dialect: str = "modern", steps: int = 4, pinned: bool = False,
                   blocking: bool = True) -> Path:
    """ResNet-like step: batch + labels copied with .to('cuda'), then forward/backward GEMMs."""
    tb = TraceBuilder(device="Tesla V100-SXM2-32GB", cc=(7, 0), dialect=dialect)
    for _ in range(steps):
        with tb.step():
            tb.dataloader(ms=1.0, single_process=False)
            with tb.frames(("train.py", 44, "<module>")):
                tb.copy_h2d(BATCH, pageable=not pinned, blocking=blocking)
                tb.copy_h2d(LABELS, pageable=not pinned, blocking=blocking)
            for _ in range(6):
                tb.gemm("float", us=800)
            tb.optimizer(ms=0.3, kernels=2)
    return tb.write(tmp_path / f"copies_{dialect}_{'pinned' if pinned else 'pageable'}.pt.trace.json")


# ------------------------------------------------------------------ GP201


@pytest.mark.parametrize("dialect", ["modern", "2021"])
def test_gp201_bad(tmp_path, dialect):
    f = _one(_pageable_loop(tmp_path, dialect), "GP201")
    assert f is not None
    ev = f.evidence[0]
    assert ev.extra["bytes_per_copy"] == BATCH
    assert ev.extra["bytes_per_step"] == BATCH + LABELS
    assert ev.value == BATCH + LABELS
    assert ev.extra["count_per_step"] == 2
    # the builder copies pageable memory at 10 GB/s
    assert ev.extra["bandwidth_gbps"] == pytest.approx(10.0, rel=0.05)
    assert "18.4 MiB" in f.message and "19,267,584 bytes" in f.message and "host→device" in f.message
    assert "pin_memory=True" in f.advice and "non_blocking=True" in f.advice
    # the GPU runs no kernel while the ~1.9 ms copy blocks the host
    assert 1800 < f.cost_us_per_step < 2600
    assert ev.events and ev.events[0].name == "Memcpy HtoD (Pageable -> Device)"
    if dialect == "modern":
        assert f.location is not None and (f.location.file, f.location.line) == ("train.py", 44)


def test_gp201_good(tmp_path):
    # pinned memory: nothing to report
    assert _one(_pageable_loop(tmp_path, pinned=True, blocking=False), "GP201") is None
    # a healthy loop (pinned, non-blocking batch copies)
    assert _one(simple_training(TraceBuilder(), steps=4).write(tmp_path / "good.json"), "GP201") is None


def test_gp201_good_small_pageable_copies_are_not_worth_pinning(tmp_path):
    tb = TraceBuilder()
    for _ in range(4):
        with tb.step():
            tb.copy_h2d(LABELS, pageable=True, blocking=False)
            tb.gemm(us=2000)
    path = tb.write(tmp_path / "small.json")
    assert _one(path, "GP201") is None
    # ... and the threshold is an option
    assert _one(path, "GP201", min_bytes_per_step=100) is not None


# ------------------------------------------------------------------ GP202


def test_gp202_bad(tmp_path):
    # Pinned memory but non_blocking=False: each copy is followed by cudaStreamSynchronize.
    f = _one(_pageable_loop(tmp_path, pinned=True, blocking=True), "GP202")
    assert f is not None
    ev = f.evidence[0]
    assert ev.extra["followed_by_sync"] == 8  # 2 copies x 4 steps
    assert ev.extra["pageable_copies"] == 0
    assert ev.extra["bytes_per_copy"] == BATCH
    assert ev.extra["bytes_per_step"] == BATCH + LABELS
    # The sync first waits for the previous step's queued GEMMs (the GPU is busy then), then for the copy
    # itself (pinned: 24 GB/s, ~0.8 ms) during which no kernel runs: only that part is the cost.
    idle = ev.extra["kernel_idle_us_per_step"]
    assert 700 < idle < 1200
    assert ev.value > idle + 1000
    assert f.cost_us_per_step == pytest.approx(idle, rel=0.01)
    assert "blocking pinned host→device" in f.message
    assert "non_blocking=True" in f.advice


def test_gp202_bad_pageable_blocks_the_host(tmp_path):
    f = _one(_pageable_loop(tmp_path), "GP202")
    assert f is not None
    assert "blocking pageable host→device copies" in f.message
    assert f.evidence[0].extra["pageable_copies"] == 8


def _mixed_loop(tmp_path: Path, steps: int = 4) -> Path:
    """Pageable batch copy (GP201's) plus a pinned label copy followed by a sync (GP202's only)."""
    tb = TraceBuilder(device="Tesla V100-SXM2-32GB", cc=(7, 0))
    for _ in range(steps):
        with tb.step():
            tb.copy_h2d(BATCH, pageable=True, blocking=True)
            tb.copy_h2d(4 * BATCH, pageable=False, blocking=True)
            for _ in range(6):
                tb.gemm("float", us=800)
    return tb.write(tmp_path / "mixed.json")


def test_gp202_bad_cost_shared_with_gp201_is_counted_once(tmp_path):
    path = _mixed_loop(tmp_path)
    both = {f.code: f for f in analyze(path, select=["GP201", "GP202"]).findings}
    gp201, gp202 = both["GP201"], both["GP202"]
    alone = _one(path, "GP202")  # GP202 without GP201: charges all its copies
    assert alone.cost_us_per_step > gp201.cost_us_per_step > 1000
    # the pinned copy's wait stays with GP202; the pageable one is GP201's, once
    assert 1000 < gp202.cost_us_per_step < alone.cost_us_per_step - 1000
    assert gp201.cost_us_per_step + gp202.cost_us_per_step == pytest.approx(alone.cost_us_per_step, rel=1e-6)
    shared = next(e for e in gp202.evidence if e.metric == "cost_counted_in")
    assert shared.value == "GP201" and shared.extra["copies"] == 4
    # ignoring GP201 gives the whole cost back to GP202
    ignored = [f for f in analyze(path, ignore=["GP201"]).findings if f.code == "GP202"]
    assert ignored[0].cost_us_per_step == pytest.approx(alone.cost_us_per_step)


def test_gp202_good(tmp_path):
    assert _one(_pageable_loop(tmp_path, pinned=True, blocking=False), "GP202") is None
    assert _one(simple_training(TraceBuilder(), steps=4).write(tmp_path / "good.json"), "GP202") is None


# ------------------------------------------------------------------ GP204


def _item_loop(tmp_path: Path, every: int = 1, steps: int = 5) -> Path:
    tb = TraceBuilder()
    for i in range(steps):
        with tb.step():
            for _ in range(4):
                tb.gemm(us=500)
            if i % every == 0:
                tb.sync_item(line=("train.py", 57, "train"))
    return tb.write(tmp_path / f"item_every_{every}.json")


def test_gp204_bad(tmp_path):
    f = _one(_item_loop(tmp_path), "GP204")
    assert f is not None
    ev = f.evidence[0]
    assert ev.value == 1.0  # every step
    assert ev.extra["count_per_step"] == 1
    assert ev.extra["bytes_per_copy"] == 4
    assert f.location is not None and (f.location.file, f.location.line) == ("train.py", 57)
    assert "train.py:57" in f.message and "1 small device→host copy per step" in f.message
    assert ".item()" in f.advice


def test_gp204_good(tmp_path):
    # .item() only every 5th step: 1 of 5 steps
    assert _one(_item_loop(tmp_path, every=5), "GP204") is None
    assert _one(simple_training(TraceBuilder(), steps=5).write(tmp_path / "good.json"), "GP204") is None


# ------------------------------------------------------------------ real traces


def _independent_pageable_h2d(path: Path) -> tuple[int, float]:
    """(largest copy, bytes per step) of pageable H2D copies, from the raw JSON with nothing from gpuprof."""
    with gzip.open(path, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    steps = [e for e in events if e.get("ph") == "X" and re.fullmatch(r"ProfilerStep#\d+", str(e.get("name")))]
    lo = min(e["ts"] for e in steps)
    hi = max(e["ts"] + e["dur"] for e in steps)
    sizes = [
        e["args"]["bytes"]
        for e in events
        if e.get("ph") == "X" and e.get("name") == "Memcpy HtoD (Pageable -> Device)" and lo <= e["ts"] <= hi
    ]
    return max(sizes), sum(sizes) / len(steps)


@pytest.mark.slow
def test_gp201_gp202_real_v100_samples(v100_samples):
    for path in v100_samples:
        largest, per_step = _independent_pageable_h2d(path)
        assert largest == BATCH
        report = analyze(path, select=["GP201", "GP202"])
        by_code = {f.code: f for f in report.findings}
        assert set(by_code) == {"GP201", "GP202"}, (path, by_code)
        for f in by_code.values():
            extra = f.evidence[0].extra
            assert extra["bytes_per_copy"] == BATCH, (path, extra)
            assert extra["bytes_per_step"] == pytest.approx(per_step, abs=1), (path, extra)
            assert extra["count_per_step"] == 2
            assert "19,267,584 bytes" in f.message
        gp201, gp202 = by_code["GP201"], by_code["GP202"]
        assert gp201.cost_us_per_step > 1000  # ~1.9 ms copies at ~10 GB/s
        # every blocking copy here is one of GP201's pageable copies: GP201 owns the cost, GP202 points at it
        assert gp202.cost_us_per_step == pytest.approx(0.0, abs=1e-6)
        shared = next(e for e in gp202.evidence if e.metric == "cost_counted_in")
        assert shared.value == "GP201"
        assert shared.extra["kernel_idle_us_per_step"] == pytest.approx(gp201.cost_us_per_step, abs=0.01)
        assert "counted in GP201" in gp202.message
        # GP202 alone charges the same copies itself
        alone = _one(path, "GP202")
        assert alone.cost_us_per_step == pytest.approx(gp201.cost_us_per_step, rel=1e-9)
        assert not any(e.metric == "cost_counted_in" for e in alone.evidence)
        assert 4.0 < gp201.evidence[0].extra["bandwidth_gbps"] < 13.0
        assert gp202.evidence[0].extra["followed_by_sync"] == 12  # cudaStreamSynchronize after each


@pytest.mark.slow  # slow pass: a real trace (or job) analysed whole; the README's fast command stays under 300 CPU s on a 2-core VM
def test_gp204_does_not_fire_on_v100_samples(v100_samples):
    for path in v100_samples:
        assert not _findings(path, "GP204")


def test_gp201_real_b200_small_pageable_copies_not_flagged():
    path = shared_path("hta", "TraceLens", "tests", "traces", "b200", "eager_trace.json.gz")
    assert not _findings(path, "GP201")


# ------------------------------------------------------------------ synchronous copy APIs (CUDA and ROCm)


def _rocm_sync_copy_loop(tmp_path: Path, api: str, steps: int = 4) -> Path:
    """Each step queues 30 ms of kernels, then copies to the GPU with a synchronous copy API whose call returns
    just before its GPU copy ends (as HIP's staged copies do): no sync follows, the call itself waits."""
    tb = TraceBuilder(device="AMD Instinct MI300X", hip=api.startswith("hip"))
    for _ in range(steps):
        with tb.step():
            for _ in range(6):
                tb.gemm("float", us=5000)
            with tb.op("aten::copy_", input_types=["float", "float", "Scalar"]):
                tb.memcpy("HtoD", 4 << 20, src="Host", dst="Device", host_waits=True, api=api)
            tb.gemm("float", us=500)
    path = tb.write(tmp_path / f"sync_copy_{api}.pt.trace.json")
    # the builder's calls return at once; a synchronous copy's call lasts until (just before) its copy ends
    doc = json.loads(path.read_text())
    copies = {e["args"]["correlation"]: e for e in doc["traceEvents"] if e.get("cat") == "gpu_memcpy"}
    for e in doc["traceEvents"]:
        if e.get("name") == api:
            g = copies[e["args"]["correlation"]]
            e["dur"] = g["ts"] + g["dur"] - 2 - e["ts"]
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize("api", ["hipMemcpyWithStream", "hipMemcpy", "cudaMemcpy"])
def test_gp202_bad_synchronous_copy_api_waits_behind_queued_kernels(tmp_path, api):
    path = _rocm_sync_copy_loop(tmp_path, api)
    raw = json.loads(path.read_text())["traceEvents"]
    calls = [e for e in raw if e.get("name") == api]
    assert len(calls) == 4
    expected = sum(e["dur"] for e in calls) / 4  # the trace's own figure: the calls' time
    assert expected > 20_000  # each waits behind ~30 ms of queued GEMMs
    f = _one(path, "GP202")
    assert f is not None
    ev = f.evidence[0]
    assert ev.value == pytest.approx(expected, rel=0.01)
    assert ev.extra["queued_behind_gpu_work_us_per_step"] > 0.9 * (expected - 1000)
    assert ev.extra["synchronous_copy_calls"] == [api]
    assert "queued behind kernels launched before the copy" in f.message and api in f.message
    # the syncs table lists them as host waits, named for what they are (not .cpu())
    rep = analyze(path)
    syncs = rep.traces[0].to_dict()["syncs"] if hasattr(rep.traces[0], "to_dict") else rep.traces[0]["syncs"]
    row = next(s for s in syncs if s["runtime"] == api)
    assert row["cause"] == f"a synchronous host→device copy ({api}) queued behind kernels"
    assert row["count"] == 4 and row["total_us"] == pytest.approx(4 * expected, rel=0.01)
    assert "GP203" not in {f.code for f in rep.findings}  # GP202 owns these waits, counted once


def test_gp202_good_async_copy_api_does_not_wait(tmp_path):
    tb = TraceBuilder(device="AMD Instinct MI300X", hip=True)
    for _ in range(4):
        with tb.step():
            for _ in range(6):
                tb.gemm("float", us=5000)
            tb.memcpy("HtoD", 4 << 20, src="Pinned", dst="Device", host_waits=False, api="hipMemcpyAsync")
    assert _one(tb.write(tmp_path / "async.json"), "GP202") is None


@pytest.mark.slow  # a real trace analysed whole / a bounded hostile wait: the slow pass
def test_gp202_bad_real_rocm_synchronous_copies_match_the_trace() -> None:
    """SGLang on MI300X: hipMemcpyWithStream host→device calls; GP202's wait within 2x of the trace's own."""
    path = shared_path("hta", "TraceLens", "tests", "traces", "inference", "sglang_prefilldecode",
                       "sglang_Qwen3-8B_prefilldecode.json.gz")
    raw = json.loads(gzip.open(path).read())["traceEvents"]
    htod = {e["args"]["correlation"] for e in raw if e.get("cat") == "gpu_memcpy" and "HtoD" in e.get("name", "")}
    calls = [e for e in raw if e.get("name") == "hipMemcpyWithStream" and e["args"].get("correlation") in htod]
    expected = sum(e["dur"] for e in calls)
    assert calls and expected > 100_000
    f = _one(path, "GP202")
    assert f is not None
    steps = analyze(path).traces[0].to_dict()["num_steps"] if hasattr(analyze(path).traces[0], "to_dict") else 1
    assert expected / 2 <= f.evidence[0].value * max(steps, 1) <= expected * 2
    assert f.evidence[0].extra["synchronous_copy_calls"] == ["hipMemcpyWithStream"]

"""Waiting inside NCCL/RCCL collectives split from busy GPU time (gpuprof.distributed.waiting; issue 37).

One rank: checked against an independent reading of the real 2-rank A100 NCCL trace's raw events. Several
ranks: a planted late rank whose wait is known, and the real sampled ranks of a 128-rank job.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from gpuprof.analysis import analyze
from gpuprof_testing.realtraces import shared_path
from gpuprof_testing.tracegen import TraceBuilder

HTA = ("hta", "HolisticTraceAnalysis", "tests", "data")


def _union(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _covered(a: float, b: float, spans: list[tuple[float, float]]) -> float:
    return sum(max(0.0, min(b, y) - max(a, x)) for x, y in spans)


def test_one_rank_wait_equals_an_independent_count_from_raw_events() -> None:
    path = shared_path(*HTA, "nccl_parser_config", "nccl_data.json.gz")
    with gzip.open(path, "rt") as fh:
        ev: list[dict[str, Any]] = json.load(fh)["traceEvents"]
    marks = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("name", "").startswith("ProfilerStep#"))
    runtime = {e["args"]["correlation"]: e for e in ev if e.get("cat") == "cuda_runtime" and "correlation" in e["args"]}
    gpu = [e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    # steps tile: each to the next one's start, the last to its host end or the end of the GPU work it launched
    last_a, last_b = marks[-1]
    tail = [g["ts"] + g["dur"] for g in gpu if (r := runtime.get(g["args"].get("correlation"))) is not None
            and last_a <= r["ts"] <= last_b]
    windows = [(a, marks[i + 1][0]) for i, (a, _b) in enumerate(marks[:-1])] + [(last_a, max([last_b, *tail]))]
    kernels = [e for e in ev if e.get("cat") == "kernel"]
    nccl = [k for k in kernels if k["name"].startswith("ncclKernel") and any(a <= k["ts"] <= b for a, b in windows)]
    compute = _union([(k["ts"], k["ts"] + k["dur"]) for k in kernels if not k["name"].startswith("nccl")
                      and any(a <= k["ts"] <= b for a, b in windows)])
    size = {id(k): (k["args"]["Collective name"], k["args"]["In msg nelems"], k["args"]["dtype"]) for k in nccl}
    fastest: dict[Any, float] = {}
    for k in nccl:
        fastest[size[id(k)]] = min(fastest.get(size[id(k)], k["dur"]), k["dur"])
    twins = {s: sum(1 for k in nccl if size[id(k)] == s) for s in fastest}
    idle = 0.0
    for k in nccl:
        wait = k["dur"] - fastest[size[id(k)]] if twins[size[id(k)]] > 1 else 0.0
        exposed = k["dur"] - _covered(k["ts"], k["ts"] + k["dur"], compute)
        idle += min(wait, exposed)
    t = analyze(str(path)).traces[0]
    assert len(nccl) == 21 and idle > 0
    assert t.comm_wait_source == "trace"
    assert t.comm_wait_us == pytest.approx(idle / len(windows), abs=1e-2)
    assert t.comm_wait_us <= t.breakdown_us["communication"] and t.comm_wait_us <= t.gpu_busy_us
    assert t.gpu_utilization is not None and t.gpu_working_utilization is not None
    assert t.gpu_working_utilization == pytest.approx((t.gpu_busy_us - t.comm_wait_us) / t.step_time_mean_us)
    assert t.gpu_working_utilization < t.gpu_utilization  # a rank waiting in NCCL is not "busy"


def _rank(tmp_path: Path, rank: int, compute_us: float, collective_us: float) -> Path:
    """Two steps: compute, then an all-reduce kernel of ``collective_us``; the host waits for the GPU."""
    tb = TraceBuilder(rank=rank, world_size=2)
    for _ in range(2):
        with tb.step():
            tb.gemm(us=compute_us)
            tb.nccl(us=collective_us, wait_for_compute=True)
            tb.device_synchronize()  # the step ends with its GPU work: no compute runs beside the collective
    return tb.write(tmp_path / f"rank{rank}" / "t.pt.trace.json")


def test_several_ranks_the_wait_before_the_last_rank_arrived(tmp_path: Path) -> None:
    """Rank 1 computes 3 ms longer, so rank 0's all-reduce kernel (4 ms) waits 3 ms for it, every step; rank 1's
    (1 ms) is the transfer alone."""
    a, b = _rank(tmp_path, 0, 5_000.0, 4_000.0), _rank(tmp_path, 1, 8_000.0, 1_000.0)
    alone = analyze(str(a)).traces[0]  # one rank cannot tell (its collectives carry no size here): unknown
    assert alone.comm_wait_source is None and alone.comm_wait_us is None and alone.gpu_working_utilization is None
    r = analyze([str(a), str(b)])
    by_rank = {t.rank: t for t in r.traces}
    t0, t1 = by_rank[0], by_rank[1]
    assert t0.comm_wait_source == t1.comm_wait_source == "ranks"
    assert t0.comm_wait_us == pytest.approx(3_000.0, abs=1e-6) and t1.comm_wait_us == 0.0
    assert t0.gpu_working_utilization == pytest.approx((t0.gpu_busy_us - 3_000.0) / t0.step_time_mean_us)
    assert t0.gpu_utilization is not None and t0.gpu_working_utilization < t0.gpu_utilization - 0.3


def test_real_sampled_ranks_of_a_128_rank_job() -> None:
    paths = [shared_path(*HTA, "timeline_analysis", "sampled_rank-0.json.gz"),
             shared_path(*HTA, "trace_filter", "sampled_rank-1.json.gz")]
    one = [analyze(str(p)).traces[0] for p in paths]
    both = analyze([str(p) for p in paths]).traces
    for t in [*one, *both]:
        assert t.comm_wait_us is not None and 0 <= t.comm_wait_us <= t.breakdown_us["communication"]
        assert t.gpu_working_utilization is not None and t.gpu_utilization is not None
        assert t.gpu_working_utilization <= t.gpu_utilization
    assert {t.comm_wait_source for t in one} == {"trace"} and {t.comm_wait_source for t in both} == {"ranks"}
    # together, each collective's wait is measured against the other rank, not only against the rank's own twins
    assert sum(t.comm_wait_us or 0 for t in both) > sum(t.comm_wait_us or 0 for t in one)


def test_no_collectives_no_wait_fields() -> None:
    t = analyze(str(shared_path("hta", "TraceLens", "tests", "traces", "h100",
                                "Falconsai_nsfw_image_detection__1016002.json.gz"))).traces[0]
    assert t.comm_wait_us is None and t.comm_wait_source is None and t.gpu_working_utilization is None


@pytest.mark.parametrize("fmt", ["terminal", "markdown"])
def test_views_split_waiting_from_working(fmt: str) -> None:
    from gpuprof.render import render
    from gpuprof.units import fmt_pct

    report = analyze(str(shared_path(*HTA, "nccl_parser_config", "nccl_data.json.gz")))
    t = report.traces[0]
    assert t.gpu_working_utilization is not None
    out = render(report, fmt)
    assert "of which waiting for other ranks" in out
    assert f"{fmt_pct(t.gpu_working_utilization)} working" in out and "one-rank estimate" in out


@pytest.mark.slow  # a 54 MB trace
def test_one_rank_with_sizes_unknown_has_no_estimate_not_zero() -> None:
    """The V100 DDP rank's 2,020 all-reduces carry no message size: one rank cannot split wait from transfer."""
    t = analyze(str(shared_path(*HTA, "df_index_resolver", "df_index_resolver.json.gz"))).traces[0]
    assert t.breakdown_us["communication"] > 0
    assert t.comm_wait_us is None and t.comm_wait_source is None and t.gpu_working_utilization is None


def test_cpu_only_gloo_rank_has_no_gpu_waiting_fields() -> None:
    t = analyze(str(shared_path(*HTA, "cpu_only", "rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"))).traces[0]
    assert t.gpu_utilization is None
    assert t.comm_wait_us is None and t.gpu_working_utilization is None and t.comm_wait_source is None

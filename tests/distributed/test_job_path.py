"""The job's critical path across ranks (gpuprof.distributed.jobpath; docs/critical-path.md, *The job's path*).

Synthetic jobs are built rank by rank in lock step: every all-reduce ends at one moment on all ranks (the
last arrival's start plus the transfer), as NCCL's do, each rank on its own clock (the ranks' clocks are
offset by seconds, so nothing can compare them). The expected figures are computed from the events the
builders returned, not from gpuprof's graph.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gpuprof.analysis import analyze
from gpuprof.distributed.jobpath import JOB_KINDS, JobPath
from gpuprof.distributed.merge import CrossRank
from gpuprof.report import Report
from gpuprof.trace.critpath.path import PATH_KINDS
from gpuprof_testing.realtraces import shared_path
from gpuprof_testing.tracegen import TraceBuilder, nccl_kernel

TRANSFER_US = 1_000.0
GEMM_US = 5_000.0
NOTHING = "nothing recorded on the main thread"
AR = nccl_kernel("AllReduce", "float")


@dataclass
class Rank:
    """What one rank does each step: compute, a sleep before its all-reduce, a host tail after it."""

    sleep_us: float = 0.0  # unrecorded host time before the all-reduce (a planted late rank)
    before_step_us: float = 0.0  # unrecorded host time before each step begins (enters the step late)
    tail_us: float = 0.0  # an operator after the all-reduce's sync (ends the step later)
    broadcast_us: float = 0.0  # a broadcast after the all-reduce that no other rank runs (matched on no rank)
    second_us: float = 0.0  # a second all-reduce, queued right behind the first on the NCCL stream
    gemm_us: float = GEMM_US  # the compute before the all-reduce (a slower GPU: longer)
    after_us: float = 0.0  # a kernel after the all-reduce on the compute stream that waits for it (its output)
    events: list[dict[str, Any]] = field(default_factory=list)  # per step: marker, all-reduce


def _step(tb: TraceBuilder, r: Rank, ar_us: float) -> tuple[dict[str, Any], dict[str, Any]]:
    if r.before_step_us:
        tb.idle(us=r.before_step_us)
    with tb.step():
        tb.gemm(us=r.gemm_us)
        if r.sleep_us:
            tb.idle(us=r.sleep_us)
        ar = tb.nccl(us=ar_us, wait_for_compute=True)
        if r.after_us:
            tb.kernel("after_collective", us=r.after_us, wait_for=(ar["args"]["stream"],))
        if r.second_us:
            tb.nccl(us=r.second_us, wait_for_compute=False)
        if r.broadcast_us:
            tb.nccl("Broadcast", us=r.broadcast_us, wait_for_compute=False)
        tb.device_synchronize()
        if r.tail_us:
            tb.cpu(us=r.tail_us, name="aten::tail_op")
    marker = next(e for e in reversed(tb.events) if e["name"].startswith("ProfilerStep#"))
    return marker, ar


def _job(tmp_path: Path, ranks: list[Rank], steps: int = 3, gaps: tuple[float, ...] = ()) -> list[Path]:
    """The ranks' traces: per step, each rank's all-reduce ends at the latest arrival plus the transfer (``gaps``:
    queued GPU work starts that long after what it waited for, cycled, as real GPUs do)."""
    tbs = [TraceBuilder(rank=k, world_size=len(ranks), start_us=5e9 + 7_654_321.0 * k, stream_gaps_us=gaps)
           for k in range(len(ranks))]
    for _ in range(steps):
        arrivals = []
        for tb, r in zip(tbs, ranks):  # a dry run tells each rank's arrival: its start does not depend on its length
            probe = copy.deepcopy(tb)
            _m, ar = _step(probe, r, TRANSFER_US)
            arrivals.append(ar["ts"] - tb.start_us)
        end = max(arrivals) + TRANSFER_US
        for tb, r, arr in zip(tbs, ranks, arrivals):
            marker, ar = _step(tb, r, end - arr)
            assert ar["ts"] - tb.start_us == pytest.approx(arr)
            r.events.append({"marker": marker, "ar": ar, "clock": tb.start_us})
    return [tb.write(tmp_path / f"rank{k}" / "t.pt.trace.json") for k, tb in enumerate(tbs)]


def _windows(r: Rank) -> list[tuple[float, float]]:
    """The rank's step windows (docs/architecture.md): each step to the next one's start, the last to its marker's
    end (its GPU work ends inside it, at the sync)."""
    marks = [(e["marker"]["ts"], e["marker"]["ts"] + e["marker"]["dur"]) for e in r.events]
    return [(a, marks[i + 1][0] if i + 1 < len(marks) else b) for i, (a, b) in enumerate(marks)]


def _tail(r: Rank) -> float:
    """Mean per step: from the all-reduce's end to the step's end."""
    return _mean([b - e["ar"]["ts"] - e["ar"]["dur"] for (_a, b), e in zip(_windows(r), r.events)])


def _before(r: Rank) -> float:
    """Mean per step: from the step's start to the all-reduce's start (the arrival)."""
    return _mean([e["ar"]["ts"] - a for (a, _b), e in zip(_windows(r), r.events)])


def _step_mean(r: Rank) -> float:
    return _mean([b - a for a, b in _windows(r)])


def _path(report: Report) -> JobPath:
    (sec,) = [s for s in report.sections if isinstance(s, CrossRank)]
    assert sec.critical_path is not None, sec.notes
    return sec.critical_path


def _on(cp: JobPath, kind: str, name: str, rank: int) -> float:
    return sum(p.us for p in cp.parts if (p.kind, p.name, p.rank) == (kind, name, rank))


def _sums(cp: JobPath) -> None:
    assert sum(p.us for p in cp.parts) == pytest.approx(cp.length_us, abs=1e-6)
    assert {p.kind for p in cp.parts} <= set(JOB_KINDS)
    assert all(p.us > 0 for p in cp.parts)
    assert sum(cp.ranks.values()) == pytest.approx(cp.length_us, abs=1e-6)


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def test_job_path_bad_a_late_rank_puts_its_sleep_on_the_job_path(tmp_path: Path) -> None:
    """Rank 1 sleeps 8 ms before its all-reduce (longer than its 5 ms gemm, so the sleep holds the collective);
    rank 0 waits inside its all-reduce. The job's path: rank 0's tail after the all-reduce, rank 1's transfer,
    rank 1's step up to its arrival, sleep included; rank 0's gemm and its wait are not on it."""
    ranks = [Rank(), Rank(sleep_us=8_000.0)]
    cp = _path(analyze([str(p) for p in _job(tmp_path, ranks)]))
    _sums(cp)
    r0, r1 = ranks
    # by hand, per step: rank 0 from the all-reduce's end to its step's end, rank 1 from its step's start to its
    # all-reduce's start, the transfer between
    tail0, before1, step0 = _tail(r0), _before(r1), _step_mean(r0)
    assert cp.length_us == pytest.approx(step0)
    assert cp.ranks[0] == pytest.approx(tail0, abs=0.01)
    assert cp.ranks[1] == pytest.approx(before1 + TRANSFER_US, abs=0.01)
    assert cp.length_us == pytest.approx(tail0 + TRANSFER_US + before1, abs=0.01)  # nothing unexplained
    assert _on(cp, "kernel", AR, 1) == pytest.approx(TRANSFER_US)  # the last arrival's collective: the transfer
    assert _on(cp, "kernel", AR, 0) == 0.0  # rank 0's 9 ms all-reduce (its wait) is not on the path
    assert 8_000.0 <= _on(cp, "idle", NOTHING, 1) <= 8_000.0 + 20.0  # the sleep, with the builder's call gaps
    assert not [p for p in cp.parts if "sgemm" in p.name or p.kind == "rank_wait"]  # both gemms hidden
    assert cp.last_ranks == {0: 3}


def test_job_path_bad_a_wait_inside_a_collective_crosses_to_the_late_rank(tmp_path: Path) -> None:
    """Rank 1 sleeps 8 ms before its all-reduce; rank 0 waits inside it. On both, the compute after the
    all-reduce waits for it (launched long before, started 4-9 µs after the all-reduce ended, as GPUs start queued
    work). Rank 0's wait is not a launch gap of its own: the path crosses the all-reduce to rank 1, the late rank."""
    gaps = (4.0, 6.0, 9.0, 5.0, 7.0, 8.0)
    ranks = [Rank(after_us=300.0), Rank(sleep_us=8_000.0, after_us=300.0)]
    cp = _path(analyze([str(p) for p in _job(tmp_path, ranks, gaps=gaps)]))
    _sums(cp)
    r0, r1 = ranks
    before1 = _before(r1)
    assert _on(cp, "kernel", AR, 1) == pytest.approx(TRANSFER_US)  # the late rank's collective: the transfer
    assert 8_000.0 <= _on(cp, "idle", NOTHING, 1) <= 8_000.0 + 20.0
    # per step: the tail of the rank that ended it last (the ranks' tails differ by the GPU's few-µs gaps), the
    # transfer, rank 1's step up to its arrival, sleep included
    assert cp.ranks[1] >= before1 + TRANSFER_US - 0.01
    assert cp.length_us == pytest.approx(_tail(r0) + TRANSFER_US + before1, abs=10.0)
    assert _on(cp, "kernel", "after_collective", 0) + _on(cp, "kernel", "after_collective", 1) == pytest.approx(300.0)
    # the waiting rank's part is at most its tail after the all-reduce: its wait is no launch gap, no rank_wait
    assert cp.ranks.get(0, 0.0) <= _tail(r0) + 0.01
    assert not [p for p in cp.parts if p.kind in ("launch_gap", "rank_wait") and p.us > 50.0]


def test_job_path_bad_three_ranks_the_last_to_end_and_the_last_to_arrive(tmp_path: Path) -> None:
    """Rank 1 runs a 300 µs operator after the sync (it ends every step last: the path starts there); rank 2
    sleeps 7 ms before its all-reduce (the others wait for it: the path goes on there)."""
    ranks = [Rank(), Rank(tail_us=300.0), Rank(sleep_us=7_000.0)]
    cp = _path(analyze([str(p) for p in _job(tmp_path, ranks)]))
    _sums(cp)
    assert cp.last_ranks == {1: 3}
    assert _on(cp, "operator", "aten::tail_op", 1) == pytest.approx(300.0)
    r1, r2 = ranks[1], ranks[2]
    # the job's step is rank 1's window; rank 2 began its steps after the first 300 µs earlier than rank 1 (it
    # ended the previous one sooner): of its time before its arrival, what lies inside rank 1's window
    w1, w2 = _windows(r1), _windows(r2)
    inside = [min(e2["ar"]["ts"] - a2, e1["ar"]["ts"] + e1["ar"]["dur"] - a1 - TRANSFER_US)
              for (a1, _b1), (a2, _b2), e1, e2 in zip(w1, w2, r1.events, r2.events)]
    befores = [e["ar"]["ts"] - a for (a, _b), e in zip(w2, r2.events)]
    assert inside[0] == pytest.approx(befores[0])  # the first step: both began together
    assert all(x == pytest.approx(b - 300.0, abs=1.0) for x, b in zip(inside[1:], befores[1:]))
    assert cp.ranks[2] == pytest.approx(_mean(inside) + TRANSFER_US, abs=0.01)
    assert cp.ranks[1] == pytest.approx(_tail(r1), abs=0.01)
    assert 0 not in cp.ranks  # rank 0 neither ended last nor arrived last
    assert cp.length_us == pytest.approx(_step_mean(r1))
    assert not [p for p in cp.parts if p.kind == "rank_wait"]


def test_job_path_bad_a_slower_gpu_puts_its_compute_on_the_job_path(tmp_path: Path) -> None:
    """Rank 1's gemm takes 9 ms against rank 0's 5 ms; its all-reduce waits for it on the GPU (the NCCL stream
    waits for the compute stream's event). The job's path: rank 1's gemm, whole, then the transfer."""
    ranks = [Rank(), Rank(gemm_us=9_000.0)]
    cp = _path(analyze([str(p) for p in _job(tmp_path, ranks)]))
    _sums(cp)
    sgemm = [p for p in cp.parts if p.kind == "kernel" and "sgemm" in p.name]
    assert [(p.rank, p.us) for p in sgemm] == [(1, pytest.approx(9_000.0))]  # rank 0's gemm is not on it
    assert _on(cp, "kernel", AR, 1) == pytest.approx(TRANSFER_US)
    assert cp.ranks[1] == pytest.approx(_before(ranks[1]) + TRANSFER_US, abs=0.01)
    assert _on(cp, "idle", "wait for another stream", 1) == pytest.approx(0.0, abs=1.0)  # the NCCL stream's wait


def test_job_path_bad_a_queued_collective_hands_the_path_to_the_one_before_it(tmp_path: Path) -> None:
    """Two all-reduces back to back on the NCCL stream; rank 1 sleeps before the first. The second starts on every
    rank when the first ends (queued behind it: no one waits there), so the path crosses it on rank 0, goes on to
    the first, and there to rank 1, the last to arrive."""
    ranks = [Rank(second_us=500.0), Rank(sleep_us=8_000.0, second_us=500.0)]
    cp = _path(analyze([str(p) for p in _job(tmp_path, ranks)]))
    _sums(cp)
    r0, r1 = ranks
    tail0 = _mean([b - e["ar"]["ts"] - e["ar"]["dur"] for (_a, b), e in zip(_windows(r0), r0.events)]) - 500.0
    assert _on(cp, "kernel", AR, 0) == pytest.approx(500.0)  # the second all-reduce, on the rank the path began on
    assert _on(cp, "kernel", AR, 1) == pytest.approx(TRANSFER_US)  # the first: the transfer, on the last arrival
    assert cp.ranks[0] == pytest.approx(tail0 + 500.0, abs=0.01)
    assert cp.ranks[1] == pytest.approx(_before(r1) + TRANSFER_US, abs=0.01)
    assert 8_000.0 <= _on(cp, "idle", NOTHING, 1) <= 8_000.0 + 20.0
    assert not [p for p in cp.parts if p.kind == "rank_wait"]


def test_job_path_bad_an_unmatched_collective_stays_on_its_rank(tmp_path: Path) -> None:
    """Rank 1 broadcasts 500 µs after the all-reduce, alone (no other rank has a broadcast to match): it ends the
    steps last, the broadcast is its own time on the path, and the path goes on from the all-reduce it queued
    behind, to rank 2, the last to arrive there."""
    ranks = [Rank(), Rank(broadcast_us=500.0), Rank(sleep_us=7_000.0)]
    cp = _path(analyze([str(p) for p in _job(tmp_path, ranks)]))
    _sums(cp)
    assert cp.last_ranks == {1: 3}
    assert _on(cp, "kernel", nccl_kernel("Broadcast", "float"), 1) == pytest.approx(500.0)
    assert _on(cp, "kernel", AR, 2) == pytest.approx(TRANSFER_US)
    assert cp.ranks[1] == pytest.approx(_tail(ranks[1]), abs=0.01)  # the broadcast and the sync after it
    assert not [p for p in cp.parts if p.kind == "rank_wait"]


def test_job_path_bad_a_rank_that_enters_the_step_late_is_a_rank_wait(tmp_path: Path) -> None:
    """Rank 1 idles 6 ms before each of its steps begins: inside the step nothing explains the others' wait, so
    the job's path says that rank 1 entered the step late, for the time its own path does not cover."""
    ranks = [Rank(), Rank(before_step_us=6_000.0)]
    cp = _path(analyze([str(p) for p in _job(tmp_path, ranks)]))
    _sums(cp)
    r0, r1 = ranks
    step0, before1, tail0 = _step_mean(r0), _before(r1), _tail(r0)
    late = _on(cp, "rank_wait", "rank 1 entered the step late", 1)
    assert late == pytest.approx(step0 - tail0 - TRANSFER_US - before1, abs=0.01)
    assert late == pytest.approx(6_000.0, abs=20.0)


def test_job_path_good_identical_ranks_follow_the_first_rank_own_path(tmp_path: Path) -> None:
    """With no late rank the path never leaves the rank that ends the step: the per-trace path, on rank 0."""
    report = analyze([str(p) for p in _job(tmp_path, [Rank(), Rank()])])
    cp = _path(report)
    _sums(cp)
    own = next(t for t in report.traces if t.rank == 0).critical_path
    assert own is not None
    assert cp.length_us == pytest.approx(own.length_us)
    assert {(p.kind, p.name): p.us for p in cp.parts} == pytest.approx({(p.kind, p.name): p.us for p in own.parts})
    assert set(cp.ranks) == {0}


def test_job_path_good_summaries_without_segments_leave_it_out_with_a_note(tmp_path: Path) -> None:
    """Summaries of an older gpuprof (no path fields) still merge; the job's path is left out and said."""
    import msgspec

    from gpuprof.distributed.analysis import cross_rank
    from gpuprof.distributed.summary import summarize
    from gpuprof.trace.load import load_trace
    from gpuprof.trace.metrics import compute_metrics

    sums = [summarize(compute_metrics(load_trace(str(p)))) for p in _job(tmp_path, [Rank(), Rank(sleep_us=8_000.0)])]
    old = [msgspec.structs.replace(s, path_seg_end=[], path_seg_off=[], path_seg_early=[], path_piece_kind=[],
                                   path_piece_name=[], path_piece_us=[], inst_path_name=[], path_names=[],
                                   path_step_start=[], path_step_end=[]) for s in sums]
    job, _found = cross_rank(old)
    assert job.critical_path is None and job.to_dict()["critical_path"] is None
    assert any("no job critical path" in n for n in job.notes)
    assert cross_rank(sums)[0].critical_path is not None


def test_job_path_in_json_terminal_and_markdown(tmp_path: Path) -> None:
    from gpuprof.render import render

    report = analyze([str(p) for p in _job(tmp_path, [Rank(), Rank(sleep_us=8_000.0)])])
    import json

    doc = json.loads(render(report, "json"))
    (sec,) = [s for s in doc["sections"] if s["kind"] == "cross_rank"]
    assert sec["version"] == "1.2"
    cp = sec["critical_path"]
    assert sum(p["us"] for p in cp["parts"]) == pytest.approx(cp["length_us"], abs=1e-6)
    assert {tuple(p) for p in cp["parts"]} == {("kind", "name", "rank", "us")}
    assert [r["rank"] for r in cp["ranks"]] == [1, 0]  # most time on the path first
    for fmt in ("terminal", "markdown"):
        out = render(report, fmt)
        assert "job critical path" in out.lower() and "rank wait" not in out
        assert AR[:20] in out


def test_job_path_survives_a_node_report_round_trip(tmp_path: Path) -> None:
    """Node reports carry the segments: merging them later gives the same job path as the traces."""
    from click.testing import CliRunner

    from gpuprof.cli import cli

    paths = _job(tmp_path, [Rank(), Rank(sleep_us=8_000.0)])
    for k, p in enumerate(paths):
        res = CliRunner().invoke(cli, ["analyze", str(p), "--format", "json", "-o", str(tmp_path / f"node{k}.json")])
        assert res.exit_code in (0, 1), res.output
    merged = analyze([str(tmp_path / "node0.json"), str(tmp_path / "node1.json")])
    direct = analyze([str(p) for p in paths])
    a, b = _path(merged), _path(direct)
    assert a.length_us == pytest.approx(b.length_us) and a.last_ranks == b.last_ranks
    assert [(p.kind, p.name, p.rank) for p in a.parts] == [(p.kind, p.name, p.rank) for p in b.parts]
    assert [p.us for p in a.parts] == pytest.approx([p.us for p in b.parts], abs=0.01)  # (pieces kept to 1 ns)


HTA = ("hta", "HolisticTraceAnalysis", "tests", "data")
PAIR = [("timeline_analysis", "sampled_rank-0.json.gz"), ("trace_filter", "sampled_rank-1.json.gz")]


def test_job_path_real_sampled_ranks_of_a_128_rank_job_sum_to_the_job_step() -> None:
    """Two real ranks of a 128-rank NCCL job: the job's path tiles the job's step, whose mean is the mean step of
    the rank that ended each step last, and lies within the ranks' mean steps."""
    report = analyze([str(shared_path(*HTA, f, n)) for f, n in PAIR])
    cp = _path(report)
    _sums(cp)
    means = {t.rank: t.step_time_mean_us for t in report.traces}
    assert cp.steps >= 1 and set(cp.last_ranks) <= set(means)
    if len(cp.last_ranks) == 1:
        (last,) = cp.last_ranks
        assert cp.length_us == pytest.approx(means[last])
    assert min(means.values()) - 1.0 <= cp.length_us <= max(means.values()) + 1.0
    assert set(cp.ranks) <= set(means)


@pytest.mark.slow  # slow pass: a real trace (or job) analysed whole; the README's fast command stays under 300 CPU s on a 2-core VM
def test_job_path_real_trace_copies_on_skewed_clocks_follow_the_trace_own_path(tmp_path: Path) -> None:
    """The real 2-rank A100 NCCL trace as two identical ranks, the second on a clock 1,000 s ahead: no rank waits
    for the other, so the job's path is the trace's own path, whatever the clocks say."""
    import gzip
    import json

    src = shared_path(*HTA, "nccl_parser_config", "nccl_data.json.gz")
    paths = []
    for rank, shift in ((0, 0.0), (1, 1e9)):
        d = json.loads(gzip.open(src).read())
        d["distributedInfo"] = {**d.get("distributedInfo", {}), "rank": rank, "world_size": 2}
        for e in d["traceEvents"]:
            if isinstance(e.get("ts"), (int, float)):
                e["ts"] += shift
        paths.append(tmp_path / f"rank{rank}.json")
        paths[-1].write_text(json.dumps(d))
    report = analyze([str(p) for p in paths])
    cp = _path(report)
    _sums(cp)
    own = next(t for t in report.traces if t.rank == 0).critical_path
    assert own is not None and cp.length_us == pytest.approx(own.length_us)
    assert set(cp.ranks) == {0} and cp.last_ranks == {0: cp.steps}  # ties go to the first rank
    mine = {(p.kind, p.name): p.us for p in cp.parts}
    for p in own.parts[:8]:  # the largest: named in every step's segment, whole
        assert mine[(p.kind, p.name)] == pytest.approx(p.us, abs=0.01)


def _random_job(data: Any, n_ranks: int, steps: int, per_step: int) -> list[Any]:
    """Rank summaries with arbitrary (valid) path segments and collective durations."""
    import hypothesis.strategies as st

    from gpuprof.distributed.jobpath import path_problem
    from gpuprof.distributed.summary import RankSummary

    us = st.floats(0.0, 5_000.0, allow_nan=False)
    out = []
    for k in range(n_ranks):
        n = steps * per_step
        starts = [s * 100_000.0 + 1e9 * k for s in range(steps)]
        ends = [a + data.draw(st.floats(1_000.0, 90_000.0)) for a in starts]
        inst_start = [starts[i // per_step] + 10.0 * (i % per_step) for i in range(n)]
        seg_end, off, kinds, names, pieces, early = [], [0], [], [], [], []
        for seg in range(steps + n):
            # a segment reaches an earlier collective of its step, its step's start, or was not walked
            step = seg if seg < steps else (seg - steps) // per_step
            first = step * per_step
            limit = per_step if seg < steps else (seg - steps) - first
            choices = [-1, -2] + [first + j for j in range(max(limit, 0))]
            seg_end.append(data.draw(st.sampled_from(choices)))
            m = data.draw(st.integers(0, 5))
            kinds += data.draw(st.lists(st.integers(0, len(PATH_KINDS) - 1), min_size=m, max_size=m))
            names += [0] * m
            pieces += data.draw(st.lists(us, min_size=m, max_size=m))
            early.append(data.draw(st.integers(0, m)))
            off.append(off[-1] + m)
        s = RankSummary(
            version=1, path=f"rank{k}", rank=k, world_size=n_ranks, backend="nccl", device="GPU", num_steps=steps,
            step_us=1.0, step_mean_us=1.0, compute_us=0.0, comm_us=0.0, exposed_comm_us=0.0, data_loading_us=0.0,
            host_us=0.0, sync_us=0.0, unrecorded_us=0.0, collectives=[], inst_type=[0] * n,
            inst_dur=data.draw(st.lists(us, min_size=n, max_size=n)), inst_bytes=[-1] * n, inst_group=[-1] * n,
            inst_step=[i // per_step for i in range(n)], inst_start=inst_start, ddp_forwards=0, ddp_sync_rounds=0,
            optimizer_steps=0, inst_path_name=[0] * n, path_names=["x"], path_step_start=starts, path_step_end=ends,
            path_seg_end=seg_end, path_seg_off=off, path_seg_early=early, path_piece_kind=kinds,
            path_piece_name=names, path_piece_us=pieces)
        assert path_problem(s) is None
        out.append(s)
    return out


@pytest.mark.slow  # slow pass: a real trace (or job) analysed whole; the README's fast command stays under 300 CPU s on a 2-core VM
def test_job_path_any_valid_segments_add_up_and_never_crash() -> None:
    """Property: whatever the segments and durations (valid per path_problem), the parts of the job's path add up
    to its length, none negative, every kind known, and every rank on it is one of the job's."""
    import hypothesis.strategies as st
    from hypothesis import HealthCheck, given, settings

    from gpuprof.distributed.jobpath import job_path

    @settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.data(), st.integers(2, 5), st.integers(1, 3), st.integers(0, 4))
    def check(data: Any, n_ranks: int, steps: int, per_step: int) -> None:
        sums = _random_job(data, n_ranks, steps, per_step)
        cp = job_path(list(range(n_ranks)), sums)
        assert cp is not None
        assert sum(p.us for p in cp.parts) == pytest.approx(cp.length_us, rel=1e-9, abs=1e-6)
        assert all(p.us > 0 for p in cp.parts) and {p.kind for p in cp.parts} <= set(JOB_KINDS)
        assert set(cp.ranks) <= set(range(n_ranks))
        spans = [[s.path_step_end[i] - s.path_step_start[i] for s in sums] for i in range(steps)]
        assert min(map(min, spans)) - 1e-6 <= cp.length_us <= max(map(max, spans)) + 1e-6

    check()

"""The straggler verdict from every step of every rank (GP707, gpuprof.distributed.series) on synthetic series
beside a real rank summary (HTA's 2-rank NCCL trace: the recorded window's part)."""

from __future__ import annotations

import random

import msgspec
import pytest

from gpuprof.distributed.analysis import cross_rank
from gpuprof.distributed.reports import problem_in
from gpuprof.distributed.series import series_straggler
from gpuprof.distributed.summary import RankSeries, RankSummary, summarize
from gpuprof.trace.load import load_trace
from gpuprof.trace.metrics import compute_metrics
from gpuprof_testing.realtraces import shared_path


@pytest.fixture(scope="module")
def real() -> RankSummary:
    path = shared_path("hta", "HolisticTraceAnalysis", "tests", "data", "nccl_parser_config", "nccl_data.json.gz")
    return summarize(compute_metrics(load_trace(path)))


def _series(n: int, step_ms: float, data_ms: list[float], seed: int, bucket: int = 1) -> RankSeries:
    rnd = random.Random(seed)
    return RankSeries(bucket=bucket, first_step=[i * bucket for i in range(n)],
                      step_us=[step_ms * 1000 * (1 + rnd.uniform(-0.05, 0.05)) for _ in range(n)],
                      data_wait_us=[max(0.0, d * 1000 + rnd.uniform(-300, 300)) for d in data_ms])


def _job(real: RankSummary, series: list[RankSeries]) -> list[RankSummary]:
    return [msgspec.structs.replace(real, rank=r, path=f"rank{r}", world_size=len(series), series=s)
            for r, s in enumerate(series)]


def test_a_rank_20ms_slower_for_data_every_step_is_named_with_its_cost_and_split(real: RankSummary) -> None:
    n = 100
    series = [_series(n, 150, [1.0] * n, 0), _series(n, 150, [21.0] * n, 1)]
    v = series_straggler(_job(real, series))
    assert v is not None and v.rank == 1 and v.last_points == n and v.points == n
    assert v.excess_us == pytest.approx(20_000, abs=600)
    assert v.data_wait_us == pytest.approx(21_000, abs=400) and v.others_data_wait_us == pytest.approx(1000, abs=400)
    assert [round(s, 2) for _, _, s in v.quarters] == [1.0] * 4
    _, found = cross_rank(_job(real, series))
    gp707 = next(f for f in found if f.code == "GP707")
    assert "rank 1 of 2" in gp707.message and "100 of 100 common steps" in gp707.message
    assert "data wait 21" in gp707.message and "in every quarter of the job" in gp707.message
    assert gp707.cost_us_per_step == pytest.approx(20_000, abs=600)
    assert "GP701" not in {f.code for f in found} or "rank 1" not in next(f.message for f in found if f.code == "GP701")


def test_four_ranks_and_buckets(real: RankSummary) -> None:
    n = 60
    series = [_series(n, 80, [0.5] * n, r, bucket=4) for r in range(4)]
    series[2] = _series(n, 80, [12.0] * n, 9, bucket=4)
    v = series_straggler(_job(real, series))
    assert v is not None and v.rank == 2 and v.steps == 240 and v.bucket == 4
    assert v.quarters[0][:2] == (0, 4 * 15 - 1)


def test_a_straggler_only_in_the_second_half_is_said_not_throughout(real: RankSummary) -> None:
    n = 100
    series = [_series(n, 100, [1.0] * n, 0), _series(n, 100, [1.0] * 40 + [31.0] * 60, 1)]
    _, found = cross_rank(_job(real, series))
    gp707 = next(f for f in found if f.code == "GP707")
    assert "not throughout the job" in gp707.message and "steps 0-24 0%" in gp707.message


def test_balanced_ranks_taking_turns_or_too_cheap_name_no_one(real: RankSummary) -> None:
    n = 100
    same = [_series(n, 100, [5.0] * n, 0), _series(n, 100, [5.0] * n, 1)]
    assert series_straggler(_job(real, same)) is None
    turns = [_series(n, 100, [20.0 if i % 2 else 1.0 for i in range(n)], 0),
             _series(n, 100, [1.0 if i % 2 else 20.0 for i in range(n)], 1)]
    assert series_straggler(_job(real, turns)) is None
    cheap = [_series(n, 400, [1.0] * n, 0), _series(n, 400, [11.0] * n, 1)]  # 10 ms of a 400 ms step: 2.5%
    assert series_straggler(_job(real, cheap)) is None
    few = [_series(5, 100, [1.0] * 5, 0), _series(5, 100, [21.0] * 5, 1)]
    assert series_straggler(_job(real, few)) is None
    no_data = [msgspec.structs.replace(s, data_wait_us=[]) for s in _series_pair(n)]
    assert series_straggler(_job(real, no_data)) is None


def _series_pair(n: int) -> list[RankSeries]:
    return [_series(n, 150, [1.0] * n, 0), _series(n, 150, [21.0] * n, 1)]


@pytest.mark.parametrize("bad, said", [
    ({"step_us": [1.0, float("nan")]}, "finite"),
    ({"first_step": [0]}, "'series.first_step' has 1 values"),
    ({"data_wait_us": [1.0, -5.0]}, "not negative"),
    ({"first_step": [3, 1]}, "not increasing"),
    ({"bucket": 0}, "1 or more"),
])
def test_a_hostile_series_is_refused_naming_the_field(real: RankSummary, bad: dict, said: str) -> None:
    base = RankSeries(bucket=1, first_step=[0, 1], step_us=[1.0, 2.0], data_wait_us=[0.0, 0.0])
    s = msgspec.structs.replace(real, series=msgspec.structs.replace(base, **bad))
    problem = problem_in(s)
    assert problem is not None and said in problem

"""The straggler verdict from every step of every rank: the watch's per-step series, gathered to rank 0.

The recorded window holds a few steps; the watch times every step. Each rank's
series (step time, data wait, memory: :class:`~gpuprof.distributed.summary.RankSeries`)
travels with its summary through the cross-rank gather, and
:func:`series_straggler` reads the steps every rank measured:

* in a job whose ranks meet in collectives every step, their step times are
  alike (the fast ranks wait inside the collectives), so the step time does
  not say who is slow; the time a rank spends waiting for its own data does,
  and it is measured on every rank, every step. A rank whose data wait exceeds
  every other rank's by more than the floor (``max(0.5 ms, 2% of the step)``)
  in a step is that step's last rank;
* the straggler is the rank last in at least ``min_last_share`` of the common
  steps whose median excess over the median other rank is at least
  ``min_wait_share`` of the median step: the others wait that long per step in
  their collectives (the cost);
* its split per step (data wait, the rest: host and compute with its own
  collective time) and the recurrence over the job (the share of steps it is
  last in each quarter) come with it.

A straggler slow in its host or compute work has no data-wait excess: the
series cannot see it (the watch does not time collectives); the recorded
window's arrival order (GP701) does. Nothing here imports torch.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from gpuprof.distributed.summary import RankSeries, RankSummary

__all__ = ["SeriesStraggler", "series_straggler", "straggler_of", "series_problem", "MAX_POINTS", "series_of_job"]

MAX_POINTS = 20_000  # a series the watch writes is at most a few thousand points
FLOOR_US = 500.0
FLOOR_SHARE = 0.02
MIN_POINTS = 10  # fewer common points: no verdict from the series


@dataclass
class SeriesStraggler:
    """The rank the series names, and what it costs the others (µs per step)."""

    rank: int
    ranks: int  # ranks whose series were compared
    points: int  # common points (buckets)
    steps: int  # common steps
    bucket: int
    last_points: int  # points at which it was last
    excess_us: float  # its median data-wait excess over the median other rank: the others' wait per step
    step_us: float  # the median step (median over ranks of each point, then over points)
    data_wait_us: float  # its median data wait per step
    others_data_wait_us: float  # the median other rank's
    rest_us: float  # its step minus its data wait (host and compute, its own collective time), median
    quarters: list[tuple[int, int, float]] = field(default_factory=list)  # (first step, last step, share last)

    @property
    def last_share(self) -> float:
        return self.last_points / self.points if self.points else 0.0


def series_of_job(job: object) -> RankSeries | None:
    """The :class:`RankSeries` of a report's ``job`` (a :class:`gpuprof.report.JobSummary`), or None."""
    series = getattr(job, "series", None)
    if series is None or not getattr(series, "step_time_us", None):
        return None
    n = len(series.step_time_us)
    data = list(series.data_wait_us or [])
    mem = list(series.cuda_allocated_mib or [])
    return RankSeries(bucket=int(series.bucket), first_step=[int(x) for x in series.first_step[:n]],
                      step_us=[float(x) for x in series.step_time_us],
                      data_wait_us=[float(x) for x in data] if len(data) == n else [],
                      memory_mib=[float(x) for x in mem] if len(mem) == n else [])


def series_problem(s: RankSeries) -> str | None:
    """What is wrong with a decoded series (naming the field), or None."""
    import math

    n = len(s.step_us)
    if s.bucket < 1:
        return f"field 'series.bucket' is {s.bucket}; it is 1 or more"
    if n > MAX_POINTS:
        return f"field 'series.step_us' has {n} points; a watch writes at most {MAX_POINTS}"
    if len(s.first_step) != n:
        return f"field 'series.first_step' has {len(s.first_step)} values, 'series.step_us' {n}"
    for name in ("data_wait_us", "memory_mib"):
        v = getattr(s, name)
        if v and len(v) != n:
            return f"field 'series.{name}' has {len(v)} values, 'series.step_us' {n}"
    for name in ("first_step", "step_us", "data_wait_us", "memory_mib"):
        for x in getattr(s, name):
            if not math.isfinite(x) or x < 0:
                return f"field 'series.{name}' holds {x}; numbers must be finite and not negative"
    if any(b <= a for a, b in zip(s.first_step, s.first_step[1:])):
        return "field 'series.first_step' is not increasing"
    return None


def series_straggler(summaries: Sequence[RankSummary], min_wait_share: float = 0.05,
                     min_last_share: float = 0.5) -> SeriesStraggler | None:
    """The straggler the ranks' series name (module docstring), or None (no series, no data wait, no rank
    last often enough or costly enough)."""
    return straggler_of({s.rank: s.series for s in summaries if s.rank is not None and s.series is not None},
                        min_wait_share, min_last_share)


def straggler_of(by_rank: Mapping[int, RankSeries], min_wait_share: float = 0.05,
                 min_last_share: float = 0.5) -> SeriesStraggler | None:
    """:func:`series_straggler` of the ranks' series themselves (the hang report reads them from hang.json)."""
    series = {r: s for r, s in by_rank.items() if s.data_wait_us}
    if len(series) < 2 or len({s.bucket for s in series.values()}) != 1:
        return None
    ranks = sorted(series)
    common = set(series[ranks[0]].first_step)
    for r in ranks[1:]:
        common &= set(series[r].first_step)
    steps = sorted(common)
    if len(steps) < MIN_POINTS:
        return None
    index = {r: {st: i for i, st in enumerate(series[r].first_step)} for r in ranks}
    data = {r: [series[r].data_wait_us[index[r][st]] for st in steps] for r in ranks}
    step = {r: [series[r].step_us[index[r][st]] for st in steps] for r in ranks}
    step_of_point = [statistics.median(step[r][i] for r in ranks) for i in range(len(steps))]

    def excess(r: int, i: int) -> float:
        return data[r][i] - statistics.median(data[o][i] for o in ranks if o != r)

    best = max(ranks, key=lambda r: statistics.median(excess(r, i) for i in range(len(steps))))
    exc = [excess(best, i) for i in range(len(steps))]
    last = [all(data[best][i] - data[o][i] > max(FLOOR_US, FLOOR_SHARE * step_of_point[i]) for o in ranks if o != best)
            for i in range(len(steps))]
    median_step = statistics.median(step_of_point)
    cost = statistics.median(exc)
    if sum(last) < min_last_share * len(steps) or cost < min_wait_share * median_step or cost <= 0:
        return None
    bucket = series[best].bucket
    quarters: list[tuple[int, int, float]] = []
    n = len(steps)
    for k in range(4):  # four parts of (nearly) equal length
        lo, hi = k * n // 4, (k + 1) * n // 4
        if hi > lo:
            quarters.append((steps[lo], steps[hi - 1] + bucket - 1, sum(last[lo:hi]) / (hi - lo)))
    others = [o for o in ranks if o != best]
    return SeriesStraggler(
        rank=best, ranks=len(ranks), points=len(steps), steps=len(steps) * bucket, bucket=bucket,
        last_points=sum(last), excess_us=cost, step_us=median_step,
        data_wait_us=statistics.median(data[best]),
        others_data_wait_us=statistics.median(statistics.median(data[o][i] for o in others) for i in range(len(steps))),
        rest_us=statistics.median(step[best][i] - data[best][i] for i in range(len(steps))),
        quarters=quarters)

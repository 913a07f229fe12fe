"""Every rank's per-step series up to a hang, in ``hang.json`` and ``hang.md`` (issue 41.1).

At the end of a run each rank's watch series (step time, data wait, memory) reaches rank 0 through the
process group's store (:mod:`gpuprof.capture.end.gather`). At a hang that path is the wrong one: the store
is served by rank 0's process, whose collectives are what is stuck, and the rank that never reaches the
collective may be the one that would have to answer. So each rank's watchdog puts its own series into its
own entry of ``hang.json`` in the run directory, the file the ranks already share under a lock
(:func:`gpuprof.capture.job.hang.write_hang_files`): no rank waits for another, a wedged store or a dead
rank costs nothing, and ``hang.md``, rewritten from the merged entries by every rank that writes, carries
every rank's series that has arrived. Ranks on machines that do not share the run directory each write
their own machine's file.

The series is the report's compact series (:func:`gpuprof.capture.job.phases.compact_series`) of the steps
so far, at most :data:`MAX_HANG_POINTS` points (a bucket of steps per point beyond), so that ``hang.json``
of a large job stays far under its size bound. A series read back from the file is checked before use: a
column that is not a list of finite numbers is left out of ``hang.md``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover - annotations only
    from gpuprof.distributed.summary import RankSeries

__all__ = ["MAX_HANG_POINTS", "series_lines", "straggler_line"]  # the series itself: capture.job.control

MAX_HANG_POINTS = 500  # points of a rank's series in hang.json, at most
LAST_POINTS = 5  # the last points shown in hang.md


def _column(series: dict[str, object], name: str, n: int | None = None) -> list[float] | None:
    """``series[name]`` when it is a list of finite numbers (of length ``n`` when given), else None."""
    col = series.get(name)
    if not isinstance(col, list) or not col or (n is not None and len(col) != n):
        return None
    out = []
    for x in col:
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
            return None
        out.append(float(x))
    return out


def _ms(us: float) -> str:
    return f"{us / 1000:.1f}" if us >= 1000 else f"{us / 1000:.2f}"


def _rank_series(r: dict[str, object]) -> RankSeries | None:
    """A hang.json entry's series as the cross-rank gather carries it, or None when it is not a valid one."""
    import msgspec

    from gpuprof.distributed.series import series_problem
    from gpuprof.distributed.summary import RankSeries

    s = r.get("series")
    if not isinstance(s, dict):
        return None
    steps = _column(s, "step_time_us")
    n = len(steps) if steps else None
    try:
        out = msgspec.convert({"bucket": s.get("bucket"), "first_step": s.get("first_step"), "step_us": steps,
                               "data_wait_us": _column(s, "data_wait_us", n) or [],
                               "memory_mib": _column(s, "cuda_allocated_mib", n) or []}, RankSeries)
    except msgspec.ValidationError:
        return None
    return out if series_problem(out) is None else None


def straggler_line(ranks: Sequence[dict[str, object]]) -> str | None:
    """The straggler the ranks' series up to the hang name (:func:`gpuprof.distributed.series.straggler_of`:
    the rank that waited for its data longer than every other in most common steps), in words; None."""
    from gpuprof.distributed.series import straggler_of

    by_rank: dict[int, RankSeries] = {}
    for r in ranks:
        rank, s = r.get("rank"), _rank_series(r)
        if isinstance(rank, int) and not isinstance(rank, bool) and s is not None:
            by_rank[rank] = s
    v = straggler_of(by_rank)
    if v is None:
        return None
    return (f"**Before the hang:** rank {v.rank} waited for its data longer than every other rank in "
            f"{v.last_points} of the {v.points} common points ({v.steps} steps), {_ms(v.excess_us)} ms a step "
            f"more than the median other rank (its median step {_ms(v.step_us)} ms): the others waited that long "
            f"for it in their collectives. It is a straggler, not the hang's cause by itself.")


def series_lines(ranks: Sequence[dict[str, object]]) -> list[str]:
    """``hang.md``'s section on every rank's steps up to the hang (none when no entry holds a series)."""
    from gpuprof.render.markdown import md_escape

    rows = []
    for r in ranks:
        s = r.get("series")
        if not isinstance(s, dict):
            continue
        steps = _column(s, "step_time_us")
        first = _column(s, "first_step", len(steps) if steps else None)
        bucket = s.get("bucket")
        if steps is None or first is None or not isinstance(bucket, int) or isinstance(bucket, bool) or bucket < 1:
            continue
        n = len(steps)
        wait = _column(s, "data_wait_us", n)
        rss = _column(s, "host_rss_mib", n)
        cuda = _column(s, "cuda_allocated_mib", n)
        rank = r.get("rank")
        rows.append(
            f"| {md_escape(str(rank if rank is not None else r.get('worker')))} | {int(first[-1]) + bucket} "
            f"| {_ms(statistics.median(steps))} | {', '.join(_ms(x) for x in steps[-LAST_POINTS:])} "
            f"| {_ms(statistics.median(wait)) if wait else '-'} "
            f"| {f'{rss[0]:.0f} → {rss[-1]:.0f}' if rss else '-'} | {f'{cuda[-1]:.0f}' if cuda else '-'} |")
    if not rows:
        return []
    verdict = straggler_line(ranks)
    return ["", "## Every rank's steps up to the hang", "", *([verdict, ""] if verdict else []),
            "From each rank's watch (`series` in its `hang.json` entry: one point per step, or the median of a "
            "bucket of steps in a long job). Times in ms, memory in MiB.", "",
            "| rank | steps | median step | last steps | median data wait | host RSS first → last | CUDA allocated |",
            "|---|---|---|---|---|---|---|", *rows]

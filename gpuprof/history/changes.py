"""Change points in a run history, and the runs where a finding appeared or disappeared.

The test (docs/history.md), for one metric's series over the runs that have it:

* every split of the series into *before* (at least :data:`MIN_RUNS` runs)
  and *after* (at least :data:`MIN_RUNS`) is a candidate; its shift is the
  median after minus the median before;
* the noise is the pooled MAD of the runs' run-to-run differences (the
  median of ``|x[i+1] - x[i]|`` over the runs tested, times 1.4826 / sqrt(2):
  a standard deviation for normal noise, which a level shift moves by one
  difference only), and never below :data:`FLOOR` of the median before, so
  runs that repeat one figure exactly do not make a 0.1 % wobble a change;
* the candidate split is the one whose runs lie closest to their own side's
  median (least total absolute deviation); it is a change point when its
  shift exceeds :data:`K` times the noise; the test is then repeated on each side
  (binary segmentation), so a history with two changes marks both.

Medians and MAD make one outlier run (a slow node, a cold cache) move
neither side; the runs of one side vary as much as its noise, so a shift
below K times it is noise.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass

from gpuprof.stats import least_absolute_split, segments, step_noise

__all__ = ["K", "MIN_RUNS", "FLOOR", "ChangePoint", "FindingChange", "change_points", "finding_changes"]

K = 4.0  # a shift must exceed 4 noise widths
MIN_RUNS = 2  # on each side of a split
FLOOR = 0.01  # the noise is at least 1 % of the median before


@dataclass(frozen=True)
class ChangePoint:
    run: str  # the first run after the change
    metric: str
    before: float  # median of the runs before (back to the previous change point)
    after: float  # median of the runs after (up to the next change point)


@dataclass(frozen=True)
class FindingChange:
    code: str
    run: str
    change: str  # "appeared" or "disappeared"


def _split(xs: list[float]) -> Callable[[int, int], int | None]:
    """For :func:`gpuprof.stats.segments`: where ``xs[lo:hi]`` splits, or None.

    Where: the split whose sides are closest to their own medians (least total absolute deviation: a
    robust least-squares). Whether: its shift of medians over the pooled noise exceeds K.
    """
    def split(lo: int, hi: int) -> int | None:
        part = xs[lo:hi]
        i = least_absolute_split(part, MIN_RUNS)
        if i is None:
            return None
        ma, mb = statistics.median(part[:i]), statistics.median(part[i:])
        ratio = abs(mb - ma) / max(step_noise(part), FLOOR * abs(ma), 1e-12)
        return lo + i if ratio > K else None

    return split


def change_points(names: list[str], metric: str, values: list[float | None]) -> list[ChangePoint]:
    """The change points of one metric over the runs (``names`` and ``values`` in time order; None: not measured)."""
    kept = [(n, v) for n, v in zip(names, values) if v is not None]
    xs = [v for _, v in kept]
    cuts = [a for a, _ in segments(len(xs), _split(xs))[1:]]
    out = []
    for j, cut in enumerate(cuts):
        lo = cuts[j - 1] if j else 0
        hi = cuts[j + 1] if j + 1 < len(cuts) else len(xs)
        out.append(ChangePoint(kept[cut][0], metric, statistics.median(xs[lo:cut]), statistics.median(xs[cut:hi])))
    return out


def finding_changes(names: list[str], codes: list[list[str]]) -> list[FindingChange]:
    """Each run where a finding code appeared (absent in the run before) or disappeared, in run order.

    A code of the first run is listed as appearing there (it was first seen there).
    """
    out: list[FindingChange] = []
    prev: set[str] = set()
    for i, (name, now) in enumerate(zip(names, codes)):
        cur = set(now)
        out += [FindingChange(c, name, "appeared") for c in sorted(cur - prev)]
        if i:
            out += [FindingChange(c, name, "disappeared") for c in sorted(prev - cur)]
        prev = cur
    return out

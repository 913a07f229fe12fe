"""The robust statistics gpuprof's verdicts share, one definition each: the watch's phases
(:mod:`gpuprof.capture.job.phases`), the run history (:mod:`gpuprof.history.changes`), ``gpuprof diff``
(:mod:`gpuprof.diff.compare`, :mod:`gpuprof.diff.cause`) and ``gpuprof try`` (:mod:`gpuprof.trials.measure`).

Spread and noise (:func:`robust_sigma`, :func:`step_noise`, :func:`noise_band`, :func:`mean_noise`), the rank
test (:func:`rank_test_p`), change points by binary segmentation (:func:`segments` with the caller's split:
:func:`least_squares_split` or :func:`least_absolute_split`) and a running median. Plain Python and numpy.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

__all__ = ["MAD_TO_SD", "robust_sigma", "step_noise", "noise_band", "mean_noise", "rank_test_p", "segments",
           "least_squares_split", "least_absolute_split", "running_median"]

Floats = npt.NDArray[np.float64]

MAD_TO_SD = 1.4826  # a normal distribution's standard deviation over its median absolute deviation


def robust_sigma(xs: Sequence[float]) -> float:
    """1.4826 x the median absolute deviation: the standard deviation of normal data, robust to outliers."""
    med = statistics.median(xs)
    return MAD_TO_SD * statistics.median(abs(x - med) for x in xs)


def step_noise(xs: Sequence[float] | Floats) -> float:
    """The noise of a series as a standard deviation: the median of ``|x[i+1] - x[i]|``, 1.4826 / sqrt(2) times
    (a difference of two draws has sqrt(2) times their spread); 0.0 with fewer than two values.

    A level shift makes one large difference, which the median ignores; a sample's own MAD would count
    the shift as noise."""
    d = np.abs(np.diff(np.asarray(xs, dtype=np.float64)))
    return float(np.median(d)) * MAD_TO_SD / math.sqrt(2) if d.size else 0.0


def noise_band(before: Sequence[float], after: Sequence[float]) -> float | None:
    """Twice the standard error of the difference of two samples' medians, with each side's robust spread
    (:func:`robust_sigma`); None with fewer than 2 values a side."""
    if len(before) < 2 or len(after) < 2:
        return None
    return 2.0 * math.sqrt(robust_sigma(before) ** 2 / len(before) + robust_sigma(after) ** 2 / len(after))


def mean_noise(before: Sequence[float], after: Sequence[float]) -> float | None:
    """Twice the standard error of the difference of two samples' means, with the plain standard deviation
    (which one slow step inflates as it inflates every per-step mean of that run); None with < 2 values a side."""
    if len(before) < 2 or len(after) < 2:
        return None
    return 2.0 * math.sqrt(statistics.variance(before) / len(before) + statistics.variance(after) / len(after))


def rank_test_p(before: Sequence[float], after: Sequence[float]) -> float | None:
    """Two-sided p-value of the Mann-Whitney U test (normal approximation, ties corrected); None with fewer
    than 3 values a side. It asks whether a value of one sample tends to be larger than a value of the other,
    which one outlier cannot decide."""
    n1, n2 = len(before), len(after)
    if n1 < 3 or n2 < 3:
        return None
    pooled = sorted([(x, 0) for x in before] + [(x, 1) for x in after])
    ranks = [0.0] * len(pooled)
    ties = 0.0
    i = 0
    while i < len(pooled):
        j = i
        while j + 1 < len(pooled) and pooled[j + 1][0] == pooled[i][0]:
            j += 1
        for k in range(i, j + 1):
            ranks[k] = (i + j) / 2.0 + 1.0
        t = j - i + 1
        ties += t ** 3 - t
        i = j + 1
    r1 = sum(r for r, (_, side) in zip(ranks, pooled) if side == 0)
    u = r1 - n1 * (n1 + 1) / 2.0
    n = n1 + n2
    var = n1 * n2 / 12.0 * ((n + 1) - ties / (n * (n - 1)))
    if var <= 0:
        return 1.0
    z = (abs(u - n1 * n2 / 2.0) - 0.5) / math.sqrt(var)  # continuity-corrected
    return min(1.0, math.erfc(max(z, 0.0) / math.sqrt(2.0)))


def segments(n: int, split: Callable[[int, int], int | None],
             max_segments: int | None = None) -> list[tuple[int, int]]:
    """Binary segmentation of positions ``[0, n)``: ``(start, end)`` of each segment, in order.

    ``split(a, b)`` is where segment ``[a, b)`` splits (``a < k < b``), or None to keep it whole; each part is
    split again. With ``max_segments``, no split is tried once that many segments would exist (the segments
    are split last-made first, the later part before the earlier)."""
    done: list[tuple[int, int]] = []
    todo = [(0, n)]
    while todo:
        a, b = todo.pop()
        k = None if max_segments is not None and len(done) + len(todo) + 1 >= max_segments else split(a, b)
        if k is None:
            done.append((a, b))
        else:
            todo += [(a, k), (k, b)]
    return sorted(done)


def least_squares_split(y: Floats, min_len: int, penalty: float) -> Callable[[int, int], int | None]:
    """For :func:`segments`: split ``[a, b)`` of ``y`` where it lowers the sum of squared deviations from each
    part's mean most, when that gain exceeds ``penalty`` and each part has at least ``min_len`` values."""
    s = np.concatenate([[0.0], np.cumsum(y)])
    q = np.concatenate([[0.0], np.cumsum(y * y)])

    def cost(a: npt.NDArray[np.int64] | int, b: npt.NDArray[np.int64] | int) -> Floats:
        m = np.asarray(b) - np.asarray(a)
        tot = s[b] - s[a]
        out: Floats = np.asarray(q[b] - q[a] - tot * tot / m, dtype=np.float64)
        return out

    def split(a: int, b: int) -> int | None:
        if b - a < 2 * min_len:
            return None
        ks = np.arange(a + min_len, b - min_len + 1)
        gains = float(cost(a, b)) - cost(a, ks) - cost(ks, b)
        best = int(np.argmax(gains))
        return int(ks[best]) if gains[best] > penalty else None

    return split


def least_absolute_split(xs: Sequence[float], min_len: int) -> int | None:
    """The split of ``xs`` (the first position after it) whose values lie closest to their own side's median
    (least total absolute deviation: a robust least squares), each side at least ``min_len`` values; the first
    such on a tie; None when ``xs`` is too short."""
    best: tuple[int, float] | None = None
    for i in range(min_len, len(xs) - min_len + 1):
        a, b = xs[:i], xs[i:]
        ma, mb = statistics.median(a), statistics.median(b)
        cost = sum(abs(x - ma) for x in a) + sum(abs(x - mb) for x in b)
        if best is None or cost < best[1]:
            best = (i, cost)
    return None if best is None else best[0]


def running_median(y: Floats, width: int) -> Floats:
    """The median of each value's ``width`` neighbours, centred, the ends padded with the first and last value;
    a copy of ``y`` when it is shorter than ``width`` or ``width < 2``."""
    if len(y) < width or width < 2:
        same: Floats = y.copy()
        return same
    half = width // 2
    padded = np.concatenate([np.full(half, y[0]), y, np.full(width - 1 - half, y[-1])])
    windows = np.lib.stride_tricks.sliding_window_view(padded, width)
    return np.asarray(np.median(windows, axis=1), dtype=np.float64)

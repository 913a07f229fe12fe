"""Interval maths on sets of time intervals, vectorised with numpy.

An :class:`Intervals` is a set of half-open time ranges ``[start, end)`` held
as two float64 arrays, always in normal form: sorted by start, non-empty
(``start < end``) and disjoint (touching or overlapping inputs fuse). Every
operation keeps that form, so set algebra is a merge of sorted arrays:
``O(n log n)`` at worst, in C, with no Python loop per interval. A trace with
a million kernels is a few milliseconds of work here, where a per-tuple
Python loop took a large share of the whole analysis.
"""

from __future__ import annotations

from typing import Iterable, Iterator, Sequence

import numpy as np

from gpuprof.trace.arrays import sorted_unique

__all__ = ["Interval", "Intervals", "first_cover_per_window"]

Interval = tuple[float, float]

_F8 = np.float64


def _merge_sorted(s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Normal form of intervals already sorted by start (empty ones dropped)."""
    keep = e > s
    if not keep.all():
        s, e = s[keep], e[keep]
    n = len(s)
    if n <= 1:
        return s, e
    reach = np.maximum.accumulate(e)  # furthest end seen so far
    # a new interval begins where a start lies beyond everything before it
    brk = np.flatnonzero(s[1:] > reach[:-1]) + 1
    if len(brk) == n - 1:
        return s, e  # already disjoint: the common case for one stream's kernels
    first = np.concatenate(([0], brk))
    last = np.concatenate((brk - 1, [n - 1]))
    return s[first], reach[last]


class Intervals:
    """A set of time intervals in normal form (see the module docstring).

    Iterating yields ``(start, end)`` float pairs; ``len`` is the number of
    disjoint intervals; ``total()`` their summed length.
    """

    __slots__ = ("starts", "ends")

    def __init__(self, starts: np.ndarray, ends: np.ndarray) -> None:
        # Internal: the arrays must already be in normal form. Use the constructors below.
        self.starts = starts
        self.ends = ends

    # -- constructors -------------------------------------------------------
    @classmethod
    def empty(cls) -> "Intervals":
        return cls(np.empty(0, _F8), np.empty(0, _F8))

    @classmethod
    def from_arrays(cls, starts: Sequence[float] | np.ndarray, ends: Sequence[float] | np.ndarray, *, is_sorted: bool = False) -> "Intervals":
        """The union of ``[starts[i], ends[i])`` (in any order unless ``is_sorted``)."""
        s = np.asarray(starts, dtype=_F8)
        e = np.asarray(ends, dtype=_F8)
        if not is_sorted and len(s) > 1:
            order = np.argsort(s, kind="stable")
            s, e = s[order], e[order]
        return cls(*_merge_sorted(s, e))

    @classmethod
    def from_pairs(cls, pairs: Iterable[Interval]) -> "Intervals":
        """The union of ``(start, end)`` pairs, in any order."""
        flat = np.fromiter((x for p in pairs for x in p), dtype=_F8)
        return cls.from_arrays(flat[0::2], flat[1::2])

    @classmethod
    def from_spans(cls, starts: np.ndarray, durations: np.ndarray, *, is_sorted: bool = False) -> "Intervals":
        """The union of ``[starts[i], starts[i] + durations[i])``."""
        s = np.asarray(starts, dtype=_F8)
        return cls.from_arrays(s, s + np.asarray(durations, dtype=_F8), is_sorted=is_sorted)

    # -- container protocol ---------------------------------------------------
    def __len__(self) -> int:
        return len(self.starts)

    def __bool__(self) -> bool:
        return len(self.starts) > 0

    def __iter__(self) -> Iterator[Interval]:
        return zip(self.starts.tolist(), self.ends.tolist())

    def __getitem__(self, i: int) -> Interval:
        return float(self.starts[i]), float(self.ends[i])

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Intervals):
            return NotImplemented
        return bool(np.array_equal(self.starts, other.starts) and np.array_equal(self.ends, other.ends))

    def __repr__(self) -> str:
        head = ", ".join(f"({s:g}, {e:g})" for s, e in list(self)[:4])
        more = ", ..." if len(self) > 4 else ""
        return f"Intervals([{head}{more}], n={len(self)})"

    # -- measures ----------------------------------------------------------------
    def total(self) -> float:
        """Summed length."""
        return float((self.ends - self.starts).sum())

    def covering(self, t: float) -> int | None:
        """Index of the interval that contains ``t`` (start <= t <= end), else None."""
        i = int(np.searchsorted(self.starts, t, side="right")) - 1
        if i >= 0 and t <= self.ends[i]:
            return i
        return None

    def covers(self, ts: np.ndarray) -> np.ndarray:
        """For each time in ``ts``, whether an interval contains it (start <= t <= end): :meth:`covering`
        for many times at once."""
        i = np.searchsorted(self.starts, ts, side="right") - 1
        return (i >= 0) & (ts <= self.ends[np.maximum(i, 0)]) if len(self.starts) else np.zeros(len(ts), bool)

    def next_start(self, t: float) -> int:
        """Index of the first interval that starts at or after ``t`` (``len`` if none)."""
        return int(np.searchsorted(self.starts, t, side="left"))

    def per_window(self, windows: Sequence[Interval]) -> list[float]:
        """Covered length inside each window (windows sorted, disjoint; touching is fine)."""
        lo, hi = _window_bounds(windows)
        if len(lo) == 0:
            return []
        covered: list[float] = self.per_segment(lo, hi).tolist()
        return covered

    def per_segment(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """:meth:`per_window` of the windows ``[lo[i], hi[i])`` given as arrays, as an array."""
        if not self:
            return np.zeros(len(lo), _F8)
        cum = np.concatenate(([0.0], np.cumsum(self.ends - self.starts)))
        covered: np.ndarray = self._covered_below(hi, cum) - self._covered_below(lo, cum)
        return covered

    def _covered_below(self, x: np.ndarray, cum: np.ndarray) -> np.ndarray:
        """Length of the set below each ``x`` (the set's distribution function)."""
        i = np.searchsorted(self.starts, x, side="right")  # intervals starting at or before x
        j = np.maximum(i - 1, 0)
        # all intervals before j lie wholly below x; interval j (if any) partly
        part = np.where(i > 0, np.minimum(x, self.ends[j]) - self.starts[j], 0.0)
        return cum[j] + part

    # -- set algebra ---------------------------------------------------------------
    def union(self, other: "Intervals") -> "Intervals":
        if not other:
            return self
        if not self:
            return other
        return Intervals.from_arrays(np.concatenate((self.starts, other.starts)), np.concatenate((self.ends, other.ends)))

    def intersect(self, other: "Intervals") -> "Intervals":
        if not self or not other:
            return Intervals.empty()
        # the same set either way round, so the same arrays (normal form, endpoints taken as they are):
        # the fewer intervals are the ones looked up in the others (a 39-interval rest against 37k calls)
        one, two = (self, other) if len(self.starts) <= len(other.starts) else (other, self)
        # each interval of one meets a contiguous run of two's intervals
        lo = np.searchsorted(two.ends, one.starts, side="right")  # first with end > start
        hi = np.searchsorted(two.starts, one.ends, side="left")  # first with start >= end
        count = np.maximum(hi - lo, 0)
        n = int(count.sum())
        if n == 0:
            return Intervals.empty()
        a = np.repeat(np.arange(len(one.starts)), count)
        offset = np.arange(n) - np.repeat(np.cumsum(count) - count, count)
        b = np.repeat(lo, count) + offset
        s = np.maximum(one.starts[a], two.starts[b])
        e = np.minimum(one.ends[a], two.ends[b])
        keep = s < e
        return Intervals(s[keep], e[keep])

    def complement(self) -> "Intervals":
        """Everything not in the set, as intervals reaching to -inf/+inf."""
        s = np.concatenate(([-np.inf], self.ends))
        e = np.concatenate((self.starts, [np.inf]))
        keep = s < e
        return Intervals(s[keep], e[keep])

    def subtract(self, other: "Intervals") -> "Intervals":
        """The parts of self not covered by ``other``."""
        if not self or not other:
            return self
        return self.intersect(other.complement())

    def clip(self, lo: float, hi: float) -> "Intervals":
        """The parts inside ``[lo, hi]``."""
        if hi <= lo or not self:
            return Intervals.empty()
        return self.intersect(Intervals(np.array([lo], _F8), np.array([hi], _F8)))


def _window_bounds(windows: Sequence[Interval]) -> tuple[np.ndarray, np.ndarray]:
    w = np.asarray(windows, dtype=_F8).reshape(-1, 2)
    return w[:, 0], w[:, 1]


def first_cover_per_window(windows: Sequence[Interval], layers: Sequence[Intervals]) -> np.ndarray:
    """Per window, the time each layer covers that no earlier layer covered.

    Returns a ``(len(windows), len(layers) + 1)`` array; the last column is
    the time no layer covers. Each row adds up to the window's length: every
    instant of a window goes to the first layer active at it (a priority
    split, as the step-time breakdown defines it). One sweep over all the
    layers' boundaries, not a union per layer.
    """
    wlo, whi = _window_bounds(windows)
    nw, nl = len(wlo), len(layers)
    if nw == 0:
        return np.zeros((0, nl + 1))
    # elementary segments: between consecutive boundaries of any layer or window
    pts = sorted_unique(np.concatenate([wlo, whi] + [x for layer in layers for x in (layer.starts, layer.ends)]))
    seg_lo, seg_len = pts[:-1], np.diff(pts)
    w = np.searchsorted(wlo, seg_lo, side="right") - 1
    in_window = (w >= 0) & (seg_lo < whi[np.maximum(w, 0)])
    owner = np.full(len(seg_lo), nl)
    for k in range(nl - 1, -1, -1):  # earlier layers overwrite later ones
        layer = layers[k]
        if not layer:
            continue
        i = np.searchsorted(layer.starts, seg_lo, side="right") - 1
        active = (i >= 0) & (seg_lo < layer.ends[np.maximum(i, 0)])
        owner[active] = k
    keep = in_window
    flat = np.bincount(w[keep] * (nl + 1) + owner[keep], weights=seg_len[keep], minlength=nw * (nl + 1))
    return flat.reshape(nw, nl + 1)

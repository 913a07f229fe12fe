"""Interval maths on sorted, disjoint lists of ``(start, end)`` pairs.

Every function here is a linear merge over inputs that are already sorted,
so whole-trace metrics cost O(n) after the loader's one sort. An "interval
list" below always means: sorted by start, non-overlapping, non-empty
intervals (``start < end``), as :func:`merge` returns.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Iterable, Sequence

__all__ = ["Interval", "merge", "union", "intersect", "subtract", "total", "clip", "per_window"]

Interval = tuple[float, float]


def merge(intervals: Iterable[Interval]) -> list[Interval]:
    """Union of intervals sorted by start (overlapping or touching ones fuse)."""
    out: list[Interval] = []
    cur_s = cur_e = None
    for s, e in intervals:
        if e <= s:
            continue
        if cur_e is None:
            cur_s, cur_e = s, e
        elif s <= cur_e:
            if e > cur_e:
                cur_e = e
        else:
            out.append((cur_s, cur_e))  # type: ignore[arg-type]
            cur_s, cur_e = s, e
    if cur_e is not None:
        out.append((cur_s, cur_e))  # type: ignore[arg-type]
    return out


def merge_unsorted(intervals: Iterable[Interval]) -> list[Interval]:
    return merge(sorted(intervals))


def union(a: Sequence[Interval], b: Sequence[Interval]) -> list[Interval]:
    """Union of two interval lists."""
    if not a:
        return list(b)
    if not b:
        return list(a)
    # timsort merges two sorted runs in linear time, in C; merge() fuses what overlaps
    return merge(sorted([*a, *b]))


def intersect(a: Sequence[Interval], b: Sequence[Interval]) -> list[Interval]:
    """Intersection of two interval lists."""
    out: list[Interval] = []
    i = j = 0
    na, nb = len(a), len(b)
    while i < na and j < nb:
        s = a[i][0] if a[i][0] > b[j][0] else b[j][0]
        e = a[i][1] if a[i][1] < b[j][1] else b[j][1]
        if s < e:
            out.append((s, e))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def subtract(a: Sequence[Interval], b: Sequence[Interval]) -> list[Interval]:
    """Parts of ``a`` not covered by ``b``."""
    out: list[Interval] = []
    j = 0
    nb = len(b)
    for s, e in a:
        while j < nb and b[j][1] <= s:
            j += 1
        k = j
        cur = s
        while k < nb and b[k][0] < e:
            bs, be = b[k]
            if bs > cur:
                out.append((cur, bs))
            if be > cur:
                cur = be
            if cur >= e:
                break
            k += 1
        if cur < e:
            out.append((cur, e))
    return out


def total(a: Iterable[Interval]) -> float:
    """Summed length of an interval list."""
    return sum(e - s for s, e in a)


def clip(a: Sequence[Interval], lo: float, hi: float) -> list[Interval]:
    """The parts of ``a`` inside ``[lo, hi]``."""
    if hi <= lo or not a:
        return []
    i = max(bisect_right(a, (lo, float("inf"))) - 1, 0)
    out: list[Interval] = []
    for s, e in a[i:]:
        if s >= hi:
            break
        s2 = s if s > lo else lo
        e2 = e if e < hi else hi
        if s2 < e2:
            out.append((s2, e2))
    return out


def per_window(a: Sequence[Interval], windows: Sequence[Interval]) -> list[float]:
    """Covered length of ``a`` inside each window. Windows must be sorted and disjoint."""
    out = [0.0] * len(windows)
    if not a:
        return out
    i = 0
    n = len(a)
    for w, (lo, hi) in enumerate(windows):
        while i < n and a[i][1] <= lo:
            i += 1
        k = i
        acc = 0.0
        while k < n and a[k][0] < hi:
            s, e = a[k]
            s2 = s if s > lo else lo
            e2 = e if e < hi else hi
            if s2 < e2:
                acc += e2 - s2
            k += 1
        out[w] = acc
    return out

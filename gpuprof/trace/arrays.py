"""Two numpy reductions as numpy computes them, without importing ``numpy.ma``; and a sort skipped where
the order is there already (:func:`start_order`).

numpy 2 imports its masked-array package (``numpy.ma``, ~5 ms: bench/README.md, "Start-up
imports") the first time a plain ``np.unique`` or an ``np.median`` runs, only to ask whether the
input is a masked array. ``gpuprof analyze`` calls both on every trace; it never has
masked arrays. The results here are those of numpy's own code paths, bit for bit (the tests
compare them); where numpy would warn (an empty input, a NaN), :func:`median` calls numpy itself.
"""

from __future__ import annotations

import numpy as np

__all__ = ["sorted_unique", "median", "start_order"]


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """``np.unique(values)``: the distinct values, flattened and sorted (NaNs, if any, as one at the end).

    numpy 2's plain ``np.unique`` imports ``numpy.ma`` (module docstring) and tries a hash table
    first, which is slower than sorting on the arrays gpuprof has (0.5 s against 9 ms for a million
    distinct int64 on numpy 2.4). This is numpy's own sorting path, step for step.
    """
    aux = np.sort(values, axis=None)
    if aux.size == 0:
        return aux
    keep = np.empty(aux.shape, dtype=bool)
    keep[0] = True
    if aux.dtype.kind in "cfmM" and np.isnan(aux[-1]):
        # NaNs sort last and compare unequal to each other: np.unique keeps the first of them only
        first_nan = (np.searchsorted(np.isnan(aux), True, side="left") if aux.dtype.kind == "c"
                     else np.searchsorted(aux, aux[-1], side="left"))
        if first_nan > 0:
            np.not_equal(aux[1:first_nan], aux[:first_nan - 1], out=keep[1:first_nan])
        keep[first_nan] = True
        keep[first_nan + 1:] = False
    else:
        np.not_equal(aux[1:], aux[:-1], out=keep[1:])
    return aux[keep]


def median(values: np.ndarray) -> float:
    """``float(np.median(values))`` of a one-dimensional float array: the middle value, or the mean of the two."""
    n = values.size
    if n == 0 or np.isnan(values).any():  # numpy's warning and NaN rules: numpy itself (and numpy.ma)
        return float(np.median(values))
    half = n // 2
    # np.mean of the middle one or two values, as numpy does in both cases: the mean of one value is not
    # always that value (np.mean([-0.0]) is 0.0, as the sum starts at +0.0), so indexing would differ
    if n % 2:
        part = np.partition(values, half)
        return float(np.mean(part[half:half + 1]))
    part = np.partition(values, (half - 1, half))
    return float(np.mean(part[half - 1:half + 1]))


def start_order(ts: np.ndarray, dur: np.ndarray) -> np.ndarray | None:
    """``np.lexsort((-dur, ts))`` (by start, the longest first on ties, stable), or None where that order is the
    identity: events already in it, as a thread's events mostly are (one comparison pass instead of a sort)."""
    if len(ts) > 1:
        later, earlier = ts[1:], ts[:-1]
        # each event after the one before it (or with it, no longer): a NaN compares false and sorts
        if not bool(((later > earlier) | ((later == earlier) & (dur[1:] <= dur[:-1]))).all()):
            return np.lexsort((-dur, ts))
    return None

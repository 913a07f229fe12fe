"""Decimating a timeline's events to a bounded number of rows (docs/views.md, "Timeline").

A row of a lane (one nesting level of a host thread, a GPU stream) is cut into
buckets ``resolution`` µs wide. An event at least one bucket long is kept as it
is: it is wide enough to see. The events shorter than a bucket that start in
the same bucket become one block, drawn from the first one's start to the last
one's end, named after the longest of them, with their count (a bucket with one
short event keeps that event). So the longest events are always kept, and the
rows of a lane number at most about two per bucket, whatever the trace.

Everything is numpy over all rows at once: no Python loop per event.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["Decimated", "decimate", "decimate_to"]


class Decimated(NamedTuple):
    """The rows kept, in (row, start) order: ``rep`` is the index (into the input) of the event a row is named
    after (itself, or the longest of its block), ``n`` the events it stands for."""

    row: np.ndarray
    start: np.ndarray
    dur: np.ndarray
    rep: np.ndarray
    n: np.ndarray


def decimate(row: np.ndarray, start: np.ndarray, dur: np.ndarray, resolution: float) -> Decimated:
    """The rows of events ``(row, start, dur)`` at bucket width ``resolution`` (module docstring)."""
    n = len(start)
    if n == 0:
        e = np.zeros(0, np.int64)
        return Decimated(e, np.zeros(0), np.zeros(0), e, e)
    big = dur >= resolution
    bi = np.flatnonzero(big)
    si = np.flatnonzero(~big)
    parts = [Decimated(row[bi], start[bi], dur[bi], bi, np.ones(len(bi), np.int64))]
    if len(si):
        s, d, r = start[si], dur[si], row[si]
        bucket = np.floor(np.maximum(s - float(start.min()), 0.0) / resolution).astype(np.int64)
        key = r.astype(np.int64) * (int(bucket.max()) + 1) + bucket
        order = np.lexsort((d, key))  # by bucket of a row, the longest event last in each
        k = key[order]
        first = np.flatnonzero(np.r_[True, k[1:] != k[:-1]])
        last = np.r_[first[1:], len(k)] - 1
        g_start = np.minimum.reduceat(s[order], first)
        g_end = np.maximum.reduceat((s + d)[order], first)
        parts.append(Decimated(r[order[first]], g_start, g_end - g_start, si[order[last]], np.diff(np.r_[first, len(k)])))
    out = Decimated(*(np.concatenate(cols) for cols in zip(*parts)))
    keep = np.lexsort((out.start, out.row))
    return Decimated(*(c[keep] for c in out))


def decimate_to(row: np.ndarray, start: np.ndarray, dur: np.ndarray, resolution: float,
                max_rows: int) -> tuple[Decimated, float]:
    """:func:`decimate` at ``resolution``, doubled until at most ``max_rows`` rows are left; and the width used.

    It ends: once a bucket is longer than every row's span, each row holds at most two rows (one long event
    and one block cannot both exceed it), so ``max_rows`` at least twice the distinct rows always fits.
    """
    resolution = max(float(resolution), 1e-3)
    span = float((start + dur).max() - start.min()) if len(start) else 0.0
    while True:
        got = decimate(row, start, dur, resolution)
        if len(got.start) <= max_rows or resolution > 2 * span + 1.0:
            return got, resolution
        resolution *= 2.0

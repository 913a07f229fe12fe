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


def _sorted(row: np.ndarray, start: np.ndarray) -> bool:
    """Whether the events are in (row, start) order already."""
    if len(row) < 2:
        return True
    dr = np.diff(row)
    return bool((dr >= 0).all() and (np.diff(start)[dr == 0] >= 0).all())


def _order(row: np.ndarray, start: np.ndarray) -> np.ndarray:
    """The (row, start) order: by start, then stably by row (rows are few: a radix sort when they fit 16 bits)."""
    by_start = np.argsort(start, kind="stable")
    r = row[by_start]
    r = r.astype(np.int16) if len(r) and r.min() >= 0 and r.max() < 32768 else r
    return by_start[np.argsort(r, kind="stable")]


def decimate(row: np.ndarray, start: np.ndarray, dur: np.ndarray, resolution: float) -> Decimated:
    """The rows of events ``(row, start, dur)``, in (row, start) order, at bucket width ``resolution`` (module
    docstring). Linear in the events: no sort but of the rows kept."""
    n = len(start)
    if n == 0:
        e = np.zeros(0, np.int64)
        return Decimated(e, np.zeros(0), np.zeros(0), e, e)
    if not _sorted(row, start):
        o = _order(row, start)
        got = decimate(row[o], start[o], dur[o], resolution)
        return got._replace(rep=o[got.rep])
    big = dur >= resolution
    bi = np.flatnonzero(big)
    si = np.flatnonzero(~big)
    parts = [Decimated(row[bi], start[bi], dur[bi], bi, np.ones(len(bi), np.int64))]
    if len(si):
        s, d, r = start[si], dur[si], row[si]
        bucket = np.floor(np.maximum(s - float(start.min()), 0.0) / resolution).astype(np.int64)
        key = r.astype(np.int64) * (int(bucket.max()) + 1) + bucket  # never decreases: (row, start) order
        first = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
        counts = np.diff(np.r_[first, len(key)])
        longest = np.maximum.reduceat(d, first)
        at_max = np.flatnonzero(d == np.repeat(longest, counts))
        group = np.repeat(np.arange(len(first)), counts)[at_max]
        rep = at_max[np.r_[True, group[1:] != group[:-1]]]  # the first longest event of each group
        g_end = np.maximum.reduceat(s + d, first)
        parts.append(Decimated(r[first], s[first], g_end - s[first], si[rep], counts))
    out = Decimated(*(np.concatenate(cols) for cols in zip(*parts)))
    keep = np.lexsort((out.start, out.row))  # the rows kept only
    return Decimated(*(c[keep] for c in out))


def decimate_to(row: np.ndarray, start: np.ndarray, dur: np.ndarray, resolution: float,
                max_rows: int) -> tuple[Decimated, float]:
    """:func:`decimate` at ``resolution``, doubled until at most ``max_rows`` rows are left; and the width used.

    It ends: once a bucket is longer than every row's span, each row holds at most two rows (one long event
    and one block cannot both exceed it), so ``max_rows`` at least twice the distinct rows always fits. The
    events are put in (row, start) order once, not at each width.
    """
    resolution = max(float(resolution), 1e-3)
    span = float((start + dur).max() - start.min()) if len(start) else 0.0
    o = None if _sorted(row, start) else _order(row, start)
    if o is not None:
        row, start, dur = row[o], start[o], dur[o]
    while True:
        got = decimate(row, start, dur, resolution)
        if len(got.start) <= max_rows or resolution > 2 * span + 1.0:
            return (got if o is None else got._replace(rep=o[got.rep])), resolution
        resolution *= 2.0

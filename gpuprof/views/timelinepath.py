"""The critical path's segments on a timeline, bounded (docs/views.md, "Timeline").

The critical path of one step can be tens of thousands of segments (a kernel,
a launch gap, a sync wait each); kept in time order and cut at a cap, the
highlight would stop part-way through the step. Instead, past ``max_rows``
segments, runs are merged, each named after its longest segment and counting
them: first the touching segments of one lane and one kind (a chain of
kernels); if that is not enough, the segments of one lane in one time bucket,
of any kind, the bucket ``gap`` µs wide (the critical step's bucket width),
doubling until at most ``max_rows`` runs are left. So the whole path is always
drawn, and a path under the cap exactly as given.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gpuprof.trace.timelinerows import CriticalRow, StoredCritical

__all__ = ["merge_segments"]


def merge_segments(segments: Sequence[CriticalRow], origin: float, gap: float, max_rows: int,
                   clip: int) -> tuple[list[StoredCritical], float]:
    """Runs ``[lane, start_us, end_us, kind, name, count]`` (relative to ``origin``, in (lane, start) order) of
    ``segments`` merged as the module docstring says; and the bucket width used (0: none, or touching ones only)."""
    if not segments:
        return [], 0.0
    lane_code: dict[str, int] = {}
    kind_code: dict[str, int] = {}
    n = len(segments)
    lane = np.fromiter((lane_code.setdefault(str(s[0]), len(lane_code)) for s in segments), np.int64, n)
    kind = np.fromiter((kind_code.setdefault(str(s[3]), len(kind_code)) for s in segments), np.int64, n)
    start = np.fromiter((float(s[1]) for s in segments), np.float64, n) - origin
    end = np.maximum(np.fromiter((float(s[2]) for s in segments), np.float64, n) - origin, start)
    order = np.lexsort((start, lane))
    lane, kind, start, end = lane[order], kind[order], start[order], end[order]
    # the latest end so far within each lane: lanes offset far apart, one running maximum for all
    k = float(end.max() - start.min()) * 2 + 1.0
    reach = np.maximum.accumulate(end + lane * k) - lane * k
    other_lane = np.r_[True, lane[1:] != lane[:-1]]
    first = np.arange(n)
    used = 0.0
    if n > max_rows:  # touching segments of one kind first: a long kernel chain is one run
        touching = np.r_[False, start[1:] <= reach[:-1]]
        first = np.flatnonzero(other_lane | ~touching | np.r_[True, kind[1:] != kind[:-1]])
        width = max(float(gap), 1e-3)
        while len(first) > max_rows and width <= k:  # then by time bucket, any kind, any gap
            bucket = np.floor((start - start.min()) / width)
            first = np.flatnonzero(other_lane | np.r_[True, bucket[1:] != bucket[:-1]])
            used, width = width, width * 2.0
    counts = np.diff(np.r_[first, len(start)])
    g_end = np.maximum.reduceat(end, first)
    dur = end - start
    group = np.repeat(np.arange(len(first)), counts)
    longest = np.lexsort((-dur, group))[np.r_[0, np.cumsum(counts)[:-1]]]  # the longest segment of each run
    ids = list(lane_code)
    out: list[StoredCritical] = []
    for f, e, li, c in zip(first.tolist(), g_end.tolist(), longest.tolist(), counts.tolist()):
        seg = segments[int(order[li])]
        name = str(seg[4])
        out.append((ids[int(lane[f])], round(float(start[f]), 1), round(e, 1), str(seg[3]),
                    name if len(name) <= clip else name[:clip] + "\u2026", c))
    return out, used

"""The critical path's segments on a timeline, bounded (docs/views.md, "Timeline").

The critical path of one step can be tens of thousands of segments (a kernel,
a launch gap, a sync wait each); kept in time order and cut at a cap, the
highlight would stop part-way through the step. Instead, the segments of one
lane that follow each other within ``gap`` µs are merged into one run, named
after the longest of them and counting them; ``gap`` starts at the critical
step's bucket width and doubles until at most ``max_rows`` runs are left, so
the whole path is always drawn, coarser on a long one.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gpuprof.trace.timelinerows import CriticalRow, StoredCritical

__all__ = ["merge_segments"]


def merge_segments(segments: Sequence[CriticalRow], origin: float, gap: float, max_rows: int,
                   clip: int) -> tuple[list[StoredCritical], float]:
    """Runs ``[lane, start_us, end_us, kind, name, count]`` (relative to ``origin``, in (lane, start) order) of
    ``segments`` merged as the module docstring says; and the gap used."""
    if not segments:
        return [], gap
    lane_code: dict[str, int] = {}
    lane = np.fromiter((lane_code.setdefault(str(s[0]), len(lane_code)) for s in segments), np.int64, len(segments))
    start = np.fromiter((float(s[1]) for s in segments), np.float64, len(segments)) - origin
    end = np.maximum(np.fromiter((float(s[2]) for s in segments), np.float64, len(segments)) - origin, start)
    order = np.lexsort((start, lane))
    lane, start, end = lane[order], start[order], end[order]
    # the latest end so far within each lane: lanes offset far apart, one running maximum for all
    k = float(end.max() - start.min()) * 2 + 1.0
    reach = np.maximum.accumulate(end + lane * k) - lane * k
    gap = max(float(gap), 1e-3)
    while True:
        new = np.r_[True, (lane[1:] != lane[:-1]) | (start[1:] > reach[:-1] + gap)]
        first = np.flatnonzero(new)
        if len(first) <= max_rows or gap > k:
            break
        gap *= 2.0
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
    return out, gap

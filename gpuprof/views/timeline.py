"""The timeline of one trace: its recorded steps as lanes, bounded in size (docs/views.md, "Timeline").

:func:`build_timeline` gathers the events of the recorded steps by lane
(:mod:`gpuprof.views.timelinelanes`), keeps the :data:`MAX_LANES` busiest
lanes (the main thread always), decimates them
(:mod:`gpuprof.views.decimate`) from ``span / BUCKETS`` µs buckets, doubled
until at most :data:`MAX_EVENTS` rows are left (the critical step at its own,
finer width, with up to half the rows), and marks where each finding
happens: each of its evidence events on the lane of that event's thread or
stream, or, for a finding with no event, the critical step on the main
thread. The critical path's segments (``(lane, start_us, end_us, kind,
name)`` in the trace's clock, of the critical step: the median one) are
taken as given.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from gpuprof.findings import Finding
from gpuprof.trace.metrics import TraceMetrics
from gpuprof.trace.timelinerows import (
    BUCKETS,
    LANE_KINDS,
    MAX_CRITICAL,
    MAX_DEPTH,
    MAX_EVENTS,
    MAX_LANES,
    MAX_MARKERS,
    MAX_NAME,
    CriticalRow,
    EventRow,
    StoredCritical,
    Timeline,
    TimelineLane,
    TimelineMarker,
    TimelineStep,
)
from gpuprof.views.decimate import Decimated, decimate_to
from gpuprof.views.timelinelanes import LaneEvents, gather, nest
from gpuprof.views.timelinepath import merge_segments

__all__ = ["build_timeline", "critical_step"]

MARKERS_PER_FINDING = 50


def _r(x: float) -> float:
    return round(float(x), 1)


def _clip(name: str) -> str:
    return name if len(name) <= MAX_NAME else name[:MAX_NAME] + "\u2026"


def critical_step(m: TraceMetrics) -> int | None:
    """The index of the step the critical path is drawn for: the median step, the earlier of the two middle
    ones for an even count, the earlier step among equal times (as the critical path's own code picks it)."""
    if not m.steps:
        return None
    order = sorted(range(len(m.steps)), key=lambda i: (m.steps[i].dur, i))
    return order[(len(order) - 1) // 2]


def build_timeline(m: TraceMetrics, findings: Iterable[Finding] = (),
                   critical: Sequence[CriticalRow] | None = None) -> Timeline | None:
    """The timeline of the trace behind ``m`` (module docstring); None without steps."""
    if not m.steps:
        return None
    origin = m.steps[0].start
    hi = max(s.end for s in m.steps)
    tl = Timeline(origin_us=origin, span_us=_r(hi - origin),
                  steps=[TimelineStep(s.id, _r(s.start - origin), _r(s.end - origin)) for s in m.steps],
                  critical_step=critical_step(m))
    ev = gather(m.trace, origin, hi, m.main_thread)
    keep = _busiest_lanes(ev)
    if len(keep) < len(ev.lane_ids):
        tl.left_out["lanes"] = len(ev.lane_ids) - len(keep)
        _only(ev, keep)
    nest(ev)  # (lane, start) order and host nesting, on the kept lanes only
    if ev.deep:
        tl.left_out["deep"] = ev.deep
    row = ev.lane * MAX_DEPTH + ev.depth
    o = np.argsort(row.astype(np.int16), kind="stable")  # (row, start) order: a radix sort of the few rows
    lane, start, dur, name, kind, row = ev.lane[o], ev.start[o] - origin, ev.dur[o], ev.name[o], ev.kind[o], row[o]
    tl.lanes = [TimelineLane(i, k, label) for i, k, label in zip(ev.lane_ids, ev.lane_kinds, ev.lane_labels)]
    counts = np.bincount(lane, minlength=len(tl.lanes))
    for ln, n in zip(tl.lanes, counts.tolist()):
        ln.total = n
    tl.events_total = int(len(start))
    got = _decimate(tl, row, start, dur, max(hi - origin, 1.0))
    used, name_index = np.unique(name[got.rep], return_inverse=True)
    tl.names = [_clip(ev.names[i]) for i in used.tolist()]
    rows = zip((got.row // MAX_DEPTH).tolist(), np.round(got.start, 1).tolist(), np.round(got.dur, 1).tolist(),
               name_index.reshape(-1).tolist(), kind[got.rep].tolist(), (got.row % MAX_DEPTH).tolist(), got.n.tolist())
    for ln_i, s, d, nm, k, dp, c in rows:
        one: EventRow = (s, d, nm, k, dp, c)
        tl.lanes[ln_i].events.append(one)
    for ln in tl.lanes:
        ln.depth = 1 + max((r[4] for r in ln.events), default=0)
    tl.events_kept = int(len(got.start))
    lanes = {ln.id for ln in tl.lanes}
    raw = {k: v for k, v in ev.raw.items() if v in lanes}
    main = tl.lanes[0].id if tl.lanes else None
    tl.markers = _markers(tl, findings, raw, main, origin)
    if critical:
        tl.critical = _critical(tl, critical, origin)
    return tl


def _decimate(tl: Timeline, row: np.ndarray, start: np.ndarray, dur: np.ndarray, span: float) -> Decimated:
    """The rows kept: the critical step's events at their own, finer bucket width (``span`` of the step /
    BUCKETS) with up to half the rows, the other steps' at ``span`` / BUCKETS with the rest: zoomed in on the
    step the critical path is of, its kernels are still one box each."""
    step = tl.steps[tl.critical_step] if tl.critical_step is not None and len(tl.steps) > 1 else None
    if step is None:
        got, res = decimate_to(row, start, dur, span / BUCKETS, MAX_EVENTS)
        tl.resolution_us = tl.step_resolution_us = _r(res) or res
        return got
    inside = (start >= step.start_us) & (start < step.end_us)
    i_in, i_out = np.flatnonzero(inside), np.flatnonzero(~inside)
    got_in, res_in = decimate_to(row[i_in], start[i_in], dur[i_in], max(step.end_us - step.start_us, 1.0) / BUCKETS,
                                 MAX_EVENTS // 2)
    got_out, res_out = decimate_to(row[i_out], start[i_out], dur[i_out], span / BUCKETS,
                                   max(MAX_EVENTS - len(got_in.start), MAX_EVENTS // 2))
    tl.resolution_us, tl.step_resolution_us = _r(res_out) or res_out, _r(res_in) or res_in
    both = Decimated(*(np.concatenate(c) for c in zip(got_in._replace(rep=i_in[got_in.rep]),
                                                       got_out._replace(rep=i_out[got_out.rep]))))
    keep = np.lexsort((both.start, both.row))
    return Decimated(*(c[keep] for c in both))


def _busiest_lanes(ev: LaneEvents) -> np.ndarray:
    """The lanes kept (in drawing order): the main thread's (the first, when there is one) and the busiest others
    (by the time of their events, nested ones included)."""
    n = len(ev.lane_ids)
    if n <= MAX_LANES:
        return np.arange(n)
    busy = np.bincount(ev.lane, weights=ev.dur, minlength=n)
    if ev.lane_ids and ev.lane_ids[0].startswith("host:"):
        busy[0] = np.inf
    return np.sort(np.argsort(-busy, kind="stable")[:MAX_LANES])


def _only(ev: LaneEvents, keep: np.ndarray) -> None:
    """Keep the events of the lanes ``keep`` (in order), numbered 0.. in that order."""
    new_index = np.full(len(ev.lane_ids), -1, np.int64)
    new_index[keep] = np.arange(len(keep))
    sel = new_index[ev.lane] >= 0
    ev.lane = new_index[ev.lane[sel]]
    for f in ("start", "dur", "name", "kind", "depth"):
        setattr(ev, f, getattr(ev, f)[sel])
    ev.lane_ids, ev.lane_kinds, ev.lane_labels = ([x[i] for i in keep.tolist()] for x in (ev.lane_ids, ev.lane_kinds, ev.lane_labels))
    kept = set(ev.lane_ids)
    ev.raw = {k: v for k, v in ev.raw.items() if v in kept}


def _markers(tl: Timeline, findings: Iterable[Finding], raw: dict[tuple[int | str, int | str], str],
             main: str | None, origin: float) -> list[TimelineMarker]:
    out: list[TimelineMarker] = []
    left = 0
    step = tl.steps[tl.critical_step] if tl.critical_step is not None else None
    for f in findings:
        if f.origin != "trace":  # measured live (runtime, memory): no place in the trace
            continue
        mine: list[TimelineMarker] = []
        for e in f.evidence:
            for r in e.events:
                lane = raw.get((r.pid, r.tid), main) if r.pid is not None else main  # type: ignore[arg-type]
                if lane is not None:
                    mine.append(TimelineMarker(f.code, lane, _r(r.ts - origin), _r(r.ts - origin + max(r.dur, 0.0)), "event"))
        if not mine and step is not None and main is not None:
            mine.append(TimelineMarker(f.code, main, step.start_us, step.end_us, "step"))
        left += max(len(mine) - MARKERS_PER_FINDING, 0)
        out.extend(mine[:MARKERS_PER_FINDING])
    if len(out) > MAX_MARKERS:
        left += len(out) - MAX_MARKERS
        out = out[:MAX_MARKERS]
    if left:
        tl.left_out["markers"] = left
    return out


def _critical(tl: Timeline, segments: Sequence[CriticalRow], origin: float) -> list[StoredCritical]:
    """The critical path's segments, relative to the origin, merged into at most MAX_CRITICAL runs
    (:mod:`gpuprof.views.timelinepath`); a lane the timeline lacks is added, empty (the path is never hidden
    for want of a lane)."""
    out, gap = merge_segments(segments, origin, tl.step_resolution_us or tl.resolution_us, MAX_CRITICAL, MAX_NAME)
    lanes = {ln.id for ln in tl.lanes}
    for row in out:
        if row[0] not in lanes:
            lanes.add(row[0])
            prefix = row[0].split(":", 1)[0]
            tl.lanes.append(TimelineLane(row[0], prefix if prefix in LANE_KINDS else "host", row[0]))
    del gap  # the width used: each run's count says what it holds
    return out


def keep_markers_of(summaries: Iterable[object], findings: Iterable[Finding]) -> None:
    """Drop the timeline markers of codes the report's findings no longer hold (absorbed by the overlap policy,
    left out by ``--select``/``--ignore``): a marker always links to a finding card."""
    codes = {f.code for f in findings}
    for s in summaries:
        tl = getattr(s, "timeline", None)
        if isinstance(tl, Timeline):
            tl.markers = [x for x in tl.markers if x.code in codes]

"""The critical path of each recorded step: the chain of work that set its length.

Definition (docs/critical-path.md): walk back from a step's end on the
:mod:`graph <gpuprof.trace.critpath.graph>`. On the host, time runs back to
the previous wait; a wait that waited for the GPU hands the path to the GPU
event it waited for; a GPU event hands it to the previous event of its stream
when it was queued behind it, to another stream's event when it waited for one,
else to its launch call on the host. The walk stops at the step's start. The
pieces it crosses tile the step, so their times add up to the step time.

**Kinds** of the path's time: ``kernel`` (a kernel ran, with the small gap
before the next queued one), ``copy`` (a copy or memset ran), ``operator``
(the host ran an operator, or a runtime call other than a launch), ``launch_gap``
(the host was launching while the stream was empty: a launch call, and the latency
from it to the start of work that was not queued),
``sync_wait`` (the host was in a synchronising call or a blocking copy after the
GPU work it waited for was done, or waited for nothing), ``data_wait`` (the
main thread was loading data), ``idle`` (nothing recorded on the main thread, or
the GPU waiting for a cause the trace does not record).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from gpuprof.trace.critpath.graph import GPU_COPY, WAIT_DATA, StepGraph, build_graph
from gpuprof.trace.critpath.rows import CriticalPart, CriticalPath
from gpuprof.trace.intervals import Intervals
from gpuprof.trace.metrics import TraceMetrics
from gpuprof.trace.vocab import RuntimeClass, classify_runtime

__all__ = ["CriticalPart", "CriticalPath", "Segment", "critical_path", "critical_segments", "PATH_KINDS", "MAX_PARTS",
           "UNRESOLVED", "Walk", "walk", "run_spans", "host_split", "part_label"]

PATH_KINDS = ("operator", "kernel", "copy", "sync_wait", "data_wait", "launch_gap", "idle")
MAX_PARTS = 16  # parts listed by name; the rest of each kind is one part named "(other)"
# characters of a part's name kept (a longer one ends in "…"): a part is a label, and a hostile 48 MiB operator
# name must not be copied once more into every report (the operators view keeps it whole)
MAX_PART_NAME = 1000
NOTHING = "nothing recorded on the main thread"
UNRESOLVED = "(path not resolved)"

Segment = tuple[str, float, float, str, str]  # (lane, start µs, end µs, kind, name)


@dataclass
class Walk:
    """What a walk crossed: host time (to split by name), runs of GPU events, and named pieces."""

    host: list[tuple[float, float]] = field(default_factory=list)
    runs: list[tuple[int, int, float, float]] = field(default_factory=list)  # (first, last, path end, step start)
    pieces: list[Segment] = field(default_factory=list)


def walk(g: StepGraph, a: float, b: float, host_end: float, out: Walk, stop: np.ndarray | None = None,
         start: int = -1) -> int:
    """Walk step ``[a, b]`` back from its end, adding what it crosses to ``out`` (see the module docstring).

    With ``stop`` (a flag per GPU event), the walk ends at the first flagged event it reaches, whose index it
    returns (-1: it reached the step's start): the critical path cut at collectives
    (:mod:`gpuprof.trace.critpath.hops`). With ``start`` (a GPU event), it walks back from that event's start
    instead of the step's end: what held the event back."""
    t, loc = b, -1  # loc: -1 the host, else a GPU event
    if start >= 0:
        t = float(g.g_ts[start])
        if g.g_run[start] < start:  # queued behind the previous event of its stream
            loc = start - 1
        else:
            t, loc = _handoff(g, start, t, a, out)
    elif b > host_end + 1.0 and g.n_gpu:
        j = _last_ending(g, b)
        if j >= 0 and g.g_end[j] > host_end:
            t, loc = min(float(g.g_end[j]), b), j
            if t < b:
                out.pieces.append((g.host_lane, t, b, "idle", NOTHING))
    guard = 4 * (len(g.w_ts) + g.n_gpu) + 16
    while t > a and guard > 0:
        guard -= 1
        if loc < 0:
            k = int(np.searchsorted(g.w_ts, t, side="left")) - 1
            if k < 0 or g.w_end[k] <= a:
                out.host.append((a, t))
                return -1
            if g.w_end[k] < t:
                out.host.append((float(g.w_end[k]), t))
                t = float(g.w_end[k])
            tgt = int(g.w_gpu[k])
            w_ts = float(g.w_ts[k])
            if g.w_kind[k] == WAIT_DATA or tgt < 0 or g.g_end[tgt] <= w_ts:
                kind = "data_wait" if g.w_kind[k] == WAIT_DATA else "sync_wait"
                out.pieces.append((g.host_lane, max(w_ts, a), t, kind, g.w_name[k]))
                t = w_ts
                continue
            done = min(float(g.g_end[tgt]), t)
            out.pieces.append((g.host_lane, max(done, a), t, "sync_wait", g.w_name[k]))
            t, loc = done, tgt
            continue
        j = loc
        r = int(g.g_run[j])
        lo = max(r, r + int(np.searchsorted(g.g_ts[r:j + 1], a, side="right")) - 1)
        if stop is not None:
            hit = np.flatnonzero(stop[lo:j + 1])
            if len(hit):  # a collective: the walk ends there (what ran after it on its stream is the path's)
                k = lo + int(hit[-1])
                if k < j:
                    out.runs.append((k + 1, j, t, a))
                return k
        out.runs.append((lo, j, t, a))
        if g.g_ts[lo] <= a:
            return -1
        t = min(float(g.g_ts[r]), t)  # (a wait's 1 µs tolerance can hand over a time before the event's start)
        t, loc = _handoff(g, r, t, a, out)
    if t > a:
        out.pieces.append((g.host_lane, a, t, "idle", UNRESOLVED))
    return -1


def _handoff(g: StepGraph, r: int, t: float, a: float, out: Walk) -> tuple[float, int]:
    """Where the path goes from the first event ``r`` of a run of queued GPU events, at time ``t``: to another
    stream's event it waited for, else its launch call on the host, else the previous event of its stream
    (``(t, loc)``; loc -1: the host)."""
    dep, launch, prev = int(g.g_dep[r]), float(g.g_launch[r]), int(g.g_prev[r])
    if dep >= 0:
        e = min(float(g.g_end[dep]), t)
        out.pieces.append((_lane(g, r), max(e, a), t, "idle", "wait for another stream"))
        return e, dep
    if g.g_queued[r] and prev >= 0 and g.g_end[prev] > a:  # queued, started long after it could: not recorded why
        e = min(float(g.g_end[prev]), t)
        out.pieces.append((_lane(g, r), max(e, a), t, "idle", "GPU idle, cause not recorded"))
        return e, prev
    if launch == launch and launch <= t:  # not NaN
        code = int(g.g_launch_code[r])
        out.pieces.append((_lane(g, r), max(launch, a), t, "launch_gap", g.launch_names[code] if code >= 0 else "launch"))
        return launch, -1
    if prev >= 0 and g.g_end[prev] > a:
        e = min(float(g.g_end[prev]), t)
        out.pieces.append((_lane(g, r), max(e, a), t, "idle", "GPU idle, cause not recorded"))
        return e, prev
    return t, -1


def _lane(g: StepGraph, i: int) -> str:
    return f"gpu:{g.device}:{int(g.g_stream[i])}"


def _last_ending(g: StepGraph, b: float) -> int:
    """The GPU event with the latest end at or before ``b`` (-1: none)."""
    ok = np.flatnonzero(g.g_end <= b + 0.5)
    return int(ok[np.argmax(g.g_end[ok])]) if len(ok) else -1


def run_spans(g: StepGraph, runs: list[tuple[int, int, float, float]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The GPU events of ``runs`` with the start and end of the path's time on each (an event's span reaches
    to the next queued event's start: the gap between them is the stream's own)."""
    if not runs:
        return np.zeros(0, np.int64), np.zeros(0), np.zeros(0)
    idx = np.concatenate([np.arange(lo, hi + 1) for lo, hi, _, _ in runs])
    nxt = np.concatenate([np.append(g.g_ts[lo + 1:hi + 1], t) for lo, hi, t, _ in runs])
    floor = np.concatenate([np.full(hi - lo + 1, a) for lo, hi, _, a in runs])
    start = np.maximum(g.g_ts[idx], floor)
    return idx, start, np.maximum(nxt, start)


def host_split(g: StepGraph, host: Intervals) -> list[tuple[str, str, Intervals]]:
    """The host time of the path by what ran: runtime calls by name, outermost operators by name, else idle."""
    return [(kind, name, ivs) for kind, name, ivs, _ in _host_split_lanes(g, host)]


def _host_split_lanes(g: StepGraph, host: Intervals) -> list[tuple[str, str, Intervals, str]]:
    """:func:`host_split` with each piece's lane: the main thread's, or the other thread whose operator names it
    (the backward thread's ``CudnnConvolutionBackward`` is drawn on that thread, where the user sees it run)."""
    out: list[tuple[str, str, Intervals, str]] = []
    rest = host
    for name, calls in g.host_runtime:
        if not rest:
            break
        got = calls.intersect(rest)
        if got:
            kind = "launch_gap" if classify_runtime(name) is RuntimeClass.LAUNCH else "operator"
            out.append((kind, name, got, g.host_lane))
            rest = rest.subtract(got)
    # the main thread's operators, then the others' (each on its own lane)
    for (starts, ends, codes, names), lane, lane_ids in ((g.top_ops, None, [g.host_lane]),
                                                         (g.other_ops, g.other_lane, g.other_lane_ids)):
        if not rest or not len(starts):
            continue
        under = Intervals.from_arrays(starts, ends, is_sorted=True).intersect(rest)
        if under:
            at = np.clip(np.searchsorted(starts, under.starts, side="right") - 1, 0, len(starts) - 1)
            reach = np.maximum.accumulate(ends)  # nested/overlapping ops of several threads: the outermost names it
            first = np.maximum.accumulate(np.where(np.concatenate(([True], starts[1:] >= reach[:-1])),
                                                   np.arange(len(starts)), 0))
            code = codes[first[at]]
            for c in np.flatnonzero(np.bincount(code, minlength=len(names))).tolist():
                keep = code == c
                out.append(("operator", names[c], Intervals(under.starts[keep], under.ends[keep]),
                            lane_ids[int(lane[c])] if lane is not None else lane_ids[0]))
            rest = rest.subtract(under)
    if rest:
        out.append(("idle", NOTHING, rest, g.host_lane))
    return out


def critical_path(m: TraceMetrics) -> CriticalPath | None:
    """The critical path of ``m``'s steps, mean per step (None without steps)."""
    if not m.steps:
        return None
    g = m.memo(build_graph)
    w = Walk()
    for a, b, host_end in g.steps:
        walk(g, a, b, host_end, w)
    n = len(g.steps)
    total: dict[tuple[str, str], float] = defaultdict(float)
    for kind, name, ivs in host_split(g, Intervals.from_pairs(w.host)):
        total[(kind, name)] += ivs.total()
    for piece in w.pieces:
        total[(piece[3], piece[4])] += max(piece[2] - piece[1], 0.0)
    idx, s, e = run_spans(g, w.runs)
    ahead = 0.0
    if len(idx):
        lag = g.g_ts[idx] - g.g_launch[idx]
        ok = ~np.isnan(lag) & (e > s)
        if ok.any():
            ahead = float(np.dot(np.maximum(lag[ok], 0.0), (e - s)[ok]) / (e - s)[ok].sum())
        per = np.bincount(g.g_name[idx] * 2 + (g.g_kind[idx] == GPU_COPY), weights=e - s, minlength=2 * len(g.names))
        for code in np.flatnonzero(per > 0).tolist():
            total[("copy" if code % 2 else "kernel", g.names[code // 2])] += float(per[code])
    length = m.mean_step_time
    covered = sum(total.values()) / n
    if length - covered > 1e-6 * max(length, 1.0):
        total[("idle", UNRESOLVED)] += (length - covered) * n  # the walk's guard stopped it: said, never hidden
    elif covered - length > 1e-6 * max(length, 1.0) and total:
        # time counted twice (pieces that overlap: not expected, the walk never runs forward): off the largest
        # part, so that the parts still add up to the step and none is negative
        top = max(total, key=lambda k: total[k])
        total[top] -= (covered - length) * n
    return CriticalPath(length_us=length, parts=_top_parts(total, n), host_ahead_us=ahead)


def part_label(name: str) -> str:
    """A part's name as the path shows it: cut to ``MAX_PART_NAME`` characters (an ellipsis says so)."""
    return name if len(name) <= MAX_PART_NAME else name[:MAX_PART_NAME] + "\u2026"


def _top_parts(total: dict[tuple[str, str], float], n: int) -> list[CriticalPart]:
    """The parts, largest first: the ``MAX_PARTS`` largest by name, the rest of each kind as ``(other)``."""
    ranked = sorted(((us / n, kind, name) for (kind, name), us in total.items() if us > 0), reverse=True)
    parts = [CriticalPart(kind, part_label(name), us) for us, kind, name in ranked[:MAX_PARTS]]
    rest: dict[str, float] = defaultdict(float)
    for us, kind, _name in ranked[MAX_PARTS:]:
        rest[kind] += us
    parts += [CriticalPart(kind, "(other)", us) for kind, us in sorted(rest.items(), key=lambda kv: -kv[1])]
    return parts


def critical_segments(m: TraceMetrics) -> list[Segment]:
    """The critical path of the median step as ``(lane, start_us, end_us, kind, name)``, in time order.

    Lanes: ``host:<pid>:<tid>`` (the main thread) and ``gpu:<device>:<stream>``;
    times are the trace's (µs). The median step is the one whose time is the
    median (the earlier of the two middle ones for an even count). Contiguous pieces of one lane, kind and
    name are one segment."""
    if not m.steps:
        return []
    g = m.memo(build_graph)
    order = sorted(range(len(g.steps)), key=lambda i: (g.steps[i][1] - g.steps[i][0], i))
    a, b, host_end = g.steps[order[(len(order) - 1) // 2]]
    w = Walk()
    walk(g, a, b, host_end, w)
    out: list[Segment] = list(w.pieces)
    for kind, name, ivs, lane in _host_split_lanes(g, Intervals.from_pairs(w.host)):
        out.extend((lane, float(s), float(e), kind, name) for s, e in ivs)
    idx, s, e = run_spans(g, w.runs)
    for i, lo, hi in zip(idx.tolist(), s.tolist(), e.tolist()):
        kind = "copy" if g.g_kind[i] == GPU_COPY else "kernel"
        out.append((_lane(g, i), lo, hi, kind, g.names[int(g.g_name[i])]))
    merged: list[Segment] = []  # one segment per stretch of the same lane, kind and name
    for x in sorted((x for x in out if x[2] > x[1]), key=lambda x: (x[1], x[2])):
        last = merged[-1] if merged else None
        if last is not None and last[0] == x[0] and last[3] == x[3] and last[4] == x[4] and x[1] - last[2] < 1e-6:
            merged[-1] = (last[0], last[1], max(last[2], x[2]), last[3], last[4])
        else:
            merged.append(x)
    return merged

"""The dependency graph of the recorded steps: what each piece of work waited for.

Definitions (docs/critical-path.md; all times in µs, as in the trace):

**Nodes**: the main device's GPU work (kernels, copies, memsets; a CUDA/HIP
graph launch's kernels share one launch call, so they enter as one node's
members, each held to the stream order) and the main thread's **waits**: its
synchronising runtime calls, its copy calls that return only once their copy
is done, and its data-loading ranges. Between two waits the host runs freely.

**Edges**, as arrays (no object per event):

* *launch*: a GPU event is ready a latency after its launch call starts
  (the call is matched by correlation id, on any host thread);
* *stream order*: a GPU event starts no earlier than the previous event of its
  stream ends. It was *queued* behind it when its launch call returned, or was
  issued early enough to be ready (the call's start plus the launch latency),
  before that previous event ended, or when it started within
  ``STREAM_GAP_US`` of it: its start was then set by the stream, whatever the
  gap (a GPU starts queued work a few µs after the previous ends, 4-9 µs on
  some: that is the stream's time, not the host's). A queued event that
  started more than ``QUEUE_GAP_US`` after both its stream was free and it was
  ready waited for something the trace does not record (the GPU idle: said);
  the launch latency is measured on the launches that found their stream empty;
* *cross-stream*: a GPU event that started more than ``STREAM_GAP_US`` after
  both its stream was free and it was ready, within ``CROSS_GAP_US`` of the end
  of another stream's event on the device that ended after those, waited for
  that event (``cudaStreamWaitEvent``, a collective's stream; the trace records
  the wait call, not which event it waited for);
* *sync*: a wait on the host ends after the GPU work it waited for: for a
  synchronising call, the last GPU work launched before it that had ended when it
  returned; for a copy call, its own copy. A data wait depends on no GPU work.

Everything is measured on the main thread and the main device
(:mod:`gpuprof.trace.steps`, :mod:`gpuprof.trace.gpuwork`); launches from other
host threads (autograd's backward thread) count as launches at their time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuprof.trace.columns import Columns, columns, gpu_columns
from gpuprof.trace.gpuwork import is_communication_kernel
from gpuprof.trace.intervals import Intervals
from gpuprof.trace.metrics import TraceMetrics
from gpuprof.trace.model import Event
from gpuprof.trace.threads import HostThread, stack_parents_of, thread_keys
from gpuprof.trace.vocab import RuntimeClass, classify_runtime, step_number

__all__ = ["StepGraph", "build_graph", "STREAM_GAP_US", "QUEUE_GAP_US", "CROSS_GAP_US", "BLOCKED_US", "WAIT_SYNC", "WAIT_COPY", "WAIT_DATA", "GPU_KERNEL",
           "GPU_COPY", "GPU_COMM"]

STREAM_GAP_US = 3.0  # a GPU event starting this close to its stream's previous end was queued behind it
# a queued GPU event starting later than this after its stream was free and it was ready waited for something else
# (on the shared traces 99% of queued starts follow the previous end within 11-15 µs, the rest by up to ms)
QUEUE_GAP_US = 50.0
CROSS_GAP_US = 25.0  # another stream's event ending this close before a late start is what it waited for (MI300: 11-18 µs)
BLOCKED_US = 50.0  # a launch or copy call longer than this that returned as GPU work ended waited for the GPU
DEFAULT_LATENCY_US = 5.0  # launch to start of an idle stream, when no launch in the trace shows it

_LOOK_BACK = 4096  # launches searched back for a sync's work when later work was still running
WAIT_SYNC, WAIT_COPY, WAIT_DATA = 0, 1, 2  # what a host wait is
GPU_KERNEL, GPU_COPY, GPU_COMM = 0, 1, 2  # what a GPU event is


@dataclass
class StepGraph:
    """The graph of one trace's recorded steps (see the module docstring), as numpy arrays.

    GPU events (``g_*``) are the main device's, in stream order (by stream,
    then start); waits (``w_*``) are the main thread's, in time order, never
    overlapping. ``g_prev[i]``: the previous event of ``i``'s stream (-1);
    ``g_run[i]``: the first event of the run of stream-bound events ending at
    ``i``; ``g_queued[i]``: it was queued behind the previous event of its
    stream (its start set by the stream: in its run, or after a gap the trace
    does not explain); ``g_launch``: the launch call's start (NaN without one);
    ``g_ready``: when the event could start once launched (the launch plus its
    latency; its recorded start when nothing else held it); ``g_dep``: the
    other stream's event it waited for (-1). ``w_gpu``: the GPU event a wait
    waited for (-1: none); ``w_tag``: the direction of the copy whose wait it
    is (``HtoD``, ``DtoH``, ``""``).
    """

    device: int | None
    host_lane: str
    g_ts: np.ndarray
    g_end: np.ndarray
    g_stream: np.ndarray
    g_kind: np.ndarray
    g_name: np.ndarray
    names: list[str]
    g_prev: np.ndarray
    g_run: np.ndarray
    g_queued: np.ndarray
    g_launch: np.ndarray
    g_launch_code: np.ndarray  # into launch_names, -1 without a launch
    launch_names: list[str]
    g_ready: np.ndarray
    g_dep: np.ndarray
    w_ts: np.ndarray
    w_end: np.ndarray
    w_kind: np.ndarray
    w_gpu: np.ndarray
    w_tag: list[str]
    w_name: list[str]
    w_call: list[Event | None]
    steps: list[tuple[float, float, float]]  # (start, end, host end) per step
    host_runtime: list[tuple[str, Intervals]]  # the main thread's other runtime calls, by name
    top_ops: tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]  # starts, ends, name codes, names
    other_ops: tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]  # the same, of the other host threads
    other_lane: np.ndarray  # per name code of other_ops: its thread (each thread has its own codes), into the ids
    other_lane_ids: list[str]  # ``host:<pid>:<tid>``, the timeline's lane of each other thread
    latency_us: float

    @property
    def n_gpu(self) -> int:
        return len(self.g_ts)


def build_graph(m: TraceMetrics) -> StepGraph:
    """The graph of ``m``'s steps (read it through ``m.memo(build_graph)``: built once per trace)."""
    dev = m.main_device
    gc = gpu_columns(m.trace)
    nk, nc = len(m.trace.kernels), len(m.trace.memcpys)
    sel = np.flatnonzero(gc.device == dev) if dev is not None and gc.n else np.zeros(0, np.int64)
    stream = gc.stream[sel] if len(sel) else np.zeros(0, np.int64)
    ts = gc.ts[sel] if len(sel) else np.zeros(0)
    order = np.lexsort((ts, stream))
    sel, stream, ts = sel[order], stream[order], ts[order]
    end = gc.end[sel] if len(sel) else np.zeros(0)
    kind = np.where(sel < nk, GPU_KERNEL, GPU_COPY).astype(np.int8)
    if len(sel):
        comm = np.fromiter(map(is_communication_kernel, gc.names), bool, len(gc.names))[gc.name_code[sel]]
        kind[comm & (sel < nk)] = GPU_COMM
    name, names = _recode(gc.name_code[sel], gc.names)
    first = np.ones(len(sel), bool)
    first[1:] = stream[1:] != stream[:-1]
    prev = np.where(first, -1, np.arange(len(sel)) - 1)
    prev_end = np.where(first, -np.inf, np.concatenate(([-np.inf], end[:-1])) if len(sel) else 0.0)
    at = m.gpu_launch[sel] if len(sel) else np.zeros(0, np.int64)
    rc = columns(m.trace, m.trace.runtime)
    launch = np.where(at >= 0, rc.ts[np.maximum(at, 0)] if rc.n else np.nan, np.nan)
    launch_end = np.where(at >= 0, rc.end[np.maximum(at, 0)] if rc.n else np.nan, np.nan)
    lcode, lnames = _recode(np.where(at >= 0, rc.name_code[np.maximum(at, 0)] if rc.n else -1, -1), rc.names)
    lat = ts - launch
    # the launch latency, measured where it shows: launches that found their stream empty (no queue behind which
    # the start waited)
    free = (launch >= prev_end) & (lat >= 0)
    latency = _median(lat[free]) if free.any() else DEFAULT_LATENCY_US
    ready_at = np.where(np.isnan(launch), ts, np.minimum(ts, launch + latency))  # launched: it could start then
    # a CUDA/HIP graph launch is one call for all its kernels (one correlation id): inside it, each kernel
    # follows the previous one of its stream, whatever the gap, never the launch call
    member = ~first & (at >= 0) & (at == np.concatenate(([-2], at[:-1]))) if len(sel) else first
    # queued: its start was set by the stream: its launch returned before the stream was free, or it was ready by
    # then and started soon after (a call that ran long, loading a module, enqueues its work only as it returns)
    queued = ~first & ((ts <= prev_end + STREAM_GAP_US) | (launch_end <= prev_end)
                       | (ready_at <= prev_end + STREAM_GAP_US) & (ts <= prev_end + QUEUE_GAP_US)) | member
    free_at = np.where(np.isnan(launch), prev_end, np.fmax(ready_at, prev_end))  # its stream free and it ready
    dep = _cross_stream(ts, end, stream, free_at)
    # in its stream's run: queued, and started within QUEUE_GAP_US of when it could (later: a cause not recorded)
    bound = queued & (dep < 0) & ((ts <= free_at + QUEUE_GAP_US) | member)
    run = np.maximum.accumulate(np.where(bound, 0, np.arange(len(sel)))) if len(sel) else np.zeros(0, np.int64)
    # ready: a typical latency after its launch where the stream held it; else its start (its launch, another
    # stream or a cause not recorded held it)
    ready = np.where(bound, ready_at, ts)

    keys = thread_keys(m.main_thread)
    main_ops = _top_ops(m, [ops for k, ops in m.threads.ops.items() if k in keys])[0]
    gpu = (ts, end, launch, gc.corr[sel] if len(sel) else np.zeros(0, np.int64), queued)
    waits = _waits(m, keys, gpu, main_ops[0], main_ops[1])
    w_ts = np.array([w[0] for w in waits], np.float64)
    w_end = np.array([w[1] for w in waits], np.float64)
    w_gpu = _wait_targets(waits, sel, ts, end, launch, gc, nk, nc)
    runtime_by_name = _host_runtime(m, keys, {id(w[4]) for w in waits if w[4] is not None})
    pid, tid = m.main_thread if m.main_thread is not None else ("", "")
    others = [k for k in m.threads.ops if k not in keys]
    other = _top_ops(m, [m.threads.ops[k] for k in others])
    return StepGraph(
        device=dev, host_lane=f"host:{pid}:{tid}", g_ts=ts, g_end=end, g_stream=stream, g_kind=kind,
        g_name=name, names=names, g_prev=prev, g_run=run, g_queued=queued & (dep < 0), g_launch=launch, g_launch_code=lcode, launch_names=lnames,
        g_ready=ready, g_dep=dep, w_ts=w_ts, w_end=w_end, w_kind=np.array([w[2] for w in waits], np.int8),
        w_gpu=w_gpu, w_tag=[w[3] for w in waits], w_name=[w[5] for w in waits], w_call=[w[4] for w in waits],
        steps=[(s.start, s.end, s.cpu_end) for s in m.steps], host_runtime=runtime_by_name,
        top_ops=main_ops,
        other_ops=other[0], other_lane=other[1], other_lane_ids=[f"host:{k[0]}:{k[1]}" for k in others],
        latency_us=latency)


def _median(x: np.ndarray) -> float:
    """The median of a non-empty array (``np.median`` would import numpy.ma, which ``analyze`` never loads)."""
    n = len(x)
    part = np.partition(x, [(n - 1) // 2, n // 2])
    return float(part[(n - 1) // 2] + part[n // 2]) / 2.0


def _recode(codes: np.ndarray, names: list[str]) -> tuple[np.ndarray, list[str]]:
    """``codes`` (into ``names``; -1: none) renumbered over the names they use, and those names."""
    used = np.zeros(len(names) + 1, bool)
    used[codes[codes >= 0]] = True
    at = np.flatnonzero(used[:-1])
    remap = np.full(len(names) + 1, -1, np.int64)
    remap[at] = np.arange(len(at))
    return remap[codes], [names[i] for i in at.tolist()]


def _cross_stream(ts: np.ndarray, end: np.ndarray, stream: np.ndarray, free: np.ndarray) -> np.ndarray:
    """Per GPU event, the other stream's event it waited for (-1): see the module docstring (``free``: when its
    stream was free and it was ready)."""
    dep = np.full(len(ts), -1, np.int64)
    if len(ts) < 2 or (stream == stream[0]).all():
        return dep
    late = np.flatnonzero(ts > np.nan_to_num(free, nan=-np.inf) + STREAM_GAP_US)
    if not len(late):
        return dep
    by_end = np.argsort(end, kind="stable")
    ends = end[by_end]
    j = np.searchsorted(ends, ts[late] + 0.5, side="right") - 1
    open_ = np.ones(len(late), bool)
    floor = np.maximum(ts[late] - CROSS_GAP_US, np.nan_to_num(free[late], nan=-np.inf))
    for _ in range(4):  # the latest end before the start on another stream (a few tries past this stream's)
        ok = open_ & (j >= 0)
        k = by_end[np.maximum(j, 0)]
        ok &= ends[np.maximum(j, 0)] > floor
        hit = ok & (stream[k] != stream[late])
        dep[late[hit]] = k[hit]
        open_ &= ok & ~hit
        j = j - 1
    return dep


# the main device's GPU work, for the calls that blocked on it: start, end, launch, correlation id, queued
_Gpu = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]
# a wait: (start, end, kind, copy direction, the runtime call or None, name)
_Wait = tuple[float, float, int, str, "Event | None", str]


def _waits(m: TraceMetrics, keys: frozenset[HostThread], gpu: _Gpu, op_ts: np.ndarray, op_end: np.ndarray
           ) -> list[_Wait]:
    """The main thread's waits in time order; a wait inside an earlier one is left out (the outer one holds it).
    ``gpu``: the main device's GPU work (for the launches that blocked on it); ``op_ts``/``op_end``: the
    main thread's outermost operators (a launch another thread made while the main thread ran none of its own, as
    in ``backward()``, whose operators run on autograd's thread, is the main thread's wait when it blocked)."""
    out: list[_Wait] = []
    if not m.steps:
        return out
    lo, hi = m.steps[0].start, m.steps[-1].end
    from gpuprof.trace.syncs import next_sync_call  # beside: the blocking-copy look-ahead, once defined

    sync_after: dict[int, str] = {}  # a sync that is the wait of a blocking copy -> the copy's direction
    for c in m.copies:
        r = c.launch
        if c.blocking and r is not None and (r.pid, r.tid) in keys and r.end >= lo and r.ts <= hi:
            sync = next_sync_call(m.threads, r)
            if sync is not None:
                sync_after[id(sync)] = c.kind.direction
            if classify_runtime(r.name) is not RuntimeClass.SYNC and r.end >= c.gpu.end - 1.0:
                out.append((r.ts, r.end, WAIT_COPY, c.kind.direction, r, r.name))
    calls = m.threads.runtime_on(keys)
    if calls:
        rc = columns(m.trace, calls)
        is_sync = np.fromiter((classify_runtime(n) is RuntimeClass.SYNC for n in rc.names), bool, len(rc.names))
        for i in np.flatnonzero(is_sync[rc.name_code] & (rc.end >= lo) & (rc.ts <= hi)).tolist():
            r = calls[i]
            out.append((r.ts, r.end, WAIT_SYNC, sync_after.get(id(r), ""), r, r.name))
        out += _blocked_launches(calls, rc, lo, hi, gpu)
    other = m.threads.runtime_on(frozenset(k for k in m.threads.runtime if k not in keys))
    if other:
        reach = np.maximum.accumulate(op_end) if len(op_end) else op_end
        for w in _blocked_launches(other, columns(m.trace, other), lo, hi, gpu):
            j = int(np.searchsorted(op_ts, w[1], side="left")) - 1  # the main thread's operators before its end
            if j < 0 or reach[j] <= w[0]:
                out.append(w)
    data = m.host_intervals.get("data_loading", Intervals.empty())
    for a, b in data.clip(lo, hi):
        out.append((a, b, WAIT_DATA, "", None, "data loading"))
    out.sort(key=lambda w: (w[0], -w[1]))
    kept: list[_Wait] = []
    for w in out:
        if kept and w[0] < kept[-1][1]:
            continue  # inside (or overlapping) the previous wait
        kept.append(w)
    return kept


def _blocked_launches(calls: list[Event], rc: Columns, lo: float, hi: float, gpu: _Gpu) -> list[_Wait]:
    """The launch and copy calls that waited for the GPU: longer than ``BLOCKED_US``, made while the main device
    was busy, returning within ``CROSS_GAP_US`` after a GPU event of it ended, and either with GPU work launched
    before them still not done when they returned (a full launch queue frees a slot when a kernel ends, and is
    still nearly full then) or as their own queued work, started while they ran, ended (an asynchronous copy
    from pageable memory returns once its stream reached it and the copy is done). A long call that returned
    when the GPU had drained (a module loaded on first launch) stays host time."""
    g_ts, g_end, g_launch, g_corr, g_queued = gpu
    if not len(g_ts):
        return []
    cls = [classify_runtime(n) for n in rc.names]
    kind = np.fromiter((c in (RuntimeClass.LAUNCH, RuntimeClass.MEMCPY, RuntimeClass.MEMSET) for c in cls), bool,
                       len(cls))[rc.name_code]
    cand = np.flatnonzero(kind & (rc.dur > BLOCKED_US) & (rc.end >= lo) & (rc.ts <= hi))
    if not len(cand):
        return []
    c_ts, c_end = rc.ts[cand], rc.end[cand]
    ends = np.sort(g_end)
    j = np.searchsorted(ends, c_end + 1.0, side="right") - 1
    freed = (j >= 0) & (ends[np.maximum(j, 0)] >= c_end - CROSS_GAP_US)
    # busy when the call began: some GPU work launched before it was still running (started before, ended after)
    by_start = np.argsort(g_ts, kind="stable")
    reach = np.maximum.accumulate(g_end[by_start])
    k = np.searchsorted(g_ts[by_start], c_ts, side="right") - 1
    busy = (k >= 0) & (reach[np.maximum(k, 0)] > c_ts)
    # work launched before the call still not done when it returned: the queue it waited in was not drained
    has = np.flatnonzero(~np.isnan(g_launch))
    by_launch = has[np.argsort(g_launch[has], kind="stable")]
    late = np.maximum.accumulate(g_end[by_launch]) if len(by_launch) else np.zeros(0)
    n = np.searchsorted(g_launch[by_launch], c_ts, side="left")
    pending = (n > 0) & (late[np.maximum(n - 1, 0)] > c_end + 1.0) if len(late) else np.zeros(len(cand), bool)
    # its own work, queued, ran while it waited and ended as it returned
    own = dict(zip(g_corr.tolist(), range(len(g_corr))))
    mine = np.array([own.get(int(c), -1) for c in rc.corr[cand].tolist()], np.int64)
    at = np.maximum(mine, 0)
    reached = (mine >= 0) & g_queued[at] & (g_ts[at] >= c_ts) & (g_end[at] >= c_end - CROSS_GAP_US) \
        & (g_end[at] <= c_end + 1.0)
    return [(calls[i].ts, calls[i].end, WAIT_SYNC, "", calls[i], calls[i].name)
            for i in cand[freed & busy & (pending | reached)].tolist()]


def _wait_targets(waits: list[_Wait], sel: np.ndarray, ts: np.ndarray, end: np.ndarray, launch: np.ndarray,
                  gc: Columns, nk: int, nc: int) -> np.ndarray:
    """Per wait, the GPU event (graph index) it waited for, -1 for none (see the module docstring)."""
    out = np.full(len(waits), -1, np.int64)
    if not len(sel) or not waits:
        return out
    have = ~np.isnan(launch)
    idx = np.flatnonzero(have)
    by_launch = idx[np.argsort(launch[idx], kind="stable")]
    l_sorted = launch[by_launch]
    e_sorted = end[by_launch]
    peak = np.maximum.accumulate(e_sorted)
    top = by_launch[np.maximum.accumulate(np.where(e_sorted >= peak, np.arange(len(by_launch)), 0))]
    copies = np.flatnonzero((sel >= nk) & (sel < nk + nc)) if any(w[2] == WAIT_COPY for w in waits) else sel[:0]
    pos_of = dict(zip(gc.corr[sel[copies]].tolist(), copies.tolist()))  # a copy's correlation id -> graph index
    for k, (w_ts, w_end, kind, _tag, call, _name) in enumerate(waits):
        if kind == WAIT_DATA:
            continue
        if kind == WAIT_COPY and call is not None:
            i = pos_of.get(call.corr, -1)
            out[k] = i if i >= 0 and end[i] <= w_end + 1.0 else -1
            continue
        n = int(np.searchsorted(l_sorted, w_ts, side="left"))
        if not n:
            continue
        best = int(top[n - 1])  # the latest end of all work launched before the call
        if end[best] > w_end + 1.0:
            # still running when the call returned (another stream): what it waited for had ended by then;
            # looked for among the latest launches only, so that the search stays linear
            cand = by_launch[max(0, n - _LOOK_BACK):n]
            ok = cand[end[cand] <= w_end + 1.0]
            best = int(ok[int(np.argmax(end[ok]))]) if len(ok) else -1
        if best >= 0 and end[best] > w_ts - STREAM_GAP_US:  # what had ended when the call returned, during it
            out[k] = best
    return out


def _host_runtime(m: TraceMetrics, keys: frozenset[HostThread], waits: set[int]) -> list[tuple[str, Intervals]]:
    """The main thread's runtime calls that are no waits, by name (launch overhead, allocator calls...)."""
    calls = m.threads.runtime_on(keys)
    if not calls:
        return []
    rc = columns(m.trace, calls)
    if waits:  # (a set: a list look-up per call would not be); the look-ups in C, no Python loop per call
        keep = ~np.fromiter(map(waits.__contains__, map(id, calls)), bool, rc.n)
    else:
        keep = np.ones(rc.n, bool)
    code = rc.name_code[keep]
    ts, dur = rc.ts[keep], rc.dur[keep]
    order = np.argsort(code, kind="stable")
    code, ts, dur = code[order], ts[order], dur[order]
    cuts = np.flatnonzero(np.diff(code)) + 1
    return [(rc.names[int(c[0])], Intervals.from_spans(t, d))
            for c, t, d in zip(np.split(code, cuts), np.split(ts, cuts), np.split(dur, cuts)) if len(c)]


def _top_ops(m: TraceMetrics, groups: list[list[Event]]
             ) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray, list[str]], np.ndarray]:
    """The outermost operators of each thread's list in ``groups`` (those directly under a step marker count as
    outermost), by start: (starts, ends, name codes into the names that follow), and the group of each name code
    (each group's names get codes of their own, so a code tells the thread)."""
    starts: list[np.ndarray] = []  # per thread, from its shared columns
    ends: list[np.ndarray] = []
    codes: list[np.ndarray] = []
    group: list[np.ndarray] = []  # per thread: its index, once per name of its own block of name codes
    names: list[str] = []
    for gi, ops in enumerate(groups):
        if not ops:
            continue
        oc = columns(m.trace, ops)
        parent = stack_parents_of(oc.ts, oc.end)
        marker = np.fromiter((step_number(n) is not None for n in oc.names), bool, len(oc.names))[oc.name_code]
        top = ~marker & ((parent < 0) | marker[np.maximum(parent, 0)] & (parent >= 0))
        starts.append(oc.ts[top])
        ends.append(oc.end[top])
        codes.append(oc.name_code[top] + len(names))
        group.append(np.full(len(oc.names), gi, np.int64))
        names += oc.names
    if not starts:
        return (np.zeros(0), np.zeros(0), np.zeros(0, np.int64), []), np.zeros(0, np.int64)
    s, e, c = np.concatenate(starts), np.concatenate(ends), np.concatenate(codes)
    order = np.lexsort((-(e - s), s))  # by start, the longest first (a thread's op before another's inside it)
    return (s[order], e[order], c[order], names), np.concatenate(group)

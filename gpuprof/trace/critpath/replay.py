"""What-if replay: the recorded steps recomputed on the graph with one cause removed.

Model (docs/critical-path.md): each stream runs its events in order, each as
soon as it is ready and the previous one is done: ``start = max(ready, previous
end)``; an event is ready a fixed latency after its launch, and its launch moves
with the host. The host runs its recorded work unchanged between waits; a wait
ends its recorded overhead after the GPU work it waited for is done. Removing a
cause changes waits (a data wait or a sync gone, a copy made asynchronous) or
the GPU's readiness (launch gaps closed as one CUDA graph launch would: the
stream runs each stretch between two waits back to back, and the host no longer
spends the time of its launch calls), or takes host time away (runtime calls
made cheap: the main thread's time in them is cut out of its time line, so
what it ran after them, and the GPU work it launched, moves earlier by the
time cut before it); the
host's later work moves earlier by what a wait no longer holds it, and the GPU
work it launches moves with it.

The stream recursion ``start_i = C_i + max_{j<=i}(ready_j - C_j)`` (``C``: the
stream's work before ``i``) is a running maximum, so the replay visits each
wait once and each (wait, stream) pair once: the events themselves are handled
as arrays. The replay of the unchanged graph gives back the recorded times
(tested); a saving is the difference of two replays.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gpuprof.trace.critpath.graph import GPU_COPY, WAIT_COPY, StepGraph
from gpuprof.trace.intervals import Intervals
from gpuprof.trace.vocab import RuntimeClass, classify_runtime

__all__ = ["Removal", "Replayer", "replay_saving"]


@dataclass(frozen=True)
class Removal:
    """What a what-if takes away: waits dropped (no wait at all), waits made asynchronous (their own call
    time stays, the wait for the GPU goes), launch gaps closed (each stretch of kernels a stream runs
    between two waits is ready at once, as one graph launch), and host time cut (the main thread's time
    in these spans is gone: runtime calls made cheap or hoisted out of the steps)."""

    drop: frozenset[int] = frozenset()
    make_async: frozenset[int] = frozenset()
    close_launch_gaps: bool = False
    cut_host: Intervals = field(default_factory=Intervals.empty)


class Replayer:
    """The arrays one trace's replays share (built once; each :meth:`end` is one replay)."""

    def __init__(self, g: StepGraph) -> None:
        self.g = g
        lo = g.steps[0][0] if g.steps else 0.0
        self.host_end = max((s[2] for s in g.steps), default=lo)
        inside = (g.w_ts >= lo) & (g.w_ts < self.host_end)
        self.waits = np.flatnonzero(inside)
        n = g.n_gpu
        ts, end = g.g_ts, g.g_end
        nxt_bound = np.zeros(n, bool)
        if n > 1:
            same = g.g_stream[1:] == g.g_stream[:-1]
            nxt_bound[:-1] = same & (g.g_run[1:] != np.arange(1, n))
        eff = np.where(nxt_bound, np.append(ts[1:], 0.0) - ts, end - ts)  # the stream's time on each event
        first = np.ones(n, bool)
        if n > 1:
            first[1:] = g.g_stream[1:] != g.g_stream[:-1]
        csum = np.cumsum(eff) - eff
        base = np.maximum.accumulate(np.where(first, np.arange(n), 0)) if n else np.zeros(0, np.int64)
        self.C = csum - csum[base] if n else csum
        self.u = g.g_ready - self.C
        when = np.where(np.isnan(g.g_launch), ts, g.g_launch)
        bounds = np.append(g.w_ts[self.waits], self.host_end)
        chunk = np.searchsorted(bounds, when, side="left")
        for s in set(g.g_stream.tolist()):  # a stream runs in order: a later event never in an earlier chunk
            at = np.flatnonzero(g.g_stream == s)
            chunk[at] = np.maximum.accumulate(chunk[at])
        self.chunk = chunk
        self.when = when
        # per chunk, its runs of one stream: (stream, first, last), events in order
        key_change = np.ones(n, bool)
        if n > 1:
            key_change[1:] = (chunk[1:] != chunk[:-1]) | first[1:]
        starts = np.flatnonzero(key_change)
        ends = np.append(starts[1:], n) - 1
        self.blocks: dict[int, list[tuple[int, int, int]]] = {}
        for a, b in zip(starts.tolist(), ends.tolist()):
            k = int(chunk[a])
            if k <= len(self.waits):
                self.blocks.setdefault(k, []).append((int(g.g_stream[a]), a, b))
        self.kernel = g.g_kind != GPU_COPY
        # per host stretch before each wait (and before the steps' end): the main thread's launch-call time,
        # which one graph launch would no longer spend
        seg_hi = bounds
        seg_lo = np.append(lo, g.w_end[self.waits])
        self.bounds, self.seg_lo = bounds, seg_lo  # per host stretch (before each wait, then to the end)
        launches = Intervals.empty()
        for name, calls in g.host_runtime:
            if classify_runtime(name) is RuntimeClass.LAUNCH:
                launches = launches.union(calls)
        self.launch_us = launches.per_segment(seg_lo, np.maximum(seg_hi, seg_lo)).tolist()
        self._recorded: tuple[float, float] | None = None
        self.last_held = False  # after a replay: its host's last wait ended when the GPU's work it waited for did

    @property
    def recorded(self) -> tuple[float, float]:
        """:meth:`ends` of the unchanged graph (replayed once)."""
        if self._recorded is None:
            self._recorded = self.ends()
        return self._recorded

    def end(self, rm: Removal = Removal()) -> float:
        """When the replayed steps end: the later of the host's last step end and the GPU work launched
        before it (the recorded steps' end, for the unchanged graph)."""
        return max(self.ends(rm))

    def ends(self, rm: Removal = Removal()) -> tuple[float, float]:
        """The replayed host's last step end and the end of the GPU work launched before it (-inf: none); sets
        :attr:`last_held`."""
        g, C, u = self.g, self.C, self.u
        dur = g.g_end - g.g_ts
        cut_seg, cut_wait, cut_ev = self._cuts(rm.cut_host)
        shift = 0.0  # how much earlier than recorded the host now runs
        held = False  # the host's last wait waited for the GPU's work
        best: dict[int, float] = {}  # per stream: max(u - shift) over its events so far
        last: dict[int, int] = {}
        for k in range(len(self.waits) + 1):
            for s, a, b in self.blocks.get(k, ()):
                if rm.close_launch_gaps and self.kernel[a:b + 1].all():
                    top = float(u[a] - cut_ev[a])  # one launch readies the stretch: the stream runs it back to back
                else:
                    top = float((u[a:b + 1] - cut_ev[a:b + 1]).max())
                best[s] = max(best.get(s, -np.inf), top - shift)
                last[s] = b
            if k == len(self.waits):
                break
            if rm.close_launch_gaps:
                shift += self.launch_us[k]
            shift += cut_seg[k]
            w = int(self.waits[k])
            w_ts, w_end = float(g.w_ts[w]), float(g.w_end[w])
            start = w_ts - shift
            if w in rm.drop:
                shift = w_end - start
                continue
            only = int(g.g_stream[g.w_gpu[w]]) if g.w_kind[w] == WAIT_COPY and g.w_gpu[w] >= 0 else None
            rec, new = -np.inf, -np.inf
            if g.w_gpu[w] >= 0:
                for s, i in last.items():
                    if (only is None or s == only) and g.g_end[i] <= w_end + 1.0:
                        rec = max(rec, float(g.g_end[i]))
                        new = max(new, float(C[i] + dur[i]) + best[s])
            over = max(w_end - max(w_ts, rec) - cut_wait[k], 0.0)  # a call cut inside a data wait shortens it
            done = start + over if w in rm.make_async or rec == -np.inf else max(start, new) + over
            held = not (w in rm.make_async or rec == -np.inf) and new > start  # the GPU released the host
            shift = w_end - done
        if rm.close_launch_gaps:
            shift += self.launch_us[-1]
        shift += cut_seg[-1]
        gpu = max((float(C[i] + dur[i]) + best[s] for s, i in last.items()), default=-np.inf)
        self.last_held = held
        return self.host_end - shift, gpu

    def bound(self, rm: Removal) -> float:
        """An upper bound of what removing ``rm`` can save over the recorded steps, from the recording alone
        (µs in all): the host ends earlier by at most the time removed from it (the waits, the time cut, the
        launch calls), and each stream's GPU work ends earlier by at most its idle time after the first thing
        removed (kernels keep their length; work launched before that keeps its place)."""
        g = self.g
        ws = sorted(rm.drop | rm.make_async)
        spans = [(float(g.w_ts[w]), float(g.w_end[w])) for w in ws]
        host_gain = sum(b - a for a, b in spans) + rm.cut_host.total()
        t0 = min([a for a, _ in spans] + ([float(rm.cut_host.starts[0])] if rm.cut_host else []), default=np.inf)
        if rm.close_launch_gaps:
            host_gain += float(sum(self.launch_us))
            t0 = g.steps[0][0] if g.steps else -np.inf
        if t0 == np.inf:
            return 0.0
        host_end, gpu_end = self.recorded
        floor = -np.inf
        inside = self.when <= self.host_end
        for s in set(g.g_stream[inside].tolist()):
            at = np.flatnonzero(inside & (g.g_stream == s))
            end_s = float(g.g_end[at].max())
            if end_s <= t0:
                floor = max(floor, end_s)
                continue
            busy = Intervals.from_arrays(g.g_ts[at], g.g_end[at]).intersect(Intervals.from_pairs([(t0, end_s)]))
            floor = max(floor, t0 + busy.total())  # the stream's end with every idle stretch after t0 closed
        return max(max(host_end, gpu_end) - max(host_end - host_gain, floor), 0.0)

    def _cuts(self, cut: Intervals) -> tuple[list[float], list[float], np.ndarray]:
        """The host time ``cut`` takes away: per host stretch (before each wait, then to the end), inside each
        wait, and per GPU event, before its launch in its own stretch (the launch moves earlier by it)."""
        n_seg = len(self.seg_lo)
        if not cut:
            return [0.0] * n_seg, [0.0] * (n_seg - 1), np.zeros(self.g.n_gpu)
        lo, hi = self.seg_lo, self.bounds
        per_seg = cut.per_segment(lo, np.maximum(hi, lo)).tolist()
        w = self.waits
        per_wait = cut.per_segment(self.g.w_ts[w], self.g.w_end[w]).tolist()
        ev_lo = lo[np.minimum(self.chunk, n_seg - 1)]
        per_ev = cut.per_segment(ev_lo, np.maximum(self.when, ev_lo))
        return per_seg, per_wait, per_ev


def replay_saving(r: Replayer, rm: Removal) -> float:
    """How much shorter the recorded steps are, per step, with ``rm`` removed (µs; never negative, never above
    :meth:`Replayer.bound`)."""
    n = max(len(r.g.steps), 1)
    return min(max(max(r.recorded) - r.end(rm), 0.0), r.bound(rm)) / n

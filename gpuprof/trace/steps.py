"""The main thread and the step windows every per-step metric is measured in.

Definitions (all times in µs, as in the trace):

**Main thread**: the host thread that records the ``ProfilerStep#N``
annotations; without them, the host thread with the most operator time.

**Step**: one ``ProfilerStep#N`` range of the main thread. Steps tile the
timeline: step *i* runs from its own start to the next step's start, or, for
the last step (and before a gap), to the later of its host end and the end of
the last GPU activity it launched. Without ``ProfilerStep#`` events the whole
trace (after its lead-in, see below) is one step (id 0). Duplicate step numbers (two profiling spans in one
file) are kept as separate steps, in time order.

**Lead-in**: in a trace without ``ProfilerStep#`` markers, the time from the
trace's first event to its first GPU work: the earlier of the first GPU
activity (kernel, copy or memset) and the start of the host call that launched
it. The profiler was started before the program used the GPU (imports, CUDA
context creation, data set-up); that time is not a GPU-idle problem of the
work being profiled, so the whole-trace step starts after it, and it is
reported on its own (``lead_in_us``). Traces with step markers and traces
without GPU work have no lead-in (None): their windows already start where the
work does.

**Step time**: the length of a step's window. Reports give the median.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from gpuprof.trace.columns import columns, gpu_columns, gpu_launch_positions, named
from gpuprof.trace.intervals import Interval
from gpuprof.trace.model import Event, Trace
from gpuprof.trace.table import is_table
from gpuprof.trace.threads import HostThread, thread_keys
from gpuprof.trace.vocab import step_number

__all__ = ["Step", "step_markers", "main_thread", "find_steps"]


@dataclass
class Step:
    """One step window (see the module docstring)."""

    index: int  # position in time order
    id: int  # N of ProfilerStep#N (0 when the trace has no steps)
    start: float
    end: float
    cpu_end: float

    @property
    def dur(self) -> float:
        return self.end - self.start


def step_markers(trace: Trace) -> list[Event]:
    """The ``ProfilerStep#N`` ranges: user annotations, or operators in older traces."""
    out: list[Event] = []
    for events in (trace.annotations, trace.ops):
        out.extend(named(events, _is_step_name, trace))  # per distinct name, once (the shared columns' names)
    return out


def _is_step_name(name: str) -> bool:
    return step_number(name) is not None


def main_thread(trace: Trace, markers: list[Event]) -> HostThread | None:
    """The main thread (see the module docstring); None without host events."""
    step_threads: dict[HostThread, int] = defaultdict(int)
    for e in markers:
        step_threads[(e.pid, e.tid)] += 1
    if step_threads:
        return max(step_threads, key=lambda k: step_threads[k])
    op_time: dict[HostThread, float] = defaultdict(float)
    for o in trace.ops:
        op_time[(o.pid, o.tid)] += o.dur
    if not op_time:
        for r in trace.runtime:
            op_time[(r.pid, r.tid)] += r.dur
    if not op_time:
        return None
    return max(op_time, key=lambda k: op_time[k])


def find_steps(
    trace: Trace, main: HostThread | None, markers: list[Event], launch_by_corr: dict[int, Event],
    gpu_launch: Callable[[], np.ndarray] | None = None,
) -> tuple[list[Step], bool, Interval | None]:
    """The steps in time order, whether they come from step markers, and the lead-in (if any).

    ``gpu_launch``: gives :func:`~gpuprof.trace.columns.gpu_launch_positions` of ``trace`` when the caller
    keeps it for later readers (asked only where the steps need it)."""
    main_keys = thread_keys(main)
    marks = sorted(
        (e.ts, e.end, step_number(e.name)) for e in markers if main is None or (e.pid, e.tid) in main_keys
    )
    # A ProfilerStep can appear both as user_annotation and (older torch) as an op: dedupe.
    dedup: list[tuple[float, float, int]] = []
    for m in marks:
        if dedup and dedup[-1][2] == m[2] and abs(dedup[-1][0] - m[0]) < 1.0:
            continue
        dedup.append(m)  # type: ignore[arg-type]
    if not dedup:
        lo, hi = _extent(trace)
        if hi <= lo:
            return [], False, None
        first = _first_gpu_work(trace, launch_by_corr)
        lead_in = None
        if first is not None and lo < first < hi:
            lead_in = (lo, first)
            lo = first
        return [Step(index=0, id=0, start=lo, end=hi, cpu_end=hi)], False, lead_in

    gpu_end = _GpuEndByLaunch(trace, gpu_launch)
    steps: list[Step] = []
    for i, (s, e, n) in enumerate(dedup):
        if i + 1 < len(dedup):
            nxt = dedup[i + 1][0]
            # contiguous steps tile exactly; before a gap, GPU work may extend the step up to the next start
            end = nxt if nxt - e < 1.0 else min(max(e, gpu_end.latest(s, e)), nxt)
        else:
            end = _last_step_end(s, e, gpu_end.latest(s, e), gpu_end.latest(float("-inf"), s),
                                 [st.dur for st in steps])
        steps.append(Step(index=i, id=n, start=s, end=end, cpu_end=e))
    return steps, True, None


def _last_step_end(start: float, host_end: float, gpu_end: float, queued_end: float, others: list[float]) -> float:
    """The end of the last step: until its GPU work is done, less the queue of earlier steps' work it drains.

    The other steps end where the next begins, so the GPU work each leaves
    queued is drained inside the next step's window. The last step has no
    next: stretched to the end of its GPU work it would also hold the drain
    of the queue it started with, and lengthen the mean step (by 15% and more
    on real traces). Where the GPU ran less than a step behind the host
    (``queued_end``, the end of the work launched before the step, is before
    the step's host end), the host sets the pace: the step is capped at the
    median of the other steps, and never ends before its host range. Where
    the GPU ran a whole step or more behind (the host queued ahead, as in a
    short GPU-bound capture), the host is no clock and the step keeps all its
    GPU work; so does the only step of a trace.
    """
    end = max(host_end, gpu_end)
    if others and queued_end < host_end:
        end = max(host_end, min(end, start + statistics.median(others)))
    return end


def _first_gpu_work(trace: Trace, launch_by_corr: dict[int, Event]) -> float | None:
    """Start of the first GPU work: its GPU activity or, earlier, the host call that launched it (None without GPU work)."""
    first = None
    for g in trace.gpu_events():
        t = g.ts
        r = launch_by_corr.get(g.corr) if g.corr >= 0 else None
        if r is not None and r.ts < t:
            t = r.ts
        if first is None or t < first:
            first = t
    return first


class _GpuEndByLaunch:
    """When the GPU work launched in a host time range ends (built on first use)."""

    def __init__(self, trace: Trace, gpu_launch: Callable[[], np.ndarray] | None = None) -> None:
        self._trace = trace
        self._gpu_launch = gpu_launch
        self._launch: np.ndarray | None = None
        self._end: np.ndarray | None = None

    def _pairs(self) -> tuple[np.ndarray, np.ndarray]:
        """Per GPU event with a launch, the launch's start and the event's end, by launch start.

        (Only maxima over runs of launch starts are asked for, so the order among equal
        starts does not matter.)"""
        trace = self._trace
        # the launch_by_corr look-up, for every GPU event at once
        at = self._gpu_launch() if self._gpu_launch is not None else gpu_launch_positions(trace)
        hit = np.flatnonzero(at >= 0)
        launch = columns(trace, trace.runtime).ts[at[hit]]
        gc = gpu_columns(trace)
        by_start = np.argsort(launch, kind="stable")
        return launch[by_start], gc.end[hit][by_start]

    def latest(self, lo: float, hi: float) -> float:
        """The latest end of GPU work launched at ``lo <= t <= hi`` (-inf if none)."""
        if self._launch is None:
            self._launch, self._end = self._pairs()
        i = int(np.searchsorted(self._launch, lo, side="left"))
        j = int(np.searchsorted(self._launch, hi, side="right"))
        return float(self._end[i:j].max()) if j > i else float("-inf")  # type: ignore[index]


def _extent(trace: Trace) -> tuple[float, float]:
    lo, hi = float("inf"), float("-inf")
    for events in trace.lists().values():
        if events:
            lo = min(lo, events[0].ts)
            hi = max(hi, float((events.ts + events.dur).max()) if is_table(events) else max(e.end for e in events))
    return lo, hi

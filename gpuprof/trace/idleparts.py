"""The GPU's idle time split by name: which runtime calls, Python functions or operators held it.

The metric is defined in :mod:`gpuprof.trace.metrics` (**Idle parts**). The
idle breakdown there says *which kind* of host work ran while the main GPU was
idle; this module names the calls and functions, so a low-utilisation finding
can say what to look at even where no other rule applies.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from gpuprof.trace.gpuwork import union_of
from gpuprof.trace.intervals import Intervals
from gpuprof.trace.metrics import TraceMetrics
from gpuprof.trace.model import Event
from gpuprof.trace.stacks import is_user_frame
from gpuprof.trace.threads import thread_keys
from gpuprof.trace.vocab import step_number

__all__ = ["IdlePart", "idle_parts", "NOTHING_RECORDED"]

NOTHING_RECORDED = "nothing recorded on the main thread"


@dataclass(frozen=True)
class IdlePart:
    """One named part of the main GPU's idle time (µs summed over all steps)."""

    kind: str  # "runtime", "python", "operator" or "none"
    name: str  # the runtime call, the Python frame (``file.py(LINE): fn``), the operator, or NOTHING_RECORDED
    us: float


def idle_parts(m: TraceMetrics) -> list[IdlePart]:
    """The main GPU's idle time inside the steps, split by name, largest first (empty without a GPU).

    First match wins, per instant: a runtime call on the main thread (by its
    name); else the innermost user Python frame open on the main thread (the
    innermost frame when no user frame is open); else, in traces without
    Python stacks, the innermost operator; else nothing recorded.
    """
    if m.main_device is None or not m.windows or m.main_thread is None:
        return []
    busy = m.gpu_busy.get(m.main_device, Intervals.empty())
    idle = Intervals.from_pairs(m.windows).subtract(busy)
    if not idle:
        return []
    keys = thread_keys(m.main_thread)
    out: dict[tuple[str, str], float] = defaultdict(float)
    rest = idle
    runtime = m.threads.runtime_on(keys)
    by_name: dict[str, list[Event]] = defaultdict(list)
    for r in runtime:
        by_name[r.name].append(r)
    covered = Intervals.empty()
    for name, calls in by_name.items():
        got = rest.intersect(union_of(calls))
        t = got.total()
        if t > 0:
            out[("runtime", name)] += t
            covered = covered.union(got)
    rest = rest.subtract(covered)
    python = [e for e in m.trace.python if (e.pid, e.tid) in keys]
    if python:
        kind, nested, prefer = "python", python, is_user_frame
    else:
        markers: dict[str, bool] = {}  # per distinct name: is it a step marker?
        ops = m.threads.ops_on(keys)
        for o in ops:
            if o.name not in markers:
                markers[o.name] = step_number(o.name) is not None
        kind, nested, prefer = "operator", [o for o in ops if not markers[o.name]], None
    if nested and rest:
        under = union_of(nested)
        _add_innermost(out, kind, nested, rest.intersect(under), prefer=prefer)
        rest = rest.subtract(under)
    if rest:
        out[("none", NOTHING_RECORDED)] += rest.total()
    parts = [IdlePart(kind, name, us) for (kind, name), us in out.items() if us > 0]
    parts.sort(key=lambda p: -p.us)
    return parts


def _add_innermost(out: dict[tuple[str, str], float], kind: str, events: Sequence[Event], idle: Intervals,
                   prefer: Callable[[str], bool] | None) -> None:
    """Add to ``out`` the idle time under each event of one thread's nested ``events``, charged to
    the innermost open event (or the innermost one ``prefer`` accepts); time under none goes nowhere."""
    if not idle:
        return
    events = _overlapping(events, idle)
    segs_lo: list[float] = []
    segs_hi: list[float] = []
    names: list[str] = []
    # stack of (end, charged name): the charged name of an entry is its own name when preferred,
    # else the charged name of the entry below it (the nearest preferred enclosing frame), else its own
    stack: list[tuple[float, str, bool]] = []
    t = float("-inf")
    def close_until(ts: float) -> None:
        """Pop the entries that end by ``ts``, giving each the time since the last boundary."""
        nonlocal t
        while stack and stack[-1][0] <= ts:
            until = stack[-1][0]
            if until > t:
                segs_lo.append(t)
                segs_hi.append(until)
                names.append(stack[-1][1])
                t = until
            stack.pop()

    for e in sorted(events, key=lambda e: (e.ts, -e.dur)):
        ts = e.ts
        close_until(ts)
        if stack and ts > t:  # the innermost open entry runs until this event starts
            segs_lo.append(t)
            segs_hi.append(ts)
            names.append(stack[-1][1])
        t = ts
        end = ts + e.dur
        if stack and end > stack[-1][0]:
            end = stack[-1][0]  # a child never outlives its parent (clock rounding)
        own = prefer is None or prefer(e.name)
        if own or not stack:
            charged, pref = e.name, own
        else:
            charged, pref = (stack[-1][1], True) if stack[-1][2] else (e.name, False)
        stack.append((end, charged, pref))
    close_until(float("inf"))
    if not names:
        return
    per = idle.per_window(list(zip(segs_lo, segs_hi)))
    for name, us in zip(names, per):
        if us > 0:
            out[(kind, name)] += us


def _overlapping(events: Sequence[Event], idle: Intervals) -> list[Event]:
    """The events that overlap an idle interval. Dropping the others changes nothing above: an event
    open at an idle instant overlaps idle, and so does every event enclosing it (the stack is intact)."""
    if not events:
        return []
    starts = np.fromiter((e.ts for e in events), dtype=np.float64, count=len(events))
    ends = starts + np.fromiter((e.dur for e in events), dtype=np.float64, count=len(events))
    i = np.searchsorted(idle.ends, starts, side="right")  # the first idle interval ending after the start
    hit = i < len(idle.starts)
    hit[hit] = np.asarray(idle.starts)[i[hit]] < ends[hit]
    return [events[k] for k in np.flatnonzero(hit).tolist()]

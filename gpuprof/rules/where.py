"""Where a finding points: the user's line that made the calls or called the model.

The innermost user frame around an event names a function (a trace's Python frames give its first
line, or the line it was at when the profiler started); :meth:`~gpuprof.trace.stacks.StackIndex.call_location`
narrows that to the call's own line when the user's source tells it (:mod:`gpuprof.trace.callsite`).
Shared by the habit and pitfall rules (GP840, GP841, GP843, GP844, GP852).
"""

from __future__ import annotations

from collections import Counter
from typing import Callable

from gpuprof.findings import SourceLocation
from gpuprof.rules.common import ThreadSpans
from gpuprof.trace.columns import named
from gpuprof.trace.metrics import TraceMetrics
from gpuprof.trace.model import Event

__all__ = ["caller_location", "in_module_ranges", "is_module_range", "model_call_location"]


def caller_location(m: TraceMetrics, calls: list[Event]) -> SourceLocation | None:
    """The user function that made most of the calls (innermost user frame around each call), at the line
    of its first such call when the source tells it (:meth:`~gpuprof.trace.stacks.StackIndex.call_location`)."""
    where: Counter[SourceLocation] = Counter()
    first: dict[SourceLocation, Event] = {}
    for c in calls[:200]:
        loc = m.stacks.location(c.pid, c.tid, c.ts)
        if loc is not None:
            where[loc] += 1
            first.setdefault(loc, c)
    if not where:
        return None
    loc = where.most_common(1)[0][0]
    c = first[loc]
    return m.stacks.call_location(c.pid, c.tid, c.ts) or loc


_MODULE = "nn.Module: "


def is_module_range(name: str) -> bool:
    return name.startswith(_MODULE)


def in_module_ranges(m: TraceMetrics) -> Callable[[Event], bool] | None:
    """A test "is this event inside an ``nn.Module`` range on its thread", or None when the trace has none."""
    modules = ThreadSpans(named(m.trace.python, is_module_range, m.trace))
    if not modules:
        return None
    return lambda e: modules.covering(e) is not None


def model_call_location(m: TraceMetrics, op: Event) -> SourceLocation | None:
    """Where the user calls the model that ran ``op``: the innermost user frame at the start of the
    outermost ``nn.Module`` range around it (torch's Python tracer writes them with with_stack=True),
    else the op's own innermost user frame (its ``Call stack`` in 2021 traces); None without stacks."""
    outer = None
    for p in named(m.trace.python, is_module_range, m.trace):  # the loop below skips every other frame
        if p.ts > op.ts:
            break  # sorted by start: nothing later encloses the op
        if p.name.startswith(_MODULE) and p.pid == op.pid and p.tid == op.tid and p.end >= op.ts:
            outer = p  # the earliest-starting enclosing module range is the outermost
            break
    if outer is not None:
        loc = m.stacks.call_location(outer.pid, outer.tid, outer.ts)  # the model's call, when the source says
        if loc is not None:
            return loc
    return m.stacks.location(op.pid, op.tid, op.ts, op=op)

"""The statement that allocates what stays (GP640's line), read from the live profiler at a window's end.

A trace file's Python frames name functions only: ``train.py(40): step`` is
where ``step`` *starts*, so a leak site found in the file points at a
``def`` line. The profiler's in-memory results know more: each Python call it
recorded carries its **caller**'s frame with the line being executed (the
statement that made the call). At the end of each recorded window, on the
driving thread, :func:`statement_sites` walks those results once
(``kineto_results.experimental_event_tree()``: about as long as the trace's
export) and, for every allocation made inside a ``ProfilerStep#N`` and not
freed before the window ended, notes the innermost statement of the user's
code that led to it: the line of the last Python call made from a user frame
on the way down (``losses.append(model(x))`` -> the model call's line;
``kept = torch.randn(...)`` -> that line). An allocation made by an operator
the user's function runs directly (``a + b``: no Python call in between) has
no such line; it counts for the function (``line`` None).

:func:`gpuprof.capture.memory.leak_site` finds the leaking function in the
trace file as before; :func:`refine` then picks, among this window's
statements of that function, the one kept from the most steps (then bytes),
and the finding names that line. When none is known the finding keeps the
function's first line and says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuprof.frames import is_user_file

__all__ = ["StatementSite", "statement_sites", "MAX_SITES"]

MAX_SITES = 32  # statements kept per window (the leak is among the first: most steps, then most bytes)


@dataclass(frozen=True)
class StatementSite:
    """Memory kept from a window's steps, by the user statement that allocated it."""

    device: str  # "cpu" or "cuda"
    file: str
    function: str
    def_line: int  # the function's first line, as the trace names it
    line: int | None  # the statement; None when the allocation came from an operator the function ran directly
    kept_bytes: int
    steps: int  # recorded steps with such an allocation still alive at the window's end


def statement_sites(results: Any) -> tuple[StatementSite, ...]:
    """The user statements whose allocations outlive the window, from a profiler's ``kineto_results``."""
    from torch._C._profiler import _EventType

    kinds = {_EventType.PyCall: 1, _EventType.PyCCall: 2, _EventType.Allocation: 3, _EventType.TorchOp: 4}
    steps: list[tuple[int, int]] = []
    allocs: list[tuple[int, int, int, str, Any]] = []  # (time, ptr, bytes, device, context); frees: bytes < 0
    # context: (file, function, def_line, statement line or None) of the innermost user code, or None
    user = is_user_file
    stack: list[tuple[Any, Any]] = [(e, None) for e in results.experimental_event_tree()]
    pop, push = stack.pop, stack.extend
    while stack:
        e, ctx = pop()
        kind = kinds.get(e.tag)
        if kind == 1 or kind == 2:
            ef = e.extra_fields
            caller = ef.caller
            if ctx is not None and ctx[1] == caller.function_name and ctx[0] == caller.file_name:
                ctx = (ctx[0], ctx[1], ctx[2], caller.line_number)  # the statement of the user frame that called
            if kind == 1:
                site = ef.callsite
                name = site.file_name
                if user(name):  # a user function entered: its statements are not known yet
                    ctx = (name, site.function_name, site.line_number, None)
        elif kind == 3:
            ef = e.extra_fields
            allocs.append((e.start_time_ns, ef.ptr, ef.alloc_size, str(ef.device).split(":")[0], ctx))
            continue
        elif kind == 4 and e.name.startswith("ProfilerStep#"):
            steps.append((e.start_time_ns, e.end_time_ns))
        children = e.children
        if children:
            push([(c, ctx) for c in children])
    return _kept(steps, allocs)


def _kept(steps: list[tuple[int, int]], allocs: list[tuple[int, int, int, str, Any]]) -> tuple[StatementSite, ...]:
    from bisect import bisect_right

    steps.sort()
    starts = [s for s, _ in steps]
    allocs.sort(key=lambda a: a[0])
    live: dict[tuple[str, int], tuple[int, int, Any]] = {}  # (device, ptr) -> (bytes, step index, context)
    for t, ptr, size, dev, ctx in allocs:
        key = (dev, ptr)
        if size < 0:
            live.pop(key, None)
            continue
        i = bisect_right(starts, t) - 1
        if i >= 0 and t <= steps[i][1] and ctx is not None:
            live[key] = (size, i, ctx)
        else:
            live.pop(key, None)  # outside the steps, or no user code: a reused address is no longer ours
    per: dict[tuple[str, Any], tuple[int, set[int]]] = {}
    for (dev, _), (size, i, ctx) in live.items():
        kept, seen = per.setdefault((dev, ctx), (0, set()))
        seen.add(i)
        per[(dev, ctx)] = (kept + size, seen)
    sites = [StatementSite(dev, ctx[0], ctx[1], ctx[2], ctx[3], kept, len(seen))
             for (dev, ctx), (kept, seen) in per.items()]
    sites.sort(key=lambda s: (-s.steps, -s.kept_bytes))
    return tuple(sites[:MAX_SITES])


def refine(sites: tuple[StatementSite, ...], device: str, file: str, function: str,
           def_line: int | None) -> StatementSite | None:
    """The statement of function ``file``/``function`` (starting at ``def_line``) that kept memory from the
    most steps (then bytes), with its line known; None when no statement of it is known."""
    best = None
    for s in sites:
        if s.device != device or s.line is None or s.file != file or s.function != function:
            continue
        if def_line is not None and s.def_line != def_line:
            continue
        if best is None or (s.steps, s.kept_bytes) > (best.steps, best.kept_bytes):
            best = s
    return best

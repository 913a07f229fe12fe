"""Memory history from a profiler trace's ``[memory]`` events (``profile_memory=True``).

Each ``[memory]`` instant event is one allocation (``Bytes`` > 0) or free
(``Bytes`` < 0) at address ``Addr`` on device (``Device Type``, ``Device Id``),
with the allocator's ``Total Allocated``/``Total Reserved`` after it (absent
in 2021 traces: the running total is then rebuilt from ``Bytes``, relative
to the first event).

Devices, operators, Python frames and the ``[memory]`` events themselves
(with their ``Addr``, which pairs a free with its allocation: what "who holds
the memory at the peak" needs) come from one streaming read by
:func:`gpuprof.trace.load.load_trace`, the same read as ``gpuprof analyze``.

The allocation *site* of a trace event is the first user frame of the
innermost Python function around it (``with_stack=True`` traces), else the
operator around it (outermost › innermost, e.g. ``aten::linear › aten::addmm``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from gpuprof.errors import InputError
from gpuprof.memory.devices import bf16_support
from gpuprof.memory.frames import DEFAULT_INTERNAL_PATTERNS, SiteTable
from gpuprof.memory.model import ALLOC, FREE_COMPLETED, FREE_REQUESTED, DeviceMemory, MemoryData
from gpuprof.trace.model import Event, Trace, memory_addr, memory_totals
from gpuprof.trace.vocab import step_number

__all__ = ["memory_from_trace"]

_PY_FRAME = re.compile(r"^(.*)\((\d+)\): (.*)$")


def _device_name(dev_type: int, dev_id: int) -> str:
    if dev_type == 0:
        return "cpu"
    if dev_type == 1:
        return f"cuda:{max(dev_id, 0)}"
    return f"device{dev_type}:{dev_id}"


class _Enclosing:
    """The events of one kind that contain a time on a thread, outermost first.

    A sweep: queries must come in non-decreasing time per thread (memory
    events are sorted), so each thread's events are pushed once and popped
    once: O(events + queries x depth).
    """

    def __init__(self, events: Sequence[Event]) -> None:
        self._events: dict[Any, list[Event]] = {}
        for e in events:
            self._events.setdefault((str(e.pid), str(e.tid)), []).append(e)  # ids are ints or strings by event kind
        for v in self._events.values():
            v.sort(key=lambda e: (e.ts, -e.dur))
        self._pos: dict[Any, int] = {}
        self._stack: dict[Any, list[Event]] = {}

    def containing(self, pid: Any, tid: Any, ts: float) -> list[Event]:
        key = (str(pid), str(tid))
        evs = self._events.get(key)
        if not evs:
            return []
        j = self._pos.get(key, 0)
        stack = self._stack.setdefault(key, [])
        n = len(evs)
        while j < n and evs[j].ts <= ts:
            e = evs[j]
            while stack and stack[-1].ts + stack[-1].dur < e.ts:
                stack.pop()
            stack.append(e)
            j += 1
        self._pos[key] = j
        while stack and stack[-1].ts + stack[-1].dur < ts:
            stack.pop()
        return [e for e in stack if e.ts + e.dur >= ts]


def memory_from_trace(trace: Trace, internal_patterns: Any = DEFAULT_INTERNAL_PATTERNS) -> MemoryData:
    """Build :class:`MemoryData` from a loaded trace (``trace.memory``) plus the events' addresses."""
    path = trace.path
    if not trace.memory:
        raise InputError(path, "the trace has no [memory] events (profile it with profile_memory=True)")
    sites = SiteTable(internal_patterns)
    notes: list[str] = []
    py = _Enclosing(trace.python) if trace.python else None
    ops = _Enclosing(trace.ops + trace.annotations)
    site_cache: dict[tuple[Any, ...], int] = {}

    devices: dict[tuple[int, int], DeviceMemory] = {}
    has_totals = all(memory_totals(e) is not None for e in trace.memory)
    for e in trace.memory:
        key = (e.stream, e.device)
        dm = devices.get(key)
        if dm is None:
            dm = DeviceMemory(device=_device_name(e.stream, e.device), index=e.device,
                              allocated=[] if has_totals else None, reserved=[] if has_totals else None,
                              has_segment_events=False)
            devices[key] = dm
        nb = e.nbytes
        addr = memory_addr(e)
        sid = _site(e, py, ops, sites, site_cache)
        if nb >= 0:
            dm.time.append(e.ts)
            dm.action.append(ALLOC)
            dm.addr.append(addr)
            dm.size.append(nb)
            dm.site.append(sid)
            dm.stream.append(0)
        else:
            # A trace records one free; it is both requested and completed.
            for act in (FREE_REQUESTED, FREE_COMPLETED):
                dm.time.append(e.ts)
                dm.action.append(act)
                dm.addr.append(addr)
                dm.size.append(-nb)
                dm.site.append(sid)
                dm.stream.append(0)
        if has_totals:
            ta, tr = memory_totals(e)  # type: ignore[misc]  # has_totals: never None here
            reps = 1 if nb >= 0 else 2
            for _ in range(reps):
                dm.allocated.append(ta)  # type: ignore[union-attr]
                dm.reserved.append(tr if tr >= 0 else ta)  # type: ignore[union-attr]
    if not has_totals:
        notes.append("the trace has no Total Allocated/Reserved (PyTorch 1.8-era): allocated memory is the running "
                      "sum of Bytes from the first event, reserved memory is unknown")
    for dm in devices.values():
        if all(a < 0 for a in dm.addr):
            dm.has_addresses = False
    if any(not dm.has_addresses for dm in devices.values()):
        notes.append("the [memory] events carry no Addr, so frees cannot be matched with allocations: "
                      "who held the memory at the peak is unknown (totals are still exact)")
    totals = {d.id: d for d in trace.devices}
    for dm in devices.values():
        info = totals.get(dm.index)
        if dm.device.startswith("cuda") and info is not None:
            dm.total_memory = info.total_memory
            dm.name = info.name
            dm.bf16 = bf16_support(info.vendor, info.compute_capability, info.name)
    data = MemoryData(path=path, source_type="trace", devices=sorted(devices.values(), key=lambda d: d.device),
                      sites=sites, notes=notes)
    data.steps = _steps(trace)
    return data


def _steps(trace: Trace) -> list[tuple[int, float, float]]:
    """The ``ProfilerStep#N`` ranges, as ``gpuprof analyze`` finds them: user annotations in
    current traces, operators in older ones; a step recorded as both counts once."""
    marks = sorted(
        (n, e.ts, e.ts + e.dur)
        for events in (trace.annotations, trace.ops)
        for e in events
        for n in (step_number(e.name),)
        if n is not None
    )
    out: list[tuple[int, float, float]] = []
    for m in marks:
        if out and out[-1][0] == m[0] and abs(out[-1][1] - m[1]) < 1.0:
            continue  # the same step as an annotation and as an op
        out.append(m)
    out.sort(key=lambda s: s[1])
    return out


def _site(e: Event, py: _Enclosing | None, ops: _Enclosing, sites: SiteTable, cache: dict[tuple[Any, ...], int]) -> int:
    if py is not None:
        frames = py.containing(e.pid, e.tid, e.ts)
        if frames:
            key = ("py", id(frames[-1]))
            sid = cache.get(key)
            if sid is None:
                fr = []
                for f in reversed(frames):  # innermost first, as in snapshots
                    m = _PY_FRAME.match(f.name)
                    if m:
                        fr.append({"filename": m.group(1), "line": int(m.group(2)), "name": m.group(3)})
                sid = sites.site_of(fr) if fr else sites.UNKNOWN
                cache[key] = sid
            if sid != sites.UNKNOWN:
                return sid
    enclosing = [o for o in ops.containing(e.pid, e.tid, e.ts) if step_number(o.name) is None]
    if not enclosing:
        return sites.UNKNOWN
    outer, inner = enclosing[0].name, enclosing[-1].name
    label = outer if outer == inner else f"{outer} › {inner}"
    return sites.add_label(label, stack=[o.name for o in reversed(enclosing)])

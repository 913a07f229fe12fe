"""Memory history from a profiler trace's ``[memory]`` events (``profile_memory=True``).

Each ``[memory]`` instant event is one allocation (``Bytes`` > 0) or free
(``Bytes`` < 0) at address ``Addr`` on device (``Device Type``, ``Device Id``),
with the allocator's ``Total Allocated``/``Total Reserved`` after it (absent
in 2021 traces: the running total is then rebuilt from ``Bytes``, relative
to the first event).

Devices, operators and Python frames come from :func:`gpuprof.trace.load.load_trace`.
The trace model keeps no ``Addr`` (the analysis of traces never needed one),
so this module reads the ``[memory]`` events' addresses in a second, narrow
decode of the same file: only what frees need to be matched with their
allocations, which is what "who holds the memory at the peak" requires.

The allocation *site* of a trace event is the first user frame of the
innermost Python function around it (``with_stack=True`` traces), else the
operator around it (outermost › innermost, e.g. ``aten::linear › aten::addmm``).
"""

from __future__ import annotations

import gzip
import re
import zlib
from pathlib import Path
from typing import Any, Union

import msgspec

from gpuprof.errors import InputError
from gpuprof.memory.frames import DEFAULT_INTERNAL_PATTERNS, SiteTable
from gpuprof.memory.model import ALLOC, FREE_COMPLETED, FREE_REQUESTED, DeviceMemory, MemoryData
from gpuprof.trace.model import Event, Trace
from gpuprof.trace.vocab import step_number

__all__ = ["load_trace_memory", "memory_from_trace"]

_PY_FRAME = re.compile(r"^(.*)\((\d+)\): (.*)$")


class _Args(msgspec.Struct):
    addr: Union[int, str, None] = msgspec.field(name="Addr", default=None)
    nbytes: Union[int, float, None] = msgspec.field(name="Bytes", default=None)
    dev_id: Union[int, str, None] = msgspec.field(name="Device Id", default=None)
    dev_type: Union[int, str, None] = msgspec.field(name="Device Type", default=None)


class _Ev(msgspec.Struct):
    name: Union[str, int, None] = None
    ph: Union[str, None] = None
    ts: Union[float, int, str, None] = None
    args: Union[_Args, None] = None


class _Top(msgspec.Struct):
    traceEvents: list[_Ev] = []


_DECODER = msgspec.json.Decoder(Union[_Top, list[_Ev]], strict=False)


def _as_int(v: Any) -> int:
    if isinstance(v, int):
        return v
    try:
        return int(v, 0) if isinstance(v, str) else int(v)
    except (TypeError, ValueError):
        return -1


def _memory_addresses(path: str) -> list[tuple[float, int, int, int, int]]:
    """(ts, device type, device id, bytes, addr) of every ``[memory]`` event, sorted by ts (stable)."""
    try:
        raw = Path(path).read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        top = _DECODER.decode(raw)
    except (OSError, EOFError, zlib.error, gzip.BadGzipFile) as err:
        raise InputError(path, f"cannot read the trace: {err}") from None
    except (msgspec.DecodeError, msgspec.ValidationError) as err:
        raise InputError(path, f"malformed trace JSON ({err})") from None
    events = top if isinstance(top, list) else top.traceEvents
    out = []
    for ev in events:
        if ev.name != "[memory]" or ev.ph not in ("i", "I") or ev.args is None:
            continue
        ts = ev.ts
        if isinstance(ts, str):
            try:
                ts = float(ts)
            except ValueError:
                continue
        if ts is None or ts != ts:
            continue
        a = ev.args
        nb = a.nbytes
        out.append((float(ts), _as_int(a.dev_type), _as_int(a.dev_id), int(nb) if nb == nb and nb is not None else 0,
                    _as_int(a.addr)))
    out.sort(key=lambda r: r[0])
    return out


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

    def __init__(self, events: list[Event]) -> None:
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
    addrs = _memory_addresses(path)
    sites = SiteTable(internal_patterns)
    notes: list[str] = []
    if len(addrs) != len(trace.memory) or any(a[3] != e.nbytes for a, e in zip(addrs, trace.memory)):
        notes.append("could not read the [memory] events' addresses; frees are not matched to allocations")
        addrs = []
    py = _Enclosing(trace.python) if trace.python else None
    ops = _Enclosing(trace.ops + trace.annotations)
    site_cache: dict[tuple[Any, ...], int] = {}

    devices: dict[tuple[int, int], DeviceMemory] = {}
    has_totals = all(e.extra is not None for e in trace.memory)
    for i, e in enumerate(trace.memory):
        key = (e.stream, e.device)
        dm = devices.get(key)
        if dm is None:
            dm = DeviceMemory(device=_device_name(e.stream, e.device), index=e.device,
                              allocated=[] if has_totals else None, reserved=[] if has_totals else None,
                              has_segment_events=False)
            devices[key] = dm
        nb = e.nbytes
        addr = addrs[i][4] if addrs else -1
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
            ta, tr = e.extra
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
    totals = {d.id: d.total_memory for d in trace.devices}
    for dm in devices.values():
        if dm.device.startswith("cuda"):
            dm.total_memory = totals.get(dm.index)
    data = MemoryData(path=path, source_type="trace", devices=sorted(devices.values(), key=lambda d: d.device),
                      sites=sites, notes=notes)
    # ProfilerStep#N is a cpu_op in older traces and a user_annotation in current ones (torch 2.x)
    for op in (*trace.ops, *trace.annotations):
        n = step_number(op.name)
        if n is not None:
            data.steps.append((n, op.ts, op.ts + op.dur))
    data.steps.sort(key=lambda s: s[1])
    return data


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


def load_trace_memory(path: str, internal_patterns: Any = DEFAULT_INTERNAL_PATTERNS) -> MemoryData:
    """Load a trace file and build its :class:`MemoryData`."""
    from gpuprof.trace.load import load_trace

    return memory_from_trace(load_trace(path), internal_patterns)

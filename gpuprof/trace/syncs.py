"""Host↔device copies and the moments the host waited for the GPU.

Definitions (all times in µs, as in the trace):

**Blocking copy**: a host↔device copy whose host call returned only after
the GPU copy ended, or that is followed on the same thread by a stream/device
synchronisation before any other GPU work is launched.

**Synchronous copy**: a call of a copy API that returns only when its copy is
done (``cudaMemcpy``, ``hipMemcpy``, ``hipMemcpyWithStream``; not ``*Async``):
always blocking. The copy runs in stream order, so the host first waits for
the work queued before it (its GPU copy starts late: *queued behind kernels*).

**Sync point**: a synchronising runtime call (``*Synchronize``), a
blocking device→host copy, or a synchronous copy of another direction on the main thread, with the operator chain that
issued it and the user's source line when Python stacks were recorded.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from typing import Any, Callable

from gpuprof.findings import SourceLocation
from gpuprof.trace.intervals import Intervals
from gpuprof.trace.model import Event, Trace, copy_kind, name_of
from gpuprof.trace.stacks import StackIndex
from gpuprof.trace.threads import ThreadIndex
from gpuprof.trace.vocab import (
    SYNC_OPS,
    CopyKind,
    RuntimeClass,
    classify_runtime,
    copy_direction_of,
    is_synchronous_copy,
    parse_copy_name,
    step_number,
)

__all__ = ["CopyEvent", "SyncPoint", "find_copies", "next_sync_call", "sync_points", "queued_us", "QUEUED_US"]

# a synchronous copy whose GPU copy starts this long after its call (and after half of it) waited behind queued work
QUEUED_US = 50.0


def queued_us(c: "CopyEvent", kernel_busy: Intervals) -> float:
    """How long copy ``c``'s host call waited, before its GPU copy began, while kernels ran (``kernel_busy``):
    the time it was queued behind GPU work launched before it."""
    if c.launch is None:
        return 0.0
    end = min(c.gpu.ts, c.launch.end)
    return kernel_busy.per_window([(c.launch.ts, end)])[0] if end > c.launch.ts else 0.0


@dataclass
class SyncPoint:
    """A moment the main thread waited for the GPU."""

    runtime: Event  # the blocking runtime call
    ops: list[Event]  # enclosing operators, outermost first
    cause: str  # what the user wrote, e.g. ".item()"; else the outermost op or the runtime name
    location: SourceLocation | None
    step: int | None  # step index


@dataclass
class CopyEvent:
    """One GPU copy with the host call that issued it."""

    gpu: Event
    launch: Event | None
    kind: CopyKind
    blocking: bool
    step: int | None


def find_copies(trace: Trace, launch_by_corr: dict[int, Event], threads: ThreadIndex) -> list[CopyEvent]:
    """Pair GPU copies with their host calls and decide which ones blocked the host (``step`` left None)."""
    out = []
    for g in trace.memcpys:
        launch = launch_by_corr.get(g.corr)
        blocking = False
        if launch is not None:
            if is_synchronous_copy(launch.name):
                blocking = True  # a synchronous copy API (hipMemcpyWithStream): the host waits in it by definition
            elif launch.end >= g.end - 1.0:
                blocking = True  # host call returned only after the copy ended
            else:
                sync = next_sync_call(threads, launch)
                blocking = sync is not None and sync.end >= g.end - 1.0
        # a memcpy written without args carries no parsed kind: its name says it (it used to crash the copy rules)
        kind = copy_kind(g) or parse_copy_name(g.name)
        if kind.direction == "other" and launch is not None and copy_direction_of(launch.name) != "other":
            kind = CopyKind(copy_direction_of(launch.name), kind.src, kind.dst)  # the API's name says it
        out.append(CopyEvent(gpu=g, launch=launch, kind=kind, blocking=blocking, step=None))
    return out


def next_sync_call(threads: ThreadIndex, call: Event) -> Event | None:
    """The stream/device synchronisation that follows runtime ``call`` on its thread
    before any other GPU work is queued there (looking at most 8 calls ahead)."""
    key = (call.pid, call.tid)
    seq = threads.runtime.get(key)
    if not seq:
        return None
    i = bisect_right(threads.runtime_starts[key], call.ts)
    for r in seq[i : i + 8]:
        rc = classify_runtime(r.name)
        if rc is RuntimeClass.SYNC:
            return r
        if rc is RuntimeClass.LAUNCH or rc is RuntimeClass.MEMCPY or rc is RuntimeClass.MEMSET:
            return None
    return None


def _enclosing_ops(threads: ThreadIndex, ev: Event, direct: Event | None) -> list[Event]:
    """The operators on ``ev``'s thread whose range contains ``ev``, outermost first (step markers excluded)."""
    key = (ev.pid, ev.tid)
    ops = threads.ops.get(key)
    if not ops:
        return [direct] if direct is not None else []
    parent = threads.parents(key)
    i = bisect_right(threads.op_starts[key], ev.ts) - 1
    ts, end = ev.ts, ev.end
    chain = []
    # Operators nest on a thread, so those open at ev.ts are the last one started
    # before it and that one's ancestors: walk up the parent links.
    while i >= 0:
        o = ops[i]
        if o.ts <= ts and o.end >= end and step_number(o.name) is None:
            chain.append(o)
        i = int(parent[i])
    chain.reverse()  # outermost first
    return chain


def sync_points(main_runtime: list[Event], blocking_copy_calls: set[int], copies: list[CopyEvent], threads: ThreadIndex,
                op_by_ext: dict[int, Event], stacks: StackIndex, step_of: Callable[[float], int | None],
                kernel_busy: Intervals | None = None) -> list[SyncPoint]:
    """The sync points among the main thread's runtime calls (``main_runtime``, in time order).

    ``blocking_copy_calls`` holds the ``id()`` of the host calls of blocking
    copies; ``step_of`` maps a time to its step index; ``kernel_busy``: the main device's kernel time (to tell
    a synchronous copy queued behind kernels).
    """
    busy = kernel_busy if kernel_busy is not None else Intervals.empty()
    copy_by_launch = {id(c.launch): c for c in copies if c.launch is not None}
    dtoh_starts: list[float] | None = None  # launches of device-to-host copies, sorted (built on first use)
    launches: dict[tuple[Any, Any], tuple[list[float], list[str]]] | None = None  # per thread (first use)
    out = []
    # classified once per distinct name; most calls are neither syncs nor blocking copies
    sync_names = {n for n in set(map(name_of, main_runtime)) if classify_runtime(n) is RuntimeClass.SYNC}
    for r in main_runtime:
        if r.name in sync_names:
            pass
        elif id(r) not in blocking_copy_calls:
            continue
        elif copy_by_launch[id(r)].kind.direction == "DtoH":
            pass
        elif is_synchronous_copy(r.name):
            # hipMemcpyWithStream / cudaMemcpy host→device: the host waits behind the queued kernels too
            ops = _enclosing_ops(threads, r, op_by_ext.get(r.ext))
            loc = stacks.location(r.pid, r.tid, r.ts, op=ops[0] if ops else None)
            out.append(SyncPoint(runtime=r, ops=ops, cause=_sync_copy_cause(r, copy_by_launch[id(r)], busy),
                                 location=loc, step=step_of(r.ts)))
            continue
        else:
            continue
        chain = _enclosing_ops(threads, r, op_by_ext.get(r.ext))
        cause = None
        for o in reversed(chain):  # innermost known sync op names the cause
            cause = SYNC_OPS.get(o.name)
            if cause:
                break
        if cause is None:
            names = [o.name for o in chain]
            if any(n in ("aten::to", "aten::_to_copy", "aten::copy_", "aten::cpu") for n in names):
                # the direction of the copy this operator made, when one is recorded inside it; else a
                # device-to-host copy launched near the sync
                if launches is None:
                    launches = _launches_by_thread(copies)
                direction = _copy_direction(r, chain, copy_by_launch, launches)
                if direction is None:
                    if dtoh_starts is None:
                        dtoh_starts = sorted(c.launch.ts for c in copies
                                             if c.launch is not None and c.kind.direction == "DtoH")
                    direction = "DtoH" if _dtoh_near(r, dtoh_starts) else "HtoD"
                cause = ".cpu() / .to('cpu')" if direction == "DtoH" else "a blocking copy (.to(device))"
            elif chain:
                cause = chain[0].name
            elif "Device" in r.name:
                cause = "torch.cuda.synchronize()"
            else:
                cause = r.name
        loc = stacks.location(r.pid, r.tid, r.ts, op=chain[0] if chain else None)
        out.append(SyncPoint(runtime=r, ops=chain, cause=cause, location=loc, step=step_of(r.ts)))
    return out


_DIRECTION_WORDS = {"HtoD": "host→device", "DtoD": "device→device", "PtoP": "peer-to-peer"}


def _sync_copy_cause(r: Event, c: CopyEvent, busy: Intervals) -> str:
    """``a synchronous host→device copy (hipMemcpyWithStream) queued behind kernels``."""
    what = _DIRECTION_WORDS.get(c.kind.direction, c.kind.direction)
    queued = queued_us(c, busy) > max(QUEUED_US, 0.5 * r.dur)
    return f"a synchronous {what} copy ({r.name}){' queued behind kernels' if queued else ''}"


def _copy_direction(r: Event, chain: list[Event], copy_by_launch: dict[int, CopyEvent],
                    by_thread: dict[tuple[Any, Any], tuple[list[float], list[str]]]) -> str | None:
    """``HtoD``/``DtoH``: the direction of the copy made by the copy operator around sync ``r`` (None: none seen).

    The sync is the copy's own call, or a stream sync inside the same
    ``aten::to``/``aten::copy_`` (``x.to("cuda")`` with ``non_blocking=False``
    copies, then waits): the copies launched inside the outermost copy
    operator on the sync's thread say which way the data went.
    """
    own = copy_by_launch.get(id(r))
    if own is not None:
        return own.kind.direction
    op = next((o for o in chain if o.name in ("aten::to", "aten::_to_copy", "aten::copy_", "aten::cpu")), None)
    if op is None:
        return None
    launches = by_thread.get((r.pid, r.tid), ([], []))
    lo, hi = bisect_left(launches[0], op.ts), bisect_right(launches[0], op.end)
    dirs = set(launches[1][lo:hi])
    return dirs.pop() if len(dirs) == 1 else None


def _launches_by_thread(copies: list[CopyEvent]) -> dict[tuple[Any, Any], tuple[list[float], list[str]]]:
    """Per host thread: the launch times (sorted) and directions of its host↔device copies."""
    pairs: dict[tuple[Any, Any], list[tuple[float, str]]] = {}
    for c in copies:
        if c.launch is not None and c.kind.direction in ("HtoD", "DtoH"):
            pairs.setdefault((c.launch.pid, c.launch.tid), []).append((c.launch.ts, c.kind.direction))
    out = {}
    for k, v in pairs.items():
        v.sort()
        out[k] = ([t for t, _ in v], [d for _, d in v])
    return out


def _dtoh_near(r: Event, starts: list[float]) -> bool:
    """A device-to-host copy was launched (``starts``, sorted) within 5 ms of ``r``."""
    i = bisect_left(starts, r.ts - 5000)
    return i < len(starts) and starts[i] < r.ts + 5000

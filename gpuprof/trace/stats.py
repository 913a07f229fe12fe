"""Per-name tables: kernels, operators, copies and sync points.

The stat types are plain frozen records, defined here with the code that
fills them; :mod:`gpuprof.report` re-exports them as part of the report.

Definitions (all times in µs, as in the trace):

**Kernel table**: per kernel name, the number of launches, their total and
mean duration, and the share of all kernel time in the trace.

**Operator host time**: per operator name, the number of calls, their total
duration and their *self* time: each call's duration minus that of the
operators nested directly in it on its thread. ``ProfilerStep#N`` ranges are
not operators.

**GPU time of an operator** (top-operators table): each kernel, copy and
memset is charged to the operator that launched it: the innermost operator
open on the host thread of its runtime call (the ``cudaLaunchKernel``/
``hipMemcpyAsync``... with the same correlation id) when that call starts.
*GPU self* time (``gpu_us``) is the time of the work an operator launched
itself, torch's ``self_device_time_total``; *GPU total* (``gpu_total_us``)
adds the GPU self time of every operator nested in it, torch's
``device_time_total``. Both are summed over the calls of one operator name.
An operator that launches nothing directly (``aten::view``, ``aten::conv2d``)
has no GPU self time. A kernel's ``External id`` is not trusted to name its
operator (in many traces it equals the correlation id); see
:mod:`gpuprof.trace.attribution`.

**Copy table**: per direction and host-memory kind, the number of copies,
their bytes, their GPU time and the bandwidth bytes / GPU time (GB/s; None
without bytes or time).

**Sync table**: sync points (:mod:`gpuprof.trace.syncs`) grouped by cause,
runtime call and source line, with their count and total host time.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuprof.trace.attribution import OpAttribution, attribute
from gpuprof.trace.model import Trace, name_of
from gpuprof.trace.syncs import CopyEvent, SyncPoint
from gpuprof.trace.threads import ThreadIndex

__all__ = ["KernelStat", "OpStat", "CopyStat", "SyncStat", "kernel_stats", "op_stats", "copy_stats", "sync_stats"]


@dataclass(frozen=True)
class KernelStat:
    """Total GPU time of one kernel name over the whole trace."""

    name: str
    count: int
    total_us: float
    mean_us: float
    share_of_gpu: float  # fraction of all kernel time


@dataclass(frozen=True)
class OpStat:
    """Host-side time of one operator name (self time excludes child operators)."""

    name: str
    count: int
    total_us: float
    self_us: float
    gpu_us: float  # GPU self time: the work this op launched itself (torch's self_device_time_total)
    gpu_total_us: float = 0.0  # gpu_us plus that of the ops nested in it (torch's device_time_total)


@dataclass(frozen=True)
class CopyStat:
    """Host/device copies of one direction and host-memory kind."""

    direction: str  # "HtoD", "DtoH", "DtoD", "PtoP", "other"
    memory: str  # "pageable", "pinned", "device", "unknown"
    count: int
    bytes: int
    total_us: float
    bandwidth_gbps: float | None


@dataclass(frozen=True)
class SyncStat:
    """Host synchronisation points grouped by cause (op, runtime call and source line)."""

    cause: str  # e.g. "aten::item", "cudaStreamSynchronize"
    runtime: str  # the runtime call that blocked
    count: int
    total_us: float
    location: str | None  # "file:line" when the trace has Python stacks


def kernel_stats(trace: Trace) -> list[KernelStat]:
    """The kernel table, longest total first."""
    agg: dict[str, list[float]] = {}
    total = 0.0
    for k in trace.kernels:
        a = agg.get(k.name)
        if a is None:
            agg[k.name] = [1, k.dur]
        else:
            a[0] += 1
            a[1] += k.dur
        total += k.dur
    stats = [
        KernelStat(name=n, count=int(c), total_us=t, mean_us=t / c, share_of_gpu=(t / total if total else 0.0))
        for n, (c, t) in agg.items()
    ]
    stats.sort(key=lambda s: -s.total_us)
    return stats


def op_stats(trace: Trace, threads: ThreadIndex, attribution: OpAttribution | None = None) -> list[OpStat]:
    """Per operator name: count, total and self host time, and GPU time of the work it launched
    (see the module docstring); most GPU self time first, then most host self time."""
    # name -> [count, total, self]; step markers map to None
    agg: dict[str, list[float] | None] = {n: None for n in set(map(name_of, trace.ops)) if n.startswith("ProfilerStep#")}
    for ops in threads.ops.values():
        stack: list[tuple[float, list[float] | None]] = []  # (end, stats) of the ops open at this point
        pop, push = stack.pop, stack.append
        for o in ops:
            ts = o.ts
            dur = o.dur
            while stack and stack[-1][0] <= ts:
                pop()
            name = o.name
            a = agg.get(name, _NEW)
            if a is None:  # a step marker: open, so that its children do not count as nested in anything
                push((ts + dur, None))
                continue
            if a is _NEW:
                a = agg[name] = [0, 0.0, dur]
            else:
                a[2] += dur
            a[0] += 1
            a[1] += dur
            end = ts + dur
            if stack:
                top_end, top = stack[-1]
                if end <= top_end and top is not None:
                    top[2] -= dur  # the parent's self time excludes this child
            push((end, a))
    if attribution is None:
        attribution = attribute(trace)
    per_name = attribution.per_name()
    stats = [
        OpStat(name=n, count=int(v[0]), total_us=v[1], self_us=max(v[2], 0.0), gpu_us=g[0], gpu_total_us=g[1])
        for n, v in agg.items()
        for g in (per_name.get(n, (0.0, 0.0)),)
        if v is not None
    ]
    stats.sort(key=lambda s: (-s.gpu_us, -s.self_us))
    return stats


_NEW: list[float] = []  # sentinel: a name not seen yet


def copy_stats(copies: list[CopyEvent]) -> list[CopyStat]:
    """The copy table, most GPU time first."""
    agg: dict[tuple[str, str], list[float]] = {}
    for c in copies:
        a = agg.setdefault((c.kind.direction, c.kind.host_memory), [0, 0, 0.0])
        a[0] += 1
        a[1] += c.gpu.nbytes
        a[2] += c.gpu.dur
    out = []
    for (direction, mem), (n, b, t) in sorted(agg.items(), key=lambda kv: -kv[1][2]):
        bw = (b / t / 1e3) if t > 0 and b > 0 else None  # bytes/µs -> GB/s
        out.append(CopyStat(direction=direction, memory=mem, count=int(n), bytes=int(b), total_us=t, bandwidth_gbps=bw))
    return out


def sync_stats(syncs: list[SyncPoint]) -> list[SyncStat]:
    """The sync table, most host time first."""
    agg: dict[tuple[str, str, str | None], list[float]] = {}
    for s in syncs:
        key = (s.cause, s.runtime.name, str(s.location) if s.location else None)
        a = agg.setdefault(key, [0, 0.0])
        a[0] += 1
        a[1] += s.runtime.dur
    out = [
        SyncStat(cause=c, runtime=r, count=int(n), total_us=t, location=loc)
        for (c, r, loc), (n, t) in agg.items()
    ]
    out.sort(key=lambda s: -s.total_us)
    return out

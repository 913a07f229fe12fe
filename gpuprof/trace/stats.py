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

import numpy as np

from gpuprof.trace.attribution import OpAttribution, attribute
from gpuprof.trace.columns import columns
from gpuprof.trace.model import Trace
from gpuprof.trace.statrows import CopyStat, KernelStat, OpStat, SyncStat
from gpuprof.trace.syncs import CopyEvent, SyncPoint
from gpuprof.trace.threads import ThreadIndex

__all__ = ["KernelStat", "OpStat", "CopyStat", "SyncStat", "kernel_stats", "op_stats", "copy_stats", "sync_stats"]


def kernel_stats(trace: Trace) -> list[KernelStat]:
    """The kernel table, longest total first."""
    kc = columns(trace, trace.kernels)
    if not kc.n:
        return []
    code, names = kc.name_code, kc.names
    # bincount adds in the kernels' order, as a running sum would: the same floats to the last bit
    counts = np.bincount(code, minlength=len(names)).tolist()
    totals = np.bincount(code, weights=kc.dur, minlength=len(names)).tolist()
    total = float(np.cumsum(kc.dur)[-1])  # a running sum (np.sum adds pairwise: other last digits)
    stats = [
        KernelStat(name=n, count=c, total_us=t, mean_us=t / c, share_of_gpu=(t / total if total else 0.0))
        for n, c, t in zip(names, counts, totals)
    ]
    stats.sort(key=lambda s: -s.total_us)
    return stats


def op_stats(trace: Trace, threads: ThreadIndex, attribution: OpAttribution | None = None) -> list[OpStat]:
    """Per operator name: count, total and self host time, and GPU time of the work it launched
    (see the module docstring); most GPU self time first, then most host self time.

    Threads are taken in ``threads.ops`` order (first appearance), each in time order; the sums are
    ``np.bincount`` over the operators in that order, which adds in sequence as a running sum
    does, so each figure is the same float as a loop over the operators gives. A child's duration
    is taken off its parent's self time right after the child's own duration is added to its name.
    """
    name_ids: dict[str, int] = {}  # one code per distinct name, across threads
    code_parts: list[np.ndarray] = []
    dur_parts: list[np.ndarray] = []
    end_parts: list[np.ndarray] = []
    parent_parts: list[np.ndarray] = []
    base = 0
    for key, group in threads.ops.items():
        gc = columns(trace, group)
        p = threads.parents(key, gc.ts, gc.end)
        to_id = np.fromiter(map(name_ids.setdefault, gc.names, iter(name_ids.__len__, -1)), np.int64, len(gc.names))
        code_parts.append(to_id[gc.name_code])
        dur_parts.append(gc.dur)
        end_parts.append(gc.end)
        parent_parts.append(np.where(p >= 0, p + base, -1))
        base += gc.n
    names = list(name_ids)
    nn = len(names)
    is_step = np.fromiter((n.startswith("ProfilerStep#") for n in names), bool, nn)
    if code_parts:
        code = np.concatenate(code_parts)
        dur = np.concatenate(dur_parts)
        end = np.concatenate(end_parts)
        parent = np.concatenate(parent_parts)  # positions in the concatenation
    else:
        code = parent = np.zeros(0, np.int64)
        dur = end = np.zeros(0)
    own = ~is_step[code]  # step markers are not operators (but they do hide their children from any parent)
    par_ok = np.maximum(parent, 0)
    par_code = code[par_ok]
    child = own & (parent >= 0) & (end <= end[par_ok]) & ~is_step[par_code]
    # interleaved: +dur to the op's name, then -dur to its parent's (bin nn: nothing), in op order
    m = len(code)
    bins = np.empty(2 * m, np.int64)
    weights = np.empty(2 * m, np.float64)
    bins[0::2] = np.where(own, code, nn)
    weights[0::2] = dur
    bins[1::2] = np.where(child, par_code, nn)
    weights[1::2] = -dur
    self_t = np.bincount(bins, weights=weights, minlength=nn + 1).tolist()
    count = np.bincount(code[own], minlength=nn).tolist()
    total = np.bincount(code[own], weights=dur[own], minlength=nn).tolist()
    # names in order of first appearance in ``order`` (the order a dict filled by a loop would have)
    seen_codes, first_at = np.unique(code[own], return_index=True)
    in_order = seen_codes[np.argsort(first_at, kind="stable")].tolist()
    if attribution is None:
        attribution = attribute(trace, threads.ops, threads.runtime)
    per_name = attribution.per_name()
    stats = [
        OpStat(name=n, count=count[c], total_us=total[c], self_us=max(self_t[c], 0.0), gpu_us=g[0], gpu_total_us=g[1])
        for c in in_order
        for n in (names[c],)
        for g in (per_name.get(n, (0.0, 0.0)),)
    ]
    stats.sort(key=lambda s: (-s.gpu_us, -s.self_us))
    return stats


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

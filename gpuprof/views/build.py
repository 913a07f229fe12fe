"""Computing the views of one trace from its metrics (definitions in docs/views.md).

Everything is grouped with numpy over columns read once per event
(``np.fromiter(map(...))``); the Python loops run per distinct name, per
user range or per kept row, never per kernel.

* **operators**: every host operator with a duration (step markers excluded),
  grouped by name and ``Input Dims`` text. CPU total: the calls' durations;
  CPU self: less the durations of the operators directly nested in them.
  GPU self: the kernels whose launching runtime call ran directly inside the
  operator (:mod:`gpuprof.trace.attribution`); GPU total adds the nested
  operators' GPU self.
* **kernels**: every kernel (all devices, all streams) grouped by name.
* **ranges** / **modules**: user ``record_function`` ranges (``user_annotation``
  events other than ``ProfilerStep#N``) and ``nn.Module: NAME`` frames
  (with_stack/with_modules), grouped by name (modules: by path, the names of
  the enclosing modules joined with ``/``). A kernel belongs to the innermost
  range (module) open on the thread of its launching runtime call when that
  call started.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import replace
from operator import attrgetter
from typing import NamedTuple, Sequence, TypedDict

import numpy as np

from gpuprof.rules.precision import is_eligible_kernel, uses_tensor_cores
from gpuprof.trace.arrays import sorted_unique
from gpuprof.trace.attribution import OpAttribution, _inclusive, _Nesting
from gpuprof.trace.columns import Columns, columns, named
from gpuprof.trace.flops import ESTIMATED_OPS, estimate_flops
from gpuprof.trace.metrics import TraceMetrics
from gpuprof.trace.model import (
    DTYPE_BF16,
    DTYPE_DOUBLE,
    DTYPE_FLOAT,
    DTYPE_FP16,
    DTYPE_HALF,
    Event,
    KernelConfig,
    Trace,
    dur_of,
    kernel_config,
    name_of,
    op_call_stack,
    op_concrete_inputs,
    op_dtypes,
    op_flops,
    op_shape_key,
    ts_of,
)
from gpuprof.trace.stacks import call_stack_location, user_location
from gpuprof.trace.viewrows import MAX_ROWS, KernelRow, OperatorRow, RangeRow, TraceViews
from gpuprof.trace.vocab import step_number
from gpuprof.views.peaks import device_row, peak_for
from gpuprof.views.precision import kernel_precision

__all__ = ["trace_views"]

MODULE_PREFIX = "nn.Module: "


def _is_module_range(name: str) -> bool:
    return name.startswith(MODULE_PREFIX)


def _is_user_frame_name(name: str) -> bool:
    return user_location(name) is not None
_STACK_SAMPLES = 5  # calls per operator row whose source line is looked up
_thread_of = attrgetter("pid", "tid")


def trace_views(m: TraceMetrics) -> TraceViews:
    """The four views of the trace behind ``m`` (module docstring)."""
    trace = m.trace
    att = m.attribution
    kernels = trace.kernels
    nk = len(kernels)
    k_dur = columns(trace, kernels).dur
    views = TraceViews(kernel_total_us=float(k_dur.sum()))
    if att is None:
        return views
    k_op = att.gpu_op[:nk]  # gpu_events() yields the kernels first
    views.unattributed_gpu_us = float(k_dur[k_op < 0].sum())
    views.peak_device = _peak_device(m)
    group, keys, fl = _group_ops(att.ops, _op_fields(att)[1])
    views.operators = _operators(m, k_op, k_dur, views, group, keys, fl)
    _count_zero_length_calls(trace, views)
    views.kernels = _kernels(m, k_op, k_dur, views, fl)
    launch_ts, launch_thread = _launches(m, kernels)
    views.ranges = _ranges(
        [a for a in trace.annotations if step_number(a.name) is None], launch_ts, launch_thread, k_dur, views, "ranges", False
    )
    views.modules = _ranges(
        named(trace.python, _is_module_range, trace), launch_ts, launch_thread, k_dur, views, "modules", True
    )
    return views


# --------------------------------------------------------------------------- operators
def _operators(
    m: TraceMetrics, k_op: np.ndarray, k_dur: np.ndarray, views: TraceViews,
    group: np.ndarray, keys: list[tuple[str, str | None]], fl: _OpFlops,
) -> list[OperatorRow]:
    att = m.attribution
    assert att is not None
    ops = att.ops
    n = len(ops)
    has = k_op >= 0
    k_self = np.bincount(k_op[has], weights=k_dur[has], minlength=n).astype(np.float64)
    if n == 0:
        return []
    parent = att.parent
    depth = _depth(parent)
    k_total = _inclusive(k_self, parent, depth)
    dur = _op_fields(att)[0]
    child = parent >= 0
    cpu_self = dur - np.bincount(parent[child], weights=dur[child], minlength=n)
    g = len(keys)
    calls = np.bincount(group, minlength=g)
    outer = ~_inside_same_group(parent, group)  # a call nested in a call of its own row is in that call's totals
    sums = {
        "cpu_total_us": np.bincount(group[outer], weights=dur[outer], minlength=g),
        "cpu_self_us": np.bincount(group, weights=np.maximum(cpu_self, 0.0), minlength=g),
        "gpu_self_us": np.bincount(group, weights=k_self, minlength=g),
        "gpu_total_us": np.bincount(group[outer], weights=k_total[outer], minlength=g),
    }
    flops = np.bincount(group, weights=np.nan_to_num(fl.flops), minlength=g)
    has_flops = np.bincount(group, weights=~np.isnan(fl.flops), minlength=g) > 0
    recorded = np.bincount(group, weights=fl.recorded, minlength=g) > 0
    order = np.lexsort((-sums["cpu_self_us"], -sums["gpu_self_us"]))
    keep, rest = order[:MAX_ROWS], order[MAX_ROWS:]
    if len(rest):
        views.rest["operators"] = {"rows": float(len(rest)), "calls": float(calls[rest].sum()),
                                   **{k: float(v[rest].sum()) for k, v in sums.items()}}
    samples = _samples(group, keep)
    where = _user_lines(m, [ops[i] for got in samples.values() for i in got])
    rows = []
    for j in keep.tolist():
        name, shapes = keys[j]
        seen = Counter(loc for i in samples.get(j, ()) if (loc := where.get(id(ops[i]))) is not None)
        f = float(flops[j]) if has_flops[j] else None
        gpu = float(sums["gpu_total_us"][j])
        rows.append(OperatorRow(
            name=name, input_shapes=shapes, calls=int(calls[j]),
            cpu_total_us=float(sums["cpu_total_us"][j]), cpu_self_us=float(sums["cpu_self_us"][j]),
            gpu_self_us=float(sums["gpu_self_us"][j]), gpu_total_us=float(sums["gpu_total_us"][j]),
            stacks=[loc for loc, _ in seen.most_common(3)],
            flops=f, flops_source=None if f is None else "recorded" if recorded[j] else "estimate",
            tflops=f / gpu / 1e6 if f is not None and gpu > 0 else None,  # FLOP/µs -> TFLOP/s
        ))
    return rows


def _inside_same_group(parent: np.ndarray, group: np.ndarray) -> np.ndarray:
    """Per op: whether an enclosing op belongs to the same row (same name and input shapes).

    Exporters nest an operator in one of its own name (``aten::linear`` in ``aten::linear``); adding both
    calls' inclusive times would count the inner call's kernels twice (issue 37). One numpy pass per level.
    """
    inside = np.zeros(len(parent), bool)
    anc = parent.copy()
    while True:
        up = anc >= 0
        if not up.any():
            return inside
        inside |= up & (group[np.maximum(anc, 0)] == group)
        anc = np.where(up, parent[np.maximum(anc, 0)], -1)


def _count_zero_length_calls(trace: Trace, views: TraceViews) -> None:
    """Add the calls the profiler recorded with 0 µs to the operators view's counts (issue 37).

    The attribution leaves zero-length operators out (they enclose nothing and launch nothing), but they
    are calls: 945 ``aten::item`` calls must read 945, not the 432 that took a measurable time. A call
    whose (name, input shapes) has no row of its own is added as a row with zero times while rows are
    left under the cap, else to ``views.rest``.
    """
    ops = trace.ops
    if not len(ops):
        return
    zero = np.flatnonzero(~(columns(trace, ops).dur > 0))
    if not len(zero):
        return
    counts: Counter[tuple[str, str | None]] = Counter()
    for i in zero.tolist():
        o = ops[i]
        if step_number(o.name) is None:
            counts[(o.name, op_shape_key(o))] += 1
    if not counts:
        return
    rows = views.operators
    for j, r in enumerate(rows):
        extra = counts.pop((r.name, r.input_shapes), 0)
        if extra:
            rows[j] = replace(r, calls=r.calls + extra)
    for (name, shapes), c in sorted(counts.items(), key=lambda kv: -kv[1]):
        if len(rows) < MAX_ROWS:
            rows.append(OperatorRow(name=name, input_shapes=shapes, calls=c, cpu_total_us=0.0, cpu_self_us=0.0,
                                    gpu_self_us=0.0, gpu_total_us=0.0))
        else:
            rest = views.rest.setdefault("operators", {"rows": 0.0, "calls": 0.0, "cpu_total_us": 0.0,
                                                       "cpu_self_us": 0.0, "gpu_self_us": 0.0, "gpu_total_us": 0.0})
            rest["rows"] += 1.0
            rest["calls"] += float(c)


def _depth(parent: np.ndarray) -> np.ndarray:
    """Nesting depth of each op (0 at top level), one numpy pass per level."""
    depth = np.zeros(len(parent), np.int64)
    anc = parent.copy()
    while True:
        up = anc >= 0
        if not up.any():
            return depth
        depth += up
        anc = np.where(up, parent[np.maximum(anc, 0)], -1)


class _OpFlops(NamedTuple):
    """Per operator call: its FLOPs (NaN: none) and whether the trace recorded them (else estimated)."""

    flops: np.ndarray
    recorded: np.ndarray


def _op_fields(att: OpAttribution) -> tuple[np.ndarray, np.ndarray]:
    """``dur`` and a name code of the ops of ``att``, in ``att.ops`` order (kept by :func:`attribute`)."""
    if len(att.op_dur) == len(att.ops) and len(att.op_name_code) == len(att.ops):
        return att.op_dur, att.op_name_code
    c = Columns(att.ops)  # an attribution not built by attribute()
    return c.dur, c.name_code


def _group_ops(ops: list[Event], name_code: np.ndarray) -> tuple[np.ndarray, list[tuple[str, str | None]], _OpFlops]:
    """Each op's group index, the (name, input shapes) of each group, and each op's FLOPs.

    The loader shares one string per distinct name and one payload object per
    distinct (dtype flags, stack, shapes, recorded FLOPs, Concrete Inputs), so
    object identities group the ops in numpy; the Python loop runs once per
    distinct (name, payload). An op's FLOPs: the trace's ``kernel_flop`` when
    above 0 (torch's trace augmenter writes 0 where it has no figure), else
    the estimate from its inputs (:mod:`gpuprof.trace.flops`).
    """
    n = len(ops)
    if n == 0:
        return np.zeros(0, np.int64), [], _OpFlops(np.zeros(0), np.zeros(0, bool))
    _, by_name = np.unique(name_code, return_inverse=True)  # names by value (codes of the shared columns)
    extras, by_extra = np.unique(np.fromiter(map(id, map(_extra_of, ops)), np.int64, n), return_inverse=True)
    # one exact int64 key per (name, payload) pair: name index * payloads + payload index
    uniq, first, inv = np.unique(by_name.reshape(-1) * len(extras) + by_extra.reshape(-1), return_index=True, return_inverse=True)
    index: dict[tuple[str, str | None], int] = {}
    to_group = np.empty(len(uniq), np.int64)
    u_flops = np.full(len(uniq), np.nan)
    u_recorded = np.zeros(len(uniq), bool)
    for j in np.argsort(first, kind="stable").tolist():  # groups numbered in order of first call: ties sort the same every run
        o = ops[int(first[j])]
        shapes = op_shape_key(o)
        to_group[j] = index.setdefault((o.name, shapes), len(index))
        rec = op_flops(o)
        if rec is not None and rec > 0:
            u_flops[j], u_recorded[j] = rec, True
        elif o.name in ESTIMATED_OPS:
            est = estimate_flops(o.name, shapes, op_concrete_inputs(o))
            if est is not None:
                u_flops[j] = est
    inv = inv.reshape(-1)
    return to_group[inv], list(index), _OpFlops(u_flops[inv], u_recorded[inv])


_extra_of = attrgetter("extra")


def _samples(group: np.ndarray, keep: np.ndarray) -> dict[int, list[int]]:
    """The first few op indices (in op order) of each kept group."""
    wanted = np.zeros(int(group.max()) + 1 if len(group) else 0, bool)
    wanted[keep] = True
    idx = np.flatnonzero(wanted[group])
    order = idx[np.argsort(group[idx], kind="stable")]  # by group, op order within
    g = group[order]
    starts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]]) if len(g) else np.zeros(0, np.int64)
    rank = np.arange(len(g)) - np.repeat(starts, np.diff(np.r_[starts, len(g)]))
    chosen = rank < _STACK_SAMPLES
    out: dict[int, list[int]] = {}
    for i, gr in zip(order[chosen].tolist(), g[chosen].tolist(), strict=True):
        out.setdefault(gr, []).append(i)
    return out


def _user_lines(m: TraceMetrics, ops: list[Event]) -> dict[int, str]:
    """``id(op)`` -> the innermost user source line around each op (``file:line (function)``), where recorded.

    With Python frames (with_stack): the innermost frame in the user's code
    (:func:`gpuprof.trace.stacks.user_location`) open on the op's thread when it
    started, found for all ops at once by a nesting search over the user frames
    only. Otherwise a 2021 trace's ``Call stack``.
    """
    out: dict[int, str] = {}
    python = m.trace.python
    if not python:
        seen: dict[str | None, str | None] = {}  # per distinct legacy stack (the loader shares each text)
        for o in ops:
            stack = op_call_stack(o)
            if stack not in seen:
                loc = call_stack_location(o)
                seen[stack] = None if loc is None else str(loc)
            text = seen[stack]
            if text is not None:
                out[id(o)] = text
        return out
    if not ops:
        return out
    frames = named(python, _is_user_frame_name)  # per distinct frame name, once; only these frames are made
    if not frames:
        return out
    f_thread = np.fromiter(map(hash, map(_thread_of, frames)), np.int64, len(frames))
    o_thread = np.fromiter(map(hash, map(_thread_of, ops)), np.int64, len(ops))
    o_ts = np.fromiter(map(ts_of, ops), np.float64, len(ops))
    for th in sorted_unique(o_thread).tolist():
        sel = np.flatnonzero(f_thread == th)
        if not len(sel):
            continue
        fr = [frames[i] for i in sel.tolist()]
        fr.sort(key=lambda e: (e.ts, -e.dur))
        ts = np.fromiter(map(ts_of, fr), np.float64, len(fr))
        ne = _Nesting(ts, ts + np.fromiter(map(dur_of, fr), np.float64, len(fr)))
        qi = np.flatnonzero(o_thread == th)
        found = ne.innermost_at(o_ts[qi])
        for q, k in zip(qi.tolist(), found.tolist(), strict=True):
            if k >= 0:
                loc = user_location(fr[k].name)
                if loc is not None:
                    out[id(ops[q])] = str(loc)
    return out


# --------------------------------------------------------------------------- kernels
def _peak_device(m: TraceMetrics) -> str | None:
    dev = next((d for d in m.trace.devices if d.id == m.main_device), m.trace.devices[0] if m.trace.devices else None)
    if dev is None:
        return None
    return device_row(dev.name, dev.compute_capability)


def _kernels(m: TraceMetrics, k_op: np.ndarray, k_dur: np.ndarray, views: TraceViews, fl: _OpFlops) -> list[KernelRow]:
    att = m.attribution
    assert att is not None
    kernels = m.trace.kernels
    nk = len(kernels)
    if nk == 0:
        return []
    group, names = _group_by_name(kernels)
    g = len(names)
    calls = np.bincount(group, minlength=g)
    total = np.bincount(group, weights=k_dur, minlength=g)
    longest = np.zeros(g)
    np.maximum.at(longest, group, k_dur)
    # the launching operators' dtype flags, read once per operator that launched a kernel
    launched = sorted_unique(k_op[k_op >= 0])
    n_ops = max(len(att.ops), 1)  # one spare slot: index 0 stands for "no operator" below, even with none
    flags_of = np.zeros(n_ops, np.int64)
    if len(launched):  # the flags are the payload's: read once per distinct payload object (shared by the loader)
        l_ops = list(map(att.ops.__getitem__, launched.tolist()))
        _, first, inv = np.unique(np.fromiter(map(id, map(_extra_of, l_ops)), np.int64, len(l_ops)),
                                  return_index=True, return_inverse=True)
        flags_of[launched] = np.fromiter(map(op_dtypes, map(l_ops.__getitem__, first.tolist())), np.int64,
                                         len(first))[inv.reshape(-1)]
    has = k_op >= 0
    k_flags = np.where(has, flags_of[np.maximum(k_op, 0)], 0)
    flags = np.zeros(g, np.int64)
    np.bitwise_or.at(flags, group, k_flags)
    gemm_name = np.fromiter(map(_does_matmul, names), bool, g)
    k_flops, k_recorded = _kernel_flops(att.parent, k_op, k_dur, has & gemm_name[group], fl)
    flops = np.bincount(group, weights=k_flops, minlength=g)
    recorded = np.bincount(group, weights=k_recorded, minlength=g) > 0
    # the launch configuration of each name's longest launch
    by_len = np.lexsort((k_dur, group))
    last = by_len[np.r_[np.flatnonzero(group[by_len][1:] != group[by_len][:-1]), nk - 1]] if nk else by_len
    longest_of = np.full(g, -1, np.int64)
    longest_of[group[last]] = last
    order = np.argsort(-total, kind="stable")
    keep, rest = order[:MAX_ROWS], order[MAX_ROWS:]
    if len(rest):
        views.rest["kernels"] = {"rows": float(len(rest)), "calls": float(calls[rest].sum()), "total_us": float(total[rest].sum())}
    rows = []
    for j in keep.tolist():
        name = names[j]
        tc = uses_tensor_cores(name)
        dtype = _dtype_name(int(flags[j]))
        precision = kernel_precision(name, dtype, tc)
        kf = float(flops[j]) if flops[j] > 0 else None
        t = float(total[j])
        tflops = kf / t / 1e6 if kf is not None and t > 0 else None  # FLOP/µs -> TFLOP/s
        peak = peak_for(views.peak_device, precision)
        rows.append(KernelRow(
            name=name, calls=int(calls[j]), total_us=t, mean_us=t / int(calls[j]), max_us=float(longest[j]),
            tensor_cores=tc, op_dtype=dtype, precision=precision, flops=kf,
            flops_source=None if kf is None else "recorded" if recorded[j] else "estimate", tflops=tflops,
            mfu=tflops / peak if tflops is not None and peak else None,
            **_config(kernel_config(kernels[int(longest_of[j])])),
        ))
    return rows


def _kernel_flops(
    parent: np.ndarray, k_op: np.ndarray, k_dur: np.ndarray, gemm: np.ndarray, fl: _OpFlops
) -> tuple[np.ndarray, np.ndarray]:
    """Per kernel: its share of an operator's FLOPs, and whether that figure was recorded (docs/views.md).

    A kernel's FLOPs come from the nearest operator around its launch (its
    launching operator or an enclosing one) whose FLOPs the trace records;
    failing one, from the nearest with an estimate. Only GEMM, GEMV and
    convolution kernels (``gemm``) take a share, not an operator's bias, copy
    or layout kernels; but recorded FLOPs of an operator that launched no
    such kernel (an Inductor-generated Triton kernel) go to the kernels it
    launched. An operator's FLOPs are shared among the kernels that take
    them by their time.
    """
    nk = len(k_op)
    n = len(fl.flops)
    if n == 0:  # kernels, but no operator: nothing to take FLOPs from
        return np.zeros(nk), np.zeros(nk, bool)
    rec = fl.recorded
    owner = _nearest(k_op, rec, parent)
    by_rec = owner >= 0
    owner = np.where(by_rec, owner, _nearest(np.where(by_rec, -1, k_op), ~np.isnan(fl.flops) & ~rec, parent))
    o = np.maximum(owner, 0)
    matmul = (owner >= 0) & gemm
    owner_has_matmul = np.bincount(owner[matmul], minlength=n) > 0
    takes = matmul | ((owner >= 0) & by_rec & ~owner_has_matmul[o])
    if not takes.any():
        return np.zeros(nk), np.zeros(nk, bool)
    time = np.bincount(owner[takes], weights=k_dur[takes], minlength=n)
    share = np.where(takes & (time[o] > 0), k_dur / np.where(time[o] > 0, time[o], 1.0), 0.0)
    return np.where(takes, np.nan_to_num(fl.flops[o]), 0.0) * share, takes & by_rec


def _does_matmul(name: str) -> bool:
    """A kernel that takes a share of its operator's estimated FLOPs: a GEMM, GEMV or convolution kernel by
    name, not the operator's bias, copy, layout-shuffle or elementwise kernels."""
    return is_eligible_kernel(name) or _GEMM_NAME.search(name[:300].lower()) is not None


_GEMM_NAME = re.compile(r"gemm|gemv")


def _nearest(start: np.ndarray, wanted: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """For each start op (-1: none), the nearest of itself and its ancestors with ``wanted`` set (-1: none).

    One numpy pass per nesting level, over the starts still climbing.
    """
    found = np.full(len(start), -1, np.int64)
    cur = start.astype(np.int64, copy=True)
    while True:
        live = (cur >= 0) & (found < 0)
        if not live.any():
            return found
        c = np.maximum(cur, 0)
        hit = live & wanted[c]
        found[hit] = cur[hit]
        cur = np.where(live & ~hit, parent[c], -1)


class _Config(TypedDict, total=False):
    grid: list[int] | None
    block: list[int] | None
    registers_per_thread: int | None
    occupancy: float | None


def _config(c: KernelConfig | None) -> _Config:
    """The KernelRow fields of one launch's configuration (absent where the trace has none)."""
    if c is None:
        return {}
    return {"grid": list(c.grid) if c.grid else None, "block": list(c.block) if c.block else None,
            "registers_per_thread": c.registers if c.registers >= 0 else None,
            # Kineto writes 0 where it has no estimate (a kernel that runs has some occupancy): not a measurement
            "occupancy": c.occupancy if c.occupancy > 0 else None}


def _group_by_name(events: Sequence[Event]) -> tuple[np.ndarray, list[str]]:
    """Each event's group index and the names of the groups (the loader shares one string per name: ids group)."""
    n = len(events)
    ids = np.fromiter(map(id, map(name_of, events)), np.int64, n)
    uniq, first, inv = np.unique(ids, return_index=True, return_inverse=True)
    index: dict[str, int] = {}
    to_group = np.empty(len(uniq), np.int64)
    for j in np.argsort(first, kind="stable").tolist():  # numbered in order of first event, not of memory address
        to_group[j] = index.setdefault(events[int(first[j])].name, len(index))
    return to_group[inv.reshape(-1)], list(index)


def _dtype_name(flags: int) -> str | None:
    """The input dtype of a kernel's launching operators from their DTYPE_* flags ("mixed" for several)."""
    found = []
    if flags & DTYPE_DOUBLE:
        found.append("fp64")
    if flags & DTYPE_FLOAT:
        found.append("fp32")
    if flags & DTYPE_BF16:
        found.append("bf16")
    if flags & DTYPE_FP16:
        found.append("fp16")
    if flags & DTYPE_HALF and not flags & (DTYPE_BF16 | DTYPE_FP16):
        found.append("fp8")
    if not found:
        return None
    return found[0] if len(found) == 1 else "mixed"


# --------------------------------------------------------------------------- ranges and modules
def _launches(m: TraceMetrics, kernels: Sequence[Event]) -> tuple[np.ndarray, np.ndarray]:
    """Per kernel: the start of its launching runtime call (NaN unknown) and a hash of that call's (pid, tid)."""
    nk = len(kernels)
    ts = np.full(nk, np.nan)
    thread = np.zeros(nk, np.int64)
    rt = m.trace.runtime
    if not rt or nk == 0:
        return ts, thread
    rc = columns(m.trace, rt)
    r_corr = rc.corr
    order = np.argsort(r_corr, kind="stable")
    sorted_corr = r_corr[order]
    k_corr = columns(m.trace, m.trace.kernels).corr if kernels is m.trace.kernels else Columns(kernels).corr
    pos = np.minimum(np.searchsorted(sorted_corr, k_corr), len(rt) - 1)
    found = (sorted_corr[pos] == k_corr) & (k_corr >= 0)
    r_ts = rc.ts
    # hash of each call's (pid, tid), as _thread_of gives it: one hash per distinct thread
    r_thread = np.fromiter(map(hash, rc.threads), np.int64, len(rc.threads))[rc.thread_code]
    ts[found] = r_ts[order[pos[found]]]
    thread[found] = r_thread[order[pos[found]]]
    return ts, thread


def _ranges(
    events: list[Event],
    launch_ts: np.ndarray,
    launch_thread: np.ndarray,
    k_dur: np.ndarray,
    views: TraceViews,
    view: str,
    as_paths: bool,
) -> list[RangeRow]:
    if not events:
        return []
    by_thread: dict[object, list[Event]] = {}
    for e in events:
        if e.dur > 0:
            by_thread.setdefault((e.pid, e.tid), []).append(e)
    ranges: list[Event] = []
    parent_parts, depth_parts = [], []
    k_range = np.full(len(k_dur), -1, np.int64)
    for key, evs in by_thread.items():
        evs.sort(key=lambda e: (e.ts, -e.dur))
        lo = len(ranges)
        ranges.extend(evs)
        ts = np.fromiter(map(ts_of, evs), np.float64, len(evs))
        ne = _Nesting(ts, ts + np.fromiter(map(dur_of, evs), np.float64, len(evs)))
        p = ne.parents()
        parent_parts.append(np.where(p >= 0, p + lo, -1))
        depth_parts.append(ne.depth)
        on = np.flatnonzero((launch_thread == hash(key)) & ~np.isnan(launch_ts))  # key: (pid, tid), as _thread_of
        if len(on):
            k = ne.innermost_at(launch_ts[on])
            k_range[on] = np.where(k >= 0, k + lo, -1)
    n = len(ranges)
    parent = np.concatenate(parent_parts)
    depth = _depth(parent)
    has = k_range >= 0
    g_self = np.bincount(k_range[has], weights=k_dur[has], minlength=n).astype(np.float64)
    g_total = _inclusive(g_self, parent, depth)
    names = list(map(name_of, ranges))
    if as_paths:  # a module's path: its enclosing modules' names; parents come before their children
        paths: list[str] = []
        for i, name in enumerate(names):
            short = name[len(MODULE_PREFIX):]
            pi = int(parent[i])
            paths.append(f"{paths[pi]}/{short}" if pi >= 0 else short)
        names = paths
    index: dict[str, int] = {}
    group = np.fromiter((index.setdefault(x, len(index)) for x in names), np.int64, n)
    g = len(index)
    dur = np.fromiter(map(dur_of, ranges), np.float64, n)
    calls = np.bincount(group, minlength=g)
    # a range nested in one of the same name (recursion) would count twice in the totals: only outermost ones add
    outer = np.ones(n, bool)
    nonroot = parent >= 0
    outer[nonroot] = group[parent[nonroot]] != group[nonroot]
    cpu = np.bincount(group, weights=np.where(outer, dur, 0.0), minlength=g)
    gself = np.bincount(group, weights=g_self, minlength=g)
    gtotal = np.bincount(group, weights=np.where(outer, g_total, 0.0), minlength=g)
    order = np.lexsort((-cpu, -gtotal))
    keep, rest = order[:MAX_ROWS], order[MAX_ROWS:]
    if len(rest):
        views.rest[view] = {"rows": float(len(rest)), "calls": float(calls[rest].sum()), "cpu_total_us": float(cpu[rest].sum())}
    keys = list(index)
    return [
        RangeRow(name=keys[j], calls=int(calls[j]), cpu_total_us=float(cpu[j]), gpu_self_us=float(gself[j]),
                 gpu_total_us=float(gtotal[j]))
        for j in keep.tolist()
    ]

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

from collections import Counter
from dataclasses import replace
from operator import attrgetter
from typing import Iterator, NamedTuple, Sequence, TypedDict

import numpy as np

from gpuprof.rules.flopwork import OpFlops, dtype_name, kernel_work, op_flops_of, peak_device, precision_label
from gpuprof.trace.arrays import sorted_unique
from gpuprof.trace.attribution import OpAttribution, _inclusive, _Nesting
from gpuprof.trace.columns import Columns, columns, named
from gpuprof.trace.metrics import TraceMetrics
from gpuprof.trace.model import (
    Event,
    KernelConfig,
    Trace,
    dur_of,
    kernel_config,
    name_of,
    op_call_stack,
    op_shape_key,
    ts_of,
)
from gpuprof.trace.peaks import peak_for, reference_precision
from gpuprof.trace.stacks import call_stack_location, user_location
from gpuprof.trace.viewrows import MAX_ROWS, KernelRow, OperatorRow, RangeRow, TraceViews
from gpuprof.trace.vocab import step_number

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
    views.peak_device = peak_device(m)
    views.reference_precision = reference_precision(views.peak_device)
    group, keys = _group_ops(att)
    views.operators = _operators(m, k_op, k_dur, views, group, keys, op_flops_of(m))
    _count_zero_length_calls(trace, views)
    views.kernels = _kernels(m, k_dur, views)
    launch_ts, launch_thread = _launches(m, kernels)
    w = kernel_work(m)
    priced = (w.flops > 0) & np.isfinite(w.peak_us)  # the kernels that count towards an MFU
    prec = np.array([p or "unknown" for p in w.precision] + ["unknown"], dtype=object)[w.group]
    work = _KernelWork(k_dur, np.where(priced, w.peak_us, 0.0), np.where(w.flops > 0, k_dur, 0.0),
                       np.nan_to_num(w.ref_us), {str(p): np.where(priced & (prec == p), w.flops, 0.0)
                                                 for p in set(prec[priced].tolist())})
    views.ranges = _ranges(
        [a for a in trace.annotations if step_number(a.name) is None], launch_ts, launch_thread, work, views, "ranges", False
    )
    views.modules = _ranges(
        named(trace.python, _is_module_range, trace), launch_ts, launch_thread, work, views, "modules", True
    )
    return views


class _KernelWork(NamedTuple):
    """Per kernel: its time, its time at the device's peak (0: no FLOPs or no peak), its time if its FLOPs are known."""

    dur: np.ndarray
    peak_us: np.ndarray
    known_us: np.ndarray
    ref_us: np.ndarray  # its FLOPs at the dense BF16/FP16 tensor-core peak (0: no FLOPs or no such peak)
    flops_by_precision: dict[str, np.ndarray]  # precision -> the FLOPs of the kernels with a peak at it (0 others)


# --------------------------------------------------------------------------- operators
def _operators(
    m: TraceMetrics, k_op: np.ndarray, k_dur: np.ndarray, views: TraceViews,
    group: np.ndarray, keys: list[tuple[str, str | None]], fl: OpFlops,
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
    depth, inside = _depth_and_inside(parent, group)
    k_total = _inclusive(k_self, parent, depth)
    dur = _op_fields(att)[0]
    child = parent >= 0
    cpu_self = dur - np.bincount(parent[child], weights=dur[child], minlength=n)
    g = len(keys)
    calls = np.bincount(group, minlength=g)
    outer = ~inside  # a call nested in a call of its own row is in that call's totals
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


def _depth_and_inside(parent: np.ndarray, group: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per op: its nesting depth (as :func:`_depth`), and whether an enclosing op belongs to the same row (same
    name and input shapes), in one walk up the nesting (one numpy pass per level).

    Exporters nest an operator in one of its own name (``aten::linear`` in ``aten::linear``); adding both
    calls' inclusive times would count the inner call's kernels twice (issue 37).
    """
    depth = np.zeros(len(parent), np.int64)
    inside = np.zeros(len(parent), bool)
    for up, anc in _levels(parent):
        depth += up
        inside |= up & (group[anc] == group)
    return depth, inside


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
    for up, _ in _levels(parent):
        depth += up
    return depth


def _levels(parent: np.ndarray) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Level by level up the nesting: which ops have an ancestor that many levels up, and that ancestor (0 where
    none: mask with the first)."""
    anc = parent.copy()
    while (up := anc >= 0).any():
        safe = np.maximum(anc, 0)
        yield up, safe
        anc = np.where(up, parent[safe], -1)


def _op_fields(att: OpAttribution) -> tuple[np.ndarray, np.ndarray]:
    """``dur`` and a name code of the ops of ``att``, in ``att.ops`` order (kept by :func:`attribute`)."""
    if len(att.op_dur) == len(att.ops) and len(att.op_name_code) == len(att.ops):
        return att.op_dur, att.op_name_code
    c = Columns(att.ops)  # an attribution not built by attribute()
    return c.dur, c.name_code


def _group_ops(att: OpAttribution) -> tuple[np.ndarray, list[tuple[str, str | None]]]:
    """Each op's group index and the (name, input shapes) of each group.

    The Python loop runs once per distinct (name, payload object) (:attr:`OpAttribution.name_and_payload_groups`).
    """
    ops = att.ops
    if len(ops) == 0:
        return np.zeros(0, np.int64), []
    first, inv = att.name_and_payload_groups
    index: dict[tuple[str, str | None], int] = {}
    to_group = np.empty(len(first), np.int64)
    for j in np.argsort(first, kind="stable").tolist():  # groups numbered in order of first call: ties sort the same every run
        o = ops[int(first[j])]
        to_group[j] = index.setdefault((o.name, op_shape_key(o)), len(index))
    return to_group[inv], list(index)


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
def _kernels(m: TraceMetrics, k_dur: np.ndarray, views: TraceViews) -> list[KernelRow]:
    kernels = m.trace.kernels
    nk = len(kernels)
    if nk == 0:
        return []
    w = kernel_work(m)
    group, names = w.group, w.names
    g = len(names)
    calls = np.bincount(group, minlength=g)
    total = np.bincount(group, weights=k_dur, minlength=g)
    longest = np.zeros(g)
    np.maximum.at(longest, group, k_dur)
    flops = np.bincount(group, weights=w.flops, minlength=g)
    recorded = np.bincount(group, weights=w.recorded, minlength=g) > 0
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
        precision = w.precision[j]
        kf = float(flops[j]) if flops[j] > 0 else None
        t = float(total[j])
        tflops = kf / t / 1e6 if kf is not None and t > 0 else None  # FLOP/µs -> TFLOP/s
        peak = peak_for(views.peak_device, precision)
        ref_peak = peak_for(views.peak_device, views.reference_precision)
        rows.append(KernelRow(
            name=name, calls=int(calls[j]), total_us=t, mean_us=t / int(calls[j]), max_us=float(longest[j]),
            tensor_cores=w.tensor_cores[j], op_dtype=dtype_name(int(w.flags[j])), precision=precision, flops=kf,
            flops_source=None if kf is None else "recorded" if recorded[j] else "estimate", tflops=tflops,
            mfu=tflops / peak if tflops is not None and peak else None,
            **_config(kernel_config(kernels[int(longest_of[j])])),
            reference_mfu=tflops / ref_peak if tflops is not None and ref_peak else None,
        ))
    return rows


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


def _ranges(events: list[Event], launch_ts: np.ndarray, launch_thread: np.ndarray, work: _KernelWork, views: TraceViews,
            view: str, as_paths: bool) -> list[RangeRow]:
    if not events:
        return []
    by_thread: dict[object, list[Event]] = {}
    for e in events:
        if e.dur > 0:
            by_thread.setdefault((e.pid, e.tid), []).append(e)
    ranges: list[Event] = []
    parent_parts, depth_parts = [], []
    k_range = np.full(len(work.dur), -1, np.int64)
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
    g_self, g_total = _range_sums(work.dur, k_range, has, parent, depth, n)
    _, g_peak = _range_sums(work.peak_us, k_range, has, parent, depth, n)
    _, g_known = _range_sums(work.known_us, k_range, has, parent, depth, n)
    _, g_ref = _range_sums(work.ref_us, k_range, has, parent, depth, n)
    g_prec = {p: _range_sums(f, k_range, has, parent, depth, n)[1] for p, f in work.flops_by_precision.items()}
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
    gpeak = np.bincount(group, weights=np.where(outer, g_peak, 0.0), minlength=g)
    gknown = np.bincount(group, weights=np.where(outer, g_known, 0.0), minlength=g)
    gref = np.bincount(group, weights=np.where(outer, g_ref, 0.0), minlength=g)
    gprec = {p: np.bincount(group, weights=np.where(outer, f, 0.0), minlength=g) for p, f in g_prec.items()}
    with_ref = views.reference_precision is not None
    with_peak = views.peak_device is not None
    order = np.lexsort((-cpu, -gtotal))
    keep, rest = order[:MAX_ROWS], order[MAX_ROWS:]
    if len(rest):
        views.rest[view] = {"rows": float(len(rest)), "calls": float(calls[rest].sum()), "cpu_total_us": float(cpu[rest].sum())}
    keys = list(index)
    return [
        RangeRow(name=keys[j], calls=int(calls[j]), cpu_total_us=float(cpu[j]), gpu_self_us=float(gself[j]),
                 gpu_total_us=float(gtotal[j]),
                 mfu=float(gpeak[j] / gtotal[j]) if with_peak and gpeak[j] > 0 else None,
                 known_flops_share=float(gknown[j] / gtotal[j]) if gtotal[j] > 0 else None,
                 peak_precision=(precision_label({p: float(f[j]) for p, f in gprec.items()})
                                 if with_peak and gpeak[j] > 0 else None),
                 reference_mfu=float(gref[j] / gtotal[j]) if with_ref and gref[j] > 0 else None)
        for j in keep.tolist()
    ]


def _range_sums(weight: np.ndarray, k_range: np.ndarray, has: np.ndarray, parent: np.ndarray, depth: np.ndarray,
                n: int) -> tuple[np.ndarray, np.ndarray]:
    """Per range: the kernels' ``weight`` launched directly inside it (self) and anywhere inside it (total)."""
    g_self = np.bincount(k_range[has], weights=weight[has], minlength=n).astype(np.float64)
    return g_self, _inclusive(g_self, parent, depth)

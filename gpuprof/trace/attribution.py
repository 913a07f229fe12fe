"""Which host operator launched each piece of GPU work.

A kernel, copy or memset carries the *correlation id* of the runtime call
that queued it (``cudaLaunchKernel``, ``hipMemcpyAsync``, ...). That call sits
on a host thread inside a stack of operators; the innermost operator open on
that thread when the call starts is the one that launched the work. This is
how torch's profiler itself links GPU activity to an op (the op pushes its id
as the CUPTI/roctracer external correlation on entry and pops it on exit), so
the figures match ``key_averages()``: ``self_device_time_total`` is the time
of the work an op launched itself, ``device_time_total`` adds that of the ops
nested in it.

The ``External id`` of GPU events is not used to find the op when a launch is
recorded: in many traces it equals the correlation id, not the op's id, and
names an unrelated op (``aten::view``, ``aten::empty``) or none. It is used
only for GPU work whose runtime call is missing from the trace, and only when
the trace's External ids were seen to name the launching op on every GPU
event where both could be checked.

The work is vectorised: per host thread, one sort of the operators and a few
``searchsorted`` calls, over the trace's shared columns
(:mod:`gpuprof.trace.columns`); no Python loop runs per event.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Union

import numpy as np

from gpuprof.trace.arrays import start_order
from gpuprof.trace.columns import Columns, columns, gpu_columns
from gpuprof.trace.model import Event, Trace, name_of
from gpuprof.trace.threads import group_by_thread
from gpuprof.trace.vocab import step_number

__all__ = ["OpAttribution", "attribute", "Nesting"]

HostThread = tuple[Union[int, str], Union[int, str]]

_extra_of = attrgetter("extra")


@dataclass
class OpAttribution:
    """GPU time per host operator.

    ``ops`` are the operators that can launch work (step markers and
    zero-length ops excluded), grouped by thread. Arrays index into ``ops``:
    ``parent`` is the directly enclosing op (-1 at top level), ``self_us`` the
    GPU time of the work the op launched itself, ``total_us`` that plus the
    ``self_us`` of every op nested in it. ``gpu_op`` gives, for each event of
    ``trace.gpu_events()`` in that order, the launching op (-1 unknown).
    ``ext_trusted`` says whether External ids were found to name the
    launching op (see the module docstring).
    """

    ops: list[Event]
    parent: np.ndarray
    self_us: np.ndarray
    total_us: np.ndarray
    gpu_op: np.ndarray
    ext_trusted: bool
    # per op: its duration and a code of its name (equal codes, equal names), from the shared columns
    op_dur: np.ndarray = field(default_factory=lambda: np.zeros(0))
    op_name_code: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    @functools.cached_property
    def name_and_payload_groups(self) -> tuple[np.ndarray, np.ndarray]:
        """The ops grouped by (name, payload object): per group the index of its first op, per op its group
        (groups in no particular order). Built once: the operator FLOPs and the operators view both group so.

        The loader shares one name string and one payload object per distinct value (dtype flags, stack,
        shapes, recorded FLOPs, Concrete Inputs), so object identities group the ops in numpy; a loop over the
        groups runs once per distinct (name, payload).
        """
        ops = self.ops
        n = len(ops)
        code = self.op_name_code if len(self.op_name_code) == n else Columns(ops).name_code
        _, by_name = np.unique(code, return_inverse=True)  # names by value (codes of the shared columns)
        extras, by_extra = np.unique(np.fromiter(map(id, map(_extra_of, ops)), np.int64, n), return_inverse=True)
        # one exact int64 key per (name, payload) pair: name index * payloads + payload index
        _, first, inv = np.unique(by_name.reshape(-1) * len(extras) + by_extra.reshape(-1), return_index=True,
                                  return_inverse=True)
        return first, inv.reshape(-1)

    def per_name(self) -> dict[str, tuple[float, float]]:
        """Operator name -> (self GPU µs, inclusive GPU µs), summed over its calls, for names with any."""
        out: dict[str, tuple[float, float]] = {}
        has = np.flatnonzero(self.total_us > 0)
        if len(has) == 0:
            return out
        # Names are interned by the loader, so the object id stands for the
        # name in a numpy group-by; equal names with distinct ids merge below.
        ids = np.fromiter(map(id, map(name_of, map(self.ops.__getitem__, has.tolist()))), np.int64, len(has))
        uniq, first, inv = np.unique(ids, return_index=True, return_inverse=True)
        s = np.bincount(inv, weights=self.self_us[has], minlength=len(uniq))
        t = np.bincount(inv, weights=self.total_us[has], minlength=len(uniq))
        for j, i in enumerate(first.tolist()):
            name = self.ops[int(has[i])].name
            a, b = out.get(name, (0.0, 0.0))
            out[name] = (a + float(s[j]), b + float(t[j]))
        return out


def attribute(
    trace: Trace,
    ops_by_thread: dict[HostThread, list[Event]] | None = None,
    runtime_by_thread: dict[HostThread, list[Event]] | None = None,
) -> OpAttribution:
    """Link every GPU event of ``trace`` to its launching operator (see the module docstring).

    ``*_by_thread``: ``trace.ops``/``trace.runtime`` grouped by ``(pid, tid)``, each group in time
    order (the :class:`~gpuprof.trace.threads.ThreadIndex` lists), when the caller has them. Fields
    come from the shared columns of each group (:mod:`gpuprof.trace.columns`).
    """
    if ops_by_thread is None:
        ops_by_thread = group_by_thread(trace.ops)
    if runtime_by_thread is None:
        runtime_by_thread = group_by_thread(trace.runtime)
    name_ids: dict[str, int] = {}  # one code per distinct operator name, across threads
    is_step: list[bool] = []

    ops: list[Event] = []
    nest: dict[HostThread, Nesting] = {}
    first: dict[HostThread, int] = {}
    dur_parts: list[np.ndarray] = []
    code_parts: list[np.ndarray] = []
    ext_parts: list[np.ndarray] = []
    for key, group in ops_by_thread.items():
        gc = columns(trace, group)
        ts, dur = gc.ts, gc.dur
        to_id = np.fromiter(map(name_ids.setdefault, gc.names, iter(name_ids.__len__, -1)), np.int64, len(gc.names))
        is_step.extend(step_number(n) is not None for n in list(name_ids)[len(is_step):])  # per new distinct name
        code = to_id[gc.name_code]
        keep = dur > 0  # a zero-length op encloses nothing
        step_flags = np.array(is_step, bool)
        if step_flags.any():
            keep &= ~step_flags[code]
        sel = np.flatnonzero(keep)
        if not len(sel):
            continue
        by_start = start_order(ts[sel], dur[sel])  # by start; a parent before a child that starts with it
        order = sel if by_start is None else sel[by_start]
        first[key] = len(ops)
        ops.extend(map(group.__getitem__, order.tolist()))
        nest[key] = Nesting(ts[order], ts[order] + dur[order])
        dur_parts.append(dur[order])
        code_parts.append(code[order])
        ext_parts.append(gc.ext[order])
    n = len(ops)
    op_dur = np.concatenate(dur_parts) if dur_parts else np.zeros(0)
    op_name_code = np.concatenate(code_parts) if code_parts else np.zeros(0, np.int64)
    ops_ext = np.concatenate(ext_parts) if ext_parts else np.zeros(0, np.int64)
    parent = np.full(n, -1, np.int64)
    depth = np.zeros(n, np.int64)
    for key, ne in nest.items():
        lo = first[key]
        p = ne.parents()
        parent[lo : lo + ne.n] = np.where(p >= 0, p + lo, -1)
        depth[lo : lo + ne.n] = ne.depth

    # each runtime call -> the innermost op open on its thread when it starts
    rt_corr_parts, rt_op_parts = [], []
    for key, calls in runtime_by_thread.items():
        rc = columns(trace, calls)
        corr = rc.corr
        inner = np.full(len(calls), -1, np.int64)
        tn = nest.get(key)
        if tn is not None:
            k = tn.innermost_at(rc.ts)
            inner = np.where(k >= 0, k + first[key], -1)
        rt_corr_parts.append(corr)
        rt_op_parts.append(inner)
    rt_corr = np.concatenate(rt_corr_parts) if rt_corr_parts else np.zeros(0, np.int64)
    rt_op = np.concatenate(rt_op_parts) if rt_op_parts else np.zeros(0, np.int64)
    valid = rt_corr >= 0
    rt_corr, rt_op = rt_corr[valid], rt_op[valid]

    # each GPU event -> its runtime call (same correlation id) -> that call's op
    gpu = gpu_columns(trace)
    g_corr, g_dur = gpu.corr, gpu.dur
    gpu_op = np.full(gpu.n, -1, np.int64)
    launched = np.zeros(gpu.n, bool)
    if len(rt_corr) and gpu.n:
        order = np.argsort(rt_corr, kind="stable")
        sorted_corr = rt_corr[order]
        pos = np.minimum(np.searchsorted(sorted_corr, g_corr), len(sorted_corr) - 1)
        launched = (sorted_corr[pos] == g_corr) & (g_corr >= 0)
        gpu_op = np.where(launched, rt_op[order[pos]], -1)

    g_ext = gpu.ext
    checkable = np.flatnonzero((gpu_op >= 0) & (g_ext >= 0))
    ext_trusted = bool(len(checkable)) and bool((ops_ext[gpu_op[checkable]] == g_ext[checkable]).all())
    if ext_trusted and not launched.all():
        # the first op (in ``ops`` order) with each External id
        has_ext = np.flatnonzero(ops_ext >= 0)
        uniq, at = np.unique(ops_ext[has_ext], return_index=True)
        want = np.flatnonzero(~launched & (g_ext >= 0))
        if len(uniq) and len(want):
            pos = np.minimum(np.searchsorted(uniq, g_ext[want]), len(uniq) - 1)
            gpu_op[want] = np.where(uniq[pos] == g_ext[want], has_ext[at[pos]], -1)
        else:
            gpu_op[want] = -1

    has = gpu_op >= 0
    self_us = np.bincount(gpu_op[has], weights=g_dur[has], minlength=n).astype(np.float64)
    total_us = _inclusive(self_us, parent, depth)
    return OpAttribution(ops=ops, parent=parent, self_us=self_us, total_us=total_us, gpu_op=gpu_op,
                         ext_trusted=ext_trusted, op_dur=op_dur, op_name_code=op_name_code)


class Nesting:
    """The nesting of one thread's operators, sorted by start (longest first on ties).

    Operators on one thread nest (a child runs inside its parent), so the ops
    open at a time ``t`` form one chain; the innermost is the one at depth
    ``open(t) - 1`` that started last before ``t``. Depth and that lookup are
    sorts and binary searches, so the whole thread is done in numpy.
    """

    def __init__(self, starts: np.ndarray, ends: np.ndarray) -> None:
        n = len(starts)
        self.n = n
        self.starts = starts
        self.ends = ends
        self.sorted_ends = np.sort(ends)
        idx = np.arange(n, dtype=np.int64)
        # ops open when op j starts: those started before it, less those already ended
        self.depth = idx - np.searchsorted(self.sorted_ends, starts, side="right")
        np.maximum(self.depth, 0, out=self.depth)  # guards ops that overlap without nesting
        self.keys = np.sort(self.depth * (n + 1) + idx)  # grouped by depth, in time order within
        self._parents: np.ndarray | None = None

    def _last_at_depth(self, depth: np.ndarray, before: np.ndarray) -> np.ndarray:
        """Per query, the last op with index <= ``before`` at ``depth`` (-1 if none)."""
        n1 = self.n + 1
        q = depth * n1 + before
        p = np.searchsorted(self.keys, q, side="right") - 1
        p_ok = np.maximum(p, 0)
        k = self.keys[p_ok]
        found = (p >= 0) & (depth >= 0) & (before >= 0) & (k // n1 == depth)
        return np.where(found, k % n1, -1)

    def candidate_parents(self) -> np.ndarray:
        """Per op, the last op before it one level up (-1 at top level): its parent when the ops nest,
        whether or not it encloses the op (see :meth:`parents`)."""
        idx = np.arange(self.n, dtype=np.int64)
        return self._last_at_depth(self.depth - 1, idx - 1)

    def parents(self) -> np.ndarray:
        if self._parents is None:
            par = self.candidate_parents()
            par_ok = np.maximum(par, 0)
            # keep a parent only if it really encloses the child
            ok = (par >= 0) & (self.ends[par_ok] >= self.ends)
            self._parents = np.where(ok, par, -1)
        return self._parents

    def innermost_at(self, t: np.ndarray) -> np.ndarray:
        """Per time in ``t``, the innermost op with ``start <= t < end`` (-1 if none)."""
        started = np.searchsorted(self.starts, t, side="right")
        open_now = started - np.searchsorted(self.sorted_ends, t, side="right")
        k = self._last_at_depth(open_now - 1, started - 1)
        k_ok = np.maximum(k, 0)
        ok = (k >= 0) & (self.starts[k_ok] <= t) & (self.ends[k_ok] > t)
        found: np.ndarray = np.where(ok, k, -1)
        return found


_Nesting = Nesting  # the name gpuprof.views.build imports


def _inclusive(self_us: np.ndarray, parent: np.ndarray, depth: np.ndarray) -> np.ndarray:
    """``self_us`` plus that of every descendant: children are added to parents, deepest level first."""
    total: np.ndarray = self_us.copy()
    if not len(total):
        return total
    for d in range(int(depth.max()), 0, -1):
        at = np.flatnonzero((depth == d) & (parent >= 0))
        if len(at):
            total += np.bincount(parent[at], weights=total[at], minlength=len(total))
    return total

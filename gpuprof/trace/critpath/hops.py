"""One rank's critical path cut at its collectives: the pieces a cross-rank merge joins into the job's path.

When several ranks are given, the path that sets the job's step runs on several ranks: a rank that
arrives early at a collective waits there for the last one, so the job's path goes on from the last
rank's arrival (docs/critical-path.md, *The job's critical path*; the merge is
:mod:`gpuprof.distributed.jobpath`). Each rank contributes, from its own step graph:

* per step, its **end segment**: the path walked back from the step's end (as the per-trace walk,
  :mod:`gpuprof.trace.critpath.path`) to the first collective it reaches, or to the step's start;
* per collective, its **arrival segment**: the path walked back from the collective's start (what held
  it back: the work queued before it on its stream, another stream's event it waited for, its launch)
  to the previous collective it reaches, or to its step's start.

A collective here is one of the rank summary's instances: a communication kernel of the main device
(CPU-only traces have none in their graph: their end segments run to the step's start and they have no
arrival segments). A segment is its *pieces* ``(kind, name, µs)``: the earliest :data:`EARLY` in time
order (the merge clips a path that starts before the job's step from its earliest end), then the rest
by kind and name, the :data:`NAMED` largest (an end segment, often the whole step's path: the per-trace
path's ``MAX_PARTS``), the rest of each kind as ``(other)``: bounded, so a thousand ranks stay cheap to
merge.

Cost: one walk per step and per collective, each crossing a few graph hops; the GPU events and host
pieces the walks cross are counted, and once they pass :data:`BUDGET_FACTOR` times the graph's size
(walks from collectives that share a long stretch of the step cross it again each) the collectives left
get no segment (``-2``: the merge says so) rather than slow ``analyze``. The end segments are always
walked (one walk per step, as the per-trace path); the collectives they reach are walked first, then the
others, the shortest first.
"""

from __future__ import annotations

from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from gpuprof.trace.critpath.graph import GPU_COMM, GPU_COPY, StepGraph, build_graph
from gpuprof.trace.critpath.path import MAX_PARTS, PATH_KINDS, Walk, host_split, part_label, run_spans, walk
from gpuprof.trace.intervals import Intervals
from gpuprof.trace.metrics import TraceMetrics

__all__ = ["Hops", "collective_hops", "EARLY", "NAMED", "NOT_WALKED", "BUDGET_FACTOR", "BUDGET_MIN"]

EARLY = 4  # pieces of a segment kept in time order, from its start
NAMED = 6  # pieces kept by name after those (an end segment: MAX_PARTS); the rest of each kind is one "(other)"
NOT_WALKED = -2  # a segment's end when the walk was left out (the cost budget)
BUDGET_FACTOR = 4  # GPU events and host operators the walks may cross, per event and operator of the graph
BUDGET_MIN = 10_000  # ... and at least this many


@dataclass
class Hops:
    """The segments of one rank, flat (the rank summary's ``path_*`` fields; see the module docstring).

    Segments ``0..steps-1`` are the steps' end segments, then one arrival segment per collective instance.
    ``seg_end``: the instance a segment reaches (-1: its step's start; -2: not walked); segment ``k``'s
    pieces are ``seg_off[k]:seg_off[k+1]``, the first ``seg_early[k]`` of them in time order."""

    names: list[str] = field(default_factory=list)
    inst_name: list[int] = field(default_factory=list)  # per instance, its kernel's name (-1: not in the graph)
    seg_end: list[int] = field(default_factory=list)
    seg_off: list[int] = field(default_factory=lambda: [0])
    seg_early: list[int] = field(default_factory=list)
    piece_kind: list[int] = field(default_factory=list)  # into PATH_KINDS
    piece_name: list[int] = field(default_factory=list)
    piece_us: list[float] = field(default_factory=list)
    step_start: list[float] = field(default_factory=list)  # per step, the rank's own clock
    step_end: list[float] = field(default_factory=list)


def collective_hops(m: TraceMetrics, instances: Sequence[tuple[float, float, int]]) -> Hops:
    """The segments of ``m``'s steps, cut at ``instances`` (``(start µs, duration µs, step index)`` of each
    collective)."""
    out = Hops()
    if not m.steps:
        return out
    g = m.memo(build_graph)
    out.step_start = [a for a, _b, _h in g.steps]
    out.step_end = [b for _a, b, _h in g.steps]
    node = _instance_nodes(g, [ts for ts, _d, _s in instances])
    stop = np.zeros(g.n_gpu, bool)
    stop[node[node >= 0]] = True
    owner = np.full(g.n_gpu, -1, np.int64)
    owner[node[node >= 0]] = np.flatnonzero(node >= 0)
    n_steps, n_inst = len(g.steps), len(instances)
    walks: list[Walk | None] = [None] * (n_steps + n_inst)
    ends = [NOT_WALKED] * (n_steps + n_inst)
    budget = BUDGET_FACTOR * (g.n_gpu + len(g.w_ts) + sum(len(x[0]) for x in (g.top_ops, g.other_ops))) + BUDGET_MIN
    spent = 0
    todo: deque[int] = deque(range(n_steps))
    queued = set(todo)
    # after the collectives the end segments reach, the shortest first: a rank's shortest collectives are
    # those it arrived last at, where the merge goes on along its path
    rest = iter(n_steps + i for i in sorted(range(n_inst), key=lambda i: (instances[i][1], i)))
    while todo or spent <= budget:  # (every end segment: one walk per step, as the per-trace path)
        if todo and todo[0] >= n_steps and spent > budget:
            break
        if not todo:
            nxt = next((k for k in rest if k not in queued), None)
            if nxt is None:
                break
            todo.append(nxt)
            queued.add(nxt)
        k = todo.popleft()
        w = Walk()
        if k < n_steps:
            a, b, host_end = g.steps[k]
            hit = walk(g, a, b, host_end, w, stop)
        elif node[k - n_steps] >= 0:
            step = min(max(instances[k - n_steps][2], 0), n_steps - 1)
            hit = walk(g, g.steps[step][0], g.steps[step][1], g.steps[step][2], w, stop, start=int(node[k - n_steps]))
        else:
            continue  # a collective the graph does not hold (gloo's): no arrival segment
        walks[k] = w
        ends[k] = int(owner[hit]) if hit >= 0 else -1
        spent += sum(hi - lo + 1 for lo, hi, _t, _a in w.runs) + len(w.pieces) + _host_ops(g, w)
        if ends[k] >= 0 and n_steps + ends[k] not in queued:  # the collective it reaches: walked next
            todo.append(n_steps + ends[k])
            queued.add(n_steps + ends[k])
    _fill(out, g, walks, ends, _Labels(g, walks), node)
    return out


def _host_ops(g: StepGraph, w: Walk) -> int:
    """About how many operators a walk's host time crosses (what labelling it costs)."""
    starts = g.top_ops[0]
    return sum(int(np.searchsorted(starts, b) - np.searchsorted(starts, a)) + 1 for a, b in w.host)


def _instance_nodes(g: StepGraph, starts: Sequence[float]) -> np.ndarray:
    """Per instance (by start), the graph's communication kernel that starts then (-1: none)."""
    comm = np.flatnonzero(g.g_kind == GPU_COMM)
    at: dict[float, int] = {}
    for i, ts in zip(comm.tolist(), g.g_ts[comm].tolist()):
        at.setdefault(ts, i)
    return np.array([at.get(float(ts), -1) for ts in starts], np.int64)


def _fill(out: Hops, g: StepGraph, walks: list[Walk | None], ends: list[int], labels: "_Labels",
          node: np.ndarray) -> None:
    """Each walk's pieces, labelled and bounded, into ``out``, and each instance's kernel name (``node``: its
    graph event, -1 none)."""
    code: dict[str, int] = {}

    def name_code(name: str) -> int:
        c = code.get(name)
        if c is None:
            c = code[name] = len(out.names)
            out.names.append(part_label(name))
        return c

    out.inst_name = [name_code(g.names[int(g.g_name[i])]) if i >= 0 else -1 for i in node.tolist()]
    for k, (w, end) in enumerate(zip(walks, ends)):
        out.seg_end.append(end)
        early: list[tuple[str, str, float]] = []
        named: list[tuple[str, str, float]] = []
        if w is not None:
            # an end segment is often the whole step's path (nothing reached a collective): named as the
            # per-trace path (its largest MAX_PARTS); a step has one, so that costs little
            early, named = _bounded(*labels.pieces(g, w), labels, MAX_PARTS if k < len(out.step_end) else NAMED)
        for kind, name, us in early + named:
            out.piece_kind.append(PATH_KINDS.index(kind))
            out.piece_name.append(name_code(name))
            out.piece_us.append(round(us, 3))
        out.seg_early.append(len(early))
        out.seg_off.append(len(out.piece_us))


class _Labels:
    """What each piece of a walk ran, as one label number per piece: GPU events ``2 * name + copy``, then the
    host's labels (its time split once for all walks by what ran: splitting each walk's alone would scan every
    runtime call per walk), then the named pieces of the walks (waits, launches, idle)."""

    def __init__(self, g: StepGraph, walks: list[Walk | None]) -> None:
        self.names: list[tuple[str, str]] = [(kind, n) for n in g.names for kind in ("kernel", "copy")]
        host = [iv for w in walks if w is not None for iv in w.host]
        starts, ends, lab = [np.zeros(0)], [np.zeros(0)], [np.zeros(0, np.int64)]
        for kind, name, ivs in host_split(g, Intervals.from_pairs(host)) if host else []:
            starts.append(ivs.starts)
            ends.append(ivs.ends)
            lab.append(np.full(len(ivs.starts), len(self.names), np.int64))
            self.names.append((kind, name))
        s, e, c = np.concatenate(starts), np.concatenate(ends), np.concatenate(lab)
        order = np.argsort(s, kind="stable")  # disjoint: their ends are in the same order
        self.h_start, self.h_end, self.h_lab = s[order], e[order], c[order]
        self._code = {kn: i for i, kn in enumerate(self.names)}

    def code(self, kind: str, name: str) -> int:
        c = self._code.get((kind, name))
        if c is None:
            c = self._code[(kind, name)] = len(self.names)
            self.names.append((kind, name))
        return c

    def pieces(self, g: StepGraph, w: Walk) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """A walk's pieces as arrays: start, µs, label."""
        idx, s, e = run_spans(g, w.runs)
        starts, us, lab = [s], [e - s], [g.g_name[idx] * 2 + (g.g_kind[idx] == GPU_COPY)]
        for a, b in w.host:
            i0 = int(np.searchsorted(self.h_end, a, side="right"))
            i1 = int(np.searchsorted(self.h_start, b, side="left"))
            lo, hi = np.maximum(self.h_start[i0:i1], a), np.minimum(self.h_end[i0:i1], b)
            starts.append(lo)
            us.append(hi - lo)
            lab.append(self.h_lab[i0:i1])
        if w.pieces:
            starts.append(np.array([p[1] for p in w.pieces]))
            us.append(np.array([p[2] - p[1] for p in w.pieces]))
            lab.append(np.array([self.code(p[3], p[4]) for p in w.pieces], np.int64))
        return np.concatenate(starts), np.concatenate(us), np.concatenate(lab).astype(np.int64)


def _bounded(start: np.ndarray, us: np.ndarray, lab: np.ndarray, labels: _Labels,
             top: int) -> tuple[list[tuple[str, str, float]], list[tuple[str, str, float]]]:
    """A segment's pieces: the first :data:`EARLY` runs (one kind and name) in time order, then the rest by name,
    the ``top`` largest, the rest of each kind as ``(other)``."""
    keep = us > 0
    order = np.argsort(start[keep], kind="stable")
    us, lab = us[keep][order], lab[keep][order]
    if not len(us):
        return [], []
    firsts = np.flatnonzero(np.concatenate(([True], lab[1:] != lab[:-1])))  # where each run of one label starts
    sums = np.add.reduceat(us, firsts)
    early = [(*labels.names[int(lab[i])], float(u)) for i, u in zip(firsts[:EARLY].tolist(), sums[:EARLY].tolist())]
    if len(firsts) <= EARLY:
        return early, []
    rest_lab, rest_us = lab[firsts[EARLY]:], us[firsts[EARLY]:]
    uniq, inv = np.unique(rest_lab, return_inverse=True)
    total = np.bincount(inv, weights=rest_us)
    ranked = np.argsort(-total, kind="stable")
    named = [(*labels.names[int(uniq[i])], float(total[i])) for i in ranked[:top].tolist()]
    other: dict[str, float] = defaultdict(float)
    for i in ranked[top:].tolist():
        other[labels.names[int(uniq[i])][0]] += float(total[i])
    return early, named + [(k, "(other)", u) for k, u in other.items()]

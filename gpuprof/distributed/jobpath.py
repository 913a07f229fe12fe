"""The job's critical path: the ranks' step paths joined at their collectives.

Definitions (docs/critical-path.md, *The job's critical path*; µs):

For each recorded step (the *i*-th step of every rank), the **rank that ends the step last** is the one
with the longest time from the end of the step's last matched collective to its own step's end: a
collective ends at about the same moment on all its ranks, so each rank's time is measured on its own
clock from a moment they all share, and no clock alignment between hosts is needed. The **job's step** is
that rank's step, and its length is the path's length.

The path walks back from that rank's step end along its end segment (the rank's critical path cut at
its collectives, :mod:`gpuprof.trace.critpath.hops`). At the collective it reaches, the **last arrival**
is the rank with the shortest duration of it (all end together, so the shortest started last); where the
current rank arrived earlier than it (by more than the arrival noise of :mod:`gpuprof.distributed.arrivals`)
the path jumps to that rank: it crosses its collective (its duration: the transfer) and goes on along its
arrival segment; else it stays. It ends at the step's start of the rank it is on.

Each piece is measured on its own rank's clock, so their sum is the time from that rank's step start to
the job's step end. Where it differs from the job's step: a path shorter than the step (the rank it ended
on entered the step later than the job's rank: its previous step ended later, or it was delayed before
the recording) gets a ``rank_wait`` part, *rank N entered the step late*; within the noise, an ``idle``
part; a longer one (it entered the step earlier) is clipped from its earliest pieces. A collective whose
last arrival has no segment for it (a summary of an older gpuprof, a CPU-only rank, the walk's cost
budget) counts the current rank's wait there as ``rank_wait``, *waiting for rank N*, and the path stays.
So the parts of every step add up to the job's step; the section reports their means per step.

Cost: per step, one hop per collective on the path, each a look-up in a ranks x collectives matrix built
once: linear in ranks times collectives, as the rest of the merge.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from gpuprof.distributed.arrivals import NOISE_SHARE, NOISE_US
from gpuprof.distributed.summary import RankSummary, instances_by_type
from gpuprof.trace.critpath.hops import NOT_WALKED
from gpuprof.trace.critpath.path import MAX_PARTS, PATH_KINDS, UNRESOLVED

__all__ = ["JobPart", "JobPath", "job_path", "path_problem", "JOB_KINDS"]

JOB_KINDS = (*PATH_KINDS, "rank_wait")  # the per-trace kinds, and waiting for a rank the path cannot follow
_BETWEEN = "(ranks' collective ends differ by a few µs)"
_Piece = tuple[str, str, int, float]  # kind, name, rank, µs


@dataclass
class JobPart:
    """Time of the job's path in one kind of work under one name on one rank (µs, mean per step)."""

    kind: str
    name: str
    rank: int | None  # None: a part that sums several ranks ("(other)")
    us: float

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "rank": self.rank, "us": self.us}


@dataclass
class JobPath:
    """The job's critical path, mean per step: ``parts`` add up to ``length_us`` (docs/distributed.md)."""

    length_us: float = 0.0
    steps: int = 0
    parts: list[JobPart] = field(default_factory=list)
    ranks: dict[int, float] = field(default_factory=dict)  # rank -> its time on the path, per step
    last_ranks: dict[int, int] = field(default_factory=dict)  # rank -> steps it ended last

    def to_dict(self) -> dict[str, Any]:
        return {
            "length_us": self.length_us,
            "steps": self.steps,
            "parts": [p.to_dict() for p in self.parts],
            "ranks": [{"rank": r, "us": us} for r, us in sorted(self.ranks.items(), key=lambda kv: (-kv[1], kv[0]))],
            "ended_last": [{"rank": r, "steps": n} for r, n in sorted(self.last_ranks.items())],
        }


def _has_path(s: RankSummary) -> bool:
    return s.num_steps > 0 and len(s.path_seg_end) == s.num_steps + len(s.inst_type) and len(s.path_step_end) == s.num_steps


def job_path(ranks: Sequence[int], sums: Sequence[RankSummary],
             index: list[dict[int, list[int]]] | None = None) -> JobPath | None:
    """The job's critical path of the ranks' summaries (``sums`` in the order of ``ranks``; ``index``: their
    :func:`instances_by_type`, when the caller has it); None when a summary carries no segments (an older
    gpuprof's) or a rank has no step."""
    n = len(sums)
    if n < 2 or not all(_has_path(s) for s in sums):
        return None
    steps = min(s.num_steps for s in sums)
    index = instances_by_type(sums) if index is None else index
    matched = {t: min(len(ix.get(t, ())) for ix in index) for t in {t for ix in index for t in ix}}
    # per type, ranks x matched instances: the instance index and its duration on each rank
    idx = {t: np.array([ix[t][:m] for ix in index], np.int64) for t, m in matched.items() if m}
    dur = {t: np.vstack([np.asarray(s.inst_dur, np.float64)[i] for s, i in zip(sums, idx[t])]) for t in idx}
    pos = _Positions(index, sums)
    guard = max(len(s.inst_type) for s in sums) + 2  # a hop per collective, each earlier than the last
    total: dict[tuple[str, str, int], float] = defaultdict(float)
    out = JobPath(steps=steps)
    length = 0.0
    for step in range(steps):
        last = _ends_last(step, sums, index, matched)
        out.last_ranks[ranks[last]] = out.last_ranks.get(ranks[last], 0) + 1
        span = sums[last].path_step_end[step] - sums[last].path_step_start[step]
        length += span
        for kind, name, k, us in _walk(step, last, span, ranks, sums, idx, dur, pos, guard):
            total[(kind, name, k)] += us
    out.length_us = length / steps
    for (_kind, _name, k), us in total.items():
        out.ranks[k] = out.ranks.get(k, 0.0) + us / steps
    out.parts = _top(total, steps)
    return out


class _Positions:
    """Each instance's position among its type's on its rank, made for a rank when the path first reaches it."""

    def __init__(self, index: list[dict[int, list[int]]], sums: Sequence[RankSummary]) -> None:
        self._index, self._sums = index, sums
        self._pos: dict[int, np.ndarray] = {}

    def of(self, rank: int, i: int) -> int:
        p = self._pos.get(rank)
        if p is None:
            p = self._pos[rank] = np.zeros(len(self._sums[rank].inst_type), np.int64)
            for lst in self._index[rank].values():
                p[lst] = np.arange(len(lst))
        return int(p[i])


def _ends_last(step: int, sums: Sequence[RankSummary], index: list[dict[int, list[int]]],
               matched: dict[int, int]) -> int:
    """The rank (position) that ends ``step`` last: the longest time from the step's last matched collective
    (by its end on the first rank) to its own step's end; without a matched collective in the step, the longest step."""
    s0 = sums[0]
    best: tuple[float, int, int] | None = None  # (end, type, j) on the first rank
    for t, m in matched.items():
        for j, i in enumerate(index[0].get(t, [])[:m]):  # (a type some rank lacks is matched 0 times)
            if s0.inst_step[i] == step:
                end = s0.inst_start[i] + s0.inst_dur[i]
                if best is None or end > best[0]:
                    best = (end, t, j)
    if best is None:
        spans = [s.path_step_end[step] - s.path_step_start[step] for s in sums]
    else:
        _e, t, j = best
        spans = [s.path_step_end[step] - (s.inst_start[ix[t][j]] + s.inst_dur[ix[t][j]]) for s, ix in zip(sums, index)]
    return int(np.argmax(spans))


def _segment(s: RankSummary, seg: int) -> tuple[list[tuple[str, str, float]], list[tuple[str, str, float]]]:
    """A segment's pieces: those in time order (earliest first), then the others."""
    a, b = s.path_seg_off[seg], s.path_seg_off[seg + 1]
    early = a + s.path_seg_early[seg]
    pieces = [(PATH_KINDS[s.path_piece_kind[i]], s.path_names[s.path_piece_name[i]], s.path_piece_us[i]) for i in range(a, b)]
    return pieces[:early - a], pieces[early - a:]


def _walk(step: int, last: int, span: float, ranks: Sequence[int], sums: Sequence[RankSummary],
          idx: dict[int, np.ndarray], dur: dict[int, np.ndarray], pos: "_Positions", guard: int) -> list[_Piece]:
    """The pieces of one step's job path (see the module docstring), adding up to ``span``."""
    cur, seg = last, step
    chain: list[list[_Piece]] = []  # per hop, its pieces with the earliest first; the path runs back in time
    unresolved = True  # until the walk reaches a step's start
    while guard > 0:
        guard -= 1
        s = sums[cur]
        early, named = _segment(s, seg)
        chain.append([(k, nm, ranks[cur], us) for k, nm, us in early + named])
        end = s.path_seg_end[seg]
        if end < 0:
            unresolved = end == NOT_WALKED
            break
        t, j = s.inst_type[end], pos.of(cur, end)
        d = dur.get(t)
        if d is None or j >= d.shape[1]:  # not matched on every rank: the rank's own collective, and on along it
            chain.append([("kernel", _name(s, end), ranks[cur], s.inst_dur[end])])
            seg = s.num_steps + end
            continue
        col = d[:, j]
        nxt = int(np.argmin(col))
        if col[cur] - col[nxt] <= max(NOISE_US, NOISE_SHARE * float(col[nxt])):
            nxt = cur  # it arrived last itself (within the noise)
        i = int(idx[t][nxt, j])
        hop: list[_Piece] = [("kernel", _name(sums[nxt], i), ranks[nxt], float(col[nxt]))]
        if nxt != cur and sums[nxt].path_seg_end[sums[nxt].num_steps + i] == NOT_WALKED:
            # (the wait came before the transfer: first in the hop, whose pieces run earliest first)
            hop.insert(0, ("rank_wait", f"waiting for rank {ranks[nxt]}", ranks[cur], float(col[cur] - col[nxt])))
            nxt, i = cur, end  # its arrival is not known: the path stays on this rank
        chain.append(hop)
        cur, seg = nxt, sums[nxt].num_steps + i
    pieces = [p for hop in reversed(chain) for p in hop]  # the earliest first
    gap = span - sum(p[3] for p in pieces)
    top = max(range(len(pieces)), key=lambda i: pieces[i][3], default=-1)
    if top >= 0 and abs(gap) <= 5e-4 * len(pieces) and pieces[top][3] + gap > 0:  # the pieces' rounding (to 1 ns
        kind, name, rank, us = pieces[top]  # each): on the largest
        pieces[top] = (kind, name, rank, us + gap)
        return pieces
    jumped = any(p[2] != ranks[last] for p in pieces)
    if gap > 0 and (unresolved or (cur == last and gap > NOISE_US) or not jumped):
        pieces.insert(0, ("idle", UNRESOLVED, ranks[cur], gap))  # a segment left out, the guard: said, never hidden
    elif gap > NOISE_US and cur != last:
        pieces.insert(0, ("rank_wait", f"rank {ranks[cur]} entered the step late", ranks[cur], gap))
    elif gap > 0:
        pieces.insert(0, ("idle", _BETWEEN, ranks[cur], gap))
    else:
        pieces = _clip(pieces, -gap)
    return pieces


def _name(s: RankSummary, i: int) -> str:
    code = s.inst_path_name[i] if i < len(s.inst_path_name) else -1
    return s.path_names[code] if code >= 0 else "collective"


def _clip(pieces: list[_Piece], extra: float) -> list[_Piece]:
    """``pieces`` less ``extra`` µs from the earliest (the time before the job's step started)."""
    out: list[_Piece] = []
    for kind, name, rank, us in pieces:
        cut = min(us, extra)
        extra -= cut
        if us - cut > 0:
            out.append((kind, name, rank, us - cut))
    return out


def _top(total: dict[tuple[str, str, int], float], steps: int) -> list[JobPart]:
    """The parts, largest first: the ``MAX_PARTS`` largest by kind, name and rank, the rest of each kind as
    ``(other)`` (as the per-trace path)."""
    ranked = sorted(((us / steps, kind, name, rank) for (kind, name, rank), us in total.items() if us / steps > 0),
                    key=lambda x: (-x[0], x[1], x[2], x[3]))
    parts = [JobPart(kind, name, rank, us) for us, kind, name, rank in ranked[:MAX_PARTS]]
    rest: dict[str, float] = defaultdict(float)
    for us, kind, _name, _rank in ranked[MAX_PARTS:]:
        rest[kind] += us
    parts += [JobPart(kind, "(other)", None, us) for kind, us in sorted(rest.items(), key=lambda kv: -kv[1])]
    return parts


def path_problem(s: RankSummary) -> str | None:
    """What is wrong with a summary's path fields (naming the field), or None: they are all empty (an older
    gpuprof's summary) or consistent (indices in range, offsets rising to the number of pieces)."""
    segs = len(s.path_seg_end)
    if not segs and not s.path_piece_us:
        return None
    if segs != s.num_steps + len(s.inst_type):
        return f"field 'path_seg_end' has {segs} values for {s.num_steps} steps and {len(s.inst_type)} collectives"
    if len(s.path_step_start) != s.num_steps or len(s.path_step_end) != s.num_steps:
        return f"fields 'path_step_start'/'path_step_end' do not have one value per step ({s.num_steps})"
    off = s.path_seg_off
    n = len(s.path_piece_us)
    if len(off) != segs + 1 or off[0] != 0 or off[-1] != n or any(b < a for a, b in zip(off, off[1:])):
        return "field 'path_seg_off' is not a rising list of offsets into the pieces"
    if len(s.path_piece_kind) != n or len(s.path_piece_name) != n or len(s.path_seg_early) != segs:
        return "the path piece lists differ in length"
    if any(not NOT_WALKED <= e < len(s.inst_type) for e in s.path_seg_end):
        return "field 'path_seg_end' names a collective out of range"
    if any(not 0 <= e <= b - a for e, a, b in zip(s.path_seg_early, off, off[1:])):
        return "field 'path_seg_early' is out of range"
    if any(not 0 <= k < len(PATH_KINDS) for k in s.path_piece_kind):
        return "field 'path_piece_kind' holds an unknown kind"
    names = len(s.path_names)
    if any(not 0 <= c < names for c in s.path_piece_name) or any(not -1 <= c < names for c in s.inst_path_name):
        return "a path name code is out of range of 'path_names'"
    return None

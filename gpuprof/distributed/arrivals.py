"""Who the others wait for: arrival order at every matched collective, over collectives and steps.

A collective ends at about the same moment on all its ranks (none can finish
before the last one arrives), so on each rank its duration is the wait for
the last arrival plus the transfer. For every collective matched across
ranks (the *i*-th of each type), with ``fastest`` the shortest duration any
rank had (the transfer, as close as the trace can tell):

* a rank's **wait** is its duration minus ``fastest``;
* the **last arrivals** are the ranks whose wait is under the noise floor
  (:data:`NOISE_US`, or :data:`NOISE_SHARE` of ``fastest`` when larger): the
  ones the others waited for;
* the **others' wait** is the median wait of the other ranks.

The others' wait is then split by where the last arrival's extra time lies,
from the arrival gaps of :mod:`gpuprof.distributed.summary` (the time since
the previous collective, which every rank left together):

* **before the recorded step** when the gap starts at the step's start (no
  earlier collective in the trace): the part of the wait that the last
  arrival's longer gap does not explain. The rank entered the recorded step
  late; why is not in the trace (record one more step before, or the previous
  step's end);
* **in the step** otherwise, attributed by phase: how much more time the
  last arrival spent in each phase of its gap than the median other rank
  (data loading, compute, optimizer, host work, sync, unrecorded).

The **straggler** is the rank (or ranks) the others wait for *consistently*:
last to arrive at collectives the others wait for in at least
:data:`MIN_STEP_SHARE` of the steps, making them wait a median (over steps)
above the floor (``min_wait_share`` of the step, and :data:`FLOOR_US`, or
:data:`CPU_FLOOR_US` on CPU-only jobs, whose ranks share a host's cores), and
the others wait for it at least :data:`MIN_DOMINANCE` times as long as for
any other rank (ranks that take turns being last are scheduling noise, not a
straggler). One
step's hiccup names no one, nor does a rank that was late only before the
recording began.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from gpuprof.distributed.summary import PHASE_KEYS, RankSummary, instances_by_type
from gpuprof.trace.collectives import COLLECTIVE_TYPES

__all__ = ["Arrivals", "ArrivalRow", "arrivals", "instances_by_type", "NOISE_US", "FLOOR_US", "CPU_FLOOR_US", "MIN_STEP_SHARE", "MIN_DOMINANCE"]

NOISE_US = 20.0  # arrivals this close count as together: launch jitter, clock granularity
NOISE_SHARE = 0.05  # ... or this share of the transfer, when larger
FLOOR_US = 100.0  # a straggler makes the others wait at least this long per step
# ... on CPU-only (gloo) jobs, whose ranks usually share one host's cores: there the OS scheduler alone holds a
# rank back by milliseconds per step, the same one step after step (measured: 2.5-6 ms per step on a shared
# 2-core host with nothing planted, a planted 20 ms sleep gives 25 ms)
CPU_FLOOR_US = 10_000.0
MIN_STEP_SHARE = 0.75  # ... in at least this share of the steps
MIN_DOMINANCE = 3.0  # ... and the others wait for it at least this many times as long as for any other rank
MAX_ROWS = 64  # collective positions kept in the section (those the others waited longest at)


@dataclass(frozen=True)
class ArrivalRow:
    """One collective position in the step (the *k*-th collective of a step), over the steps."""

    position: int  # index of the collective within its step, in the last arrival's start order
    type: str
    steps: int  # steps in which this position was matched on every rank
    last: list[int]  # the rank(s) most often last to arrive here
    last_share: float  # share of the steps in which they were
    others_wait_us: float  # median over steps of the others' wait here
    before_step_us: float  # median over steps of the part from before the recorded step

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class Arrivals:
    """What the arrival order says about the job (see the module docstring)."""

    stragglers: list[int] = field(default_factory=list)
    waited_us: float = 0.0  # per step (median over steps): the others' in-step wait for the stragglers
    waited_mean_us: float = 0.0  # the same, mean over steps
    steps_waited: int = 0  # steps in which the others waited for the stragglers above the floor
    steps: int = 0
    phases: dict[str, float] = field(default_factory=dict)  # straggler's excess per phase, µs per step
    before_step_us: float = 0.0  # per step (mean): waiting for ranks that entered the recorded step late
    before_step_ranks: list[int] = field(default_factory=list)
    in_step_us: dict[int, float] = field(default_factory=dict)  # rank -> others' in-step wait for it, per step
    rows: list[ArrivalRow] = field(default_factory=list)
    floor_us: float = 0.0
    collectives_per_step: float = 0.0  # matched on every rank
    last_at_per_step: float = 0.0  # of those, the ones the stragglers arrived last at while the others waited
    # the what-if: per step (mean over steps, as GP701's cost), how much sooner the job's collectives end when the stragglers
    # arrive with the latest other rank (each collective then ends when that rank arrives); None: no straggler
    what_if_us: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"stragglers": list(self.stragglers), "waited_us_per_step": self.waited_us,
                "waited_mean_us_per_step": self.waited_mean_us, "steps_waited": self.steps_waited, "steps": self.steps,
                "straggler_phases_us": dict(self.phases), "before_step_us_per_step": self.before_step_us,
                "before_step_ranks": list(self.before_step_ranks),
                "others_wait_for_rank_us": {str(k): v for k, v in sorted(self.in_step_us.items())},
                "floor_us": self.floor_us, "collectives_per_step": self.collectives_per_step,
                "stragglers_last_at_per_step": self.last_at_per_step, "what_if_us_per_step": self.what_if_us,
                "collectives": [r.to_dict() for r in self.rows]}


def arrivals(ranks: Sequence[int], sums: Sequence[RankSummary], step_us: float, min_wait_share: float,
             index: list[dict[int, list[int]]] | None = None) -> Arrivals:
    """The arrival analysis of the matched collectives of a job's ranks (``sums`` in the order of ``ranks``;
    ``index``: their :func:`instances_by_type`, when the caller has it)."""
    out = Arrivals()
    n = len(sums)
    steps = min((s.num_steps for s in sums), default=0)
    out.steps = steps
    cpu = all(s.device == "cpu" for s in sums)
    out.floor_us = max(min_wait_share * step_us, CPU_FLOOR_US if cpu else FLOOR_US)
    if n < 2 or steps == 0:
        return out
    has_gaps = all(len(s.inst_gap) == len(s.inst_type) for s in sums)
    index = instances_by_type(sums) if index is None else index
    in_step = np.zeros((n, steps))
    before = np.zeros((n, steps))
    phase = np.zeros((n, len(PHASE_KEYS)))
    # (position in step, type) -> per step: (last rank, others' wait, before-step part)
    positions: dict[tuple[int, int], list[tuple[list[int], float, float]]] = {}
    step_pos: dict[int, dict[int, int]] = {}  # per summary: the first instance of each step
    keys = [(t, j) for t in sorted({t for ix in index for t in ix}) for j in range(min(len(ix.get(t, ())) for ix in index))]
    # in start order on the first rank (each rank's order is its own; matched collectives keep it), so that a
    # rank's waits in collectives that overlap (DDP buckets on gloo's threads) are counted once
    keys.sort(key=lambda tj: sums[0].inst_start[index[0][tj[0]][tj[1]]])
    out.collectives_per_step = len(keys) / steps
    if not keys:
        return out
    # one matrix per field, ranks x matched collectives in that order: the loop below reads columns
    idx = np.array([[ix[t][j] for t, j in keys] for ix in index], dtype=np.int64)
    dur = np.vstack([np.asarray(s.inst_dur, dtype=np.float64)[i] for s, i in zip(sums, idx)])
    start = np.vstack([np.asarray(s.inst_start, dtype=np.float64)[i] for s, i in zip(sums, idx)])
    step_of = np.vstack([np.asarray(s.inst_step, dtype=np.int64)[i] for s, i in zip(sums, idx)])
    if has_gaps:
        gap = np.stack([np.asarray(s.inst_gap, dtype=np.float64).reshape(-1, len(PHASE_KEYS))[i]
                        for s, i in zip(sums, idx)])  # ranks x collectives x phases
        from_step = np.vstack([np.asarray(s.inst_from_step, dtype=bool)[i] for s, i in zip(sums, idx)])
    waited_until = np.full(n, -np.inf)
    last_at: list[list[int]] = []  # per matched collective the others waited at: its last arrivals
    # per such collective: its step, its last arrivals, the ranks' fresh waits, the part from before the step
    replay: list[tuple[int, list[int], np.ndarray, float]] = []
    for c, (t, _j) in enumerate(keys):
        waits = dur[:, c] - dur[:, c].min()
        noise = max(NOISE_US, NOISE_SHARE * float(dur[:, c].min()))
        late = waits <= noise
        last = np.flatnonzero(late).tolist()
        others = np.flatnonzero(~late)
        # the part of each wait not already counted in an overlapping collective's wait
        end = start[:, c] + waits
        fresh = np.maximum(0.0, end - np.maximum(start[:, c], waited_until))
        np.maximum(waited_until, end, out=waited_until)
        s0 = int(np.argmin(waits))
        step = min(int(step_of[s0, c]), steps - 1)
        if not len(others) or len(last) > n / 2:
            continue  # everyone together, or a minority early: no one to name as waited for
        wait = float(np.median(fresh[others]))
        pre = 0.0
        if has_gaps:
            excess = gap[s0, c] - np.median(gap[others, c], axis=0)
            if from_step[s0, c]:
                explained = min(max(float(excess.sum()), 0.0), wait)
                pre = wait - explained
            phase[last] += np.clip(excess, 0.0, None)
        last_at.append(last)
        replay.append((step, last, fresh.copy(), pre))
        in_step[last, step] += wait - pre
        before[last, step] += pre
        key = (_position(sums[s0], int(idx[s0, c]), step_pos), t)
        positions.setdefault(key, []).append(([ranks[k] for k in last], float(np.median(waits[others])), pre))
    out.rows = _rows(positions)
    per_rank_median = np.median(in_step, axis=1)
    out.in_step_us = {ranks[k]: round(float(in_step[k].mean()), 3) for k in range(n) if in_step[k].any()}
    out.before_step_us = float(before.sum(axis=0).mean())
    out.before_step_ranks = [ranks[k] for k in range(n) if before[k].sum() > out.floor_us]
    slow = _consistent(in_step, per_rank_median, out.floor_us, steps)
    if not slow:
        return out
    out.stragglers = [ranks[k] for k in slow]
    out.last_at_per_step = sum(1 for last in last_at if set(last) & set(slow)) / steps
    per_step = np.median(in_step[slow], axis=0)  # the stragglers share the waits they cause together
    out.waited_us = float(np.median(per_step))
    out.waited_mean_us = float(per_step.mean())
    out.steps_waited = int((per_step >= out.floor_us).sum())
    excess = np.median(phase[slow], axis=0) / steps
    out.phases = {k: round(float(v), 3) for k, v in zip(PHASE_KEYS, excess) if v > 0}
    out.what_if_us = _without_stragglers(replay, slow, n, steps)
    return out


def _without_stragglers(replay: list[tuple[int, list[int], np.ndarray, float]], slow: list[int], n: int,
                        steps: int) -> float:
    """The straggler's delay removed, replayed on the arrivals: at every collective the stragglers arrived last
    at, they arrive with the latest other rank instead, so the collective ends when that rank arrives: sooner by
    the *smallest* wait of the other ranks (not their median, the rule's cost: a second late rank still holds
    the collective), less the part of the wait from before the recorded step (not the straggler's doing in the
    trace, as in the rule's cost). Per step, summed over its collectives; the mean over steps, as the rule's cost (µs)."""
    rest = np.array([k for k in range(n) if k not in set(slow)], dtype=np.int64)
    saved = np.zeros(steps)
    for step, last, fresh, pre in replay:
        if not set(last) & set(slow) or not len(rest):
            continue
        saved[step] += max(0.0, float(fresh[rest].min()) - pre)
    return float(saved.mean())


def _consistent(in_step: np.ndarray, median: np.ndarray, floor: float, steps: int) -> list[int]:
    """The fewest ranks (at most half) the others wait for far more than for the rest, each above the floor in
    most steps; [] when no such group stands out.

    Linear after one sort: with the ranks in falling order of total, the group of the first ``c`` has its
    smallest total at ``c - 1`` and the rest their largest at ``c``, and "each above the floor" is a running
    ``all`` over that order (a per-``c`` ``min``/``max``/``all`` over the group was quadratic in ranks)."""
    n = len(in_step)
    total = in_step.sum(axis=1)
    order = sorted(range(n), key=lambda k: -total[k])
    ranked = total[order] if n else total
    above = (median >= floor) & ((in_step >= floor).sum(axis=1) >= max(2, MIN_STEP_SHARE * steps))
    all_above = np.logical_and.accumulate(above[order]) if n else above
    for c in range(1, n // 2 + 1):
        smallest, rest_largest = ranked[c - 1], ranked[c] if c < n else 0.0
        if smallest <= 0 or smallest < MIN_DOMINANCE * rest_largest:
            continue
        if all_above[c - 1]:
            return sorted(order[:c])
    return []


def _position(s: RankSummary, i: int, cache: dict[int, dict[int, int]]) -> int:
    """Index of instance ``i`` among its step's instances on this rank (``cache``: per summary, each step's first)."""
    firsts = cache.get(id(s))
    if firsts is None:
        firsts = cache[id(s)] = {}
        for k, step in enumerate(s.inst_step):
            firsts.setdefault(step, k)
    return i - firsts[s.inst_step[i]]


def _rows(positions: dict[tuple[int, int], list[tuple[list[int], float, float]]]) -> list[ArrivalRow]:
    rows = []
    for (pos, t), seen in positions.items():
        counts: dict[int, int] = {}
        for last, _w, _p in seen:
            for r in last:
                counts[r] = counts.get(r, 0) + 1
        top = max(counts.values())
        rows.append(ArrivalRow(position=pos, type=COLLECTIVE_TYPES[t], steps=len(seen),
                               last=sorted(r for r, c in counts.items() if c == top), last_share=top / len(seen),
                               others_wait_us=round(statistics.median(w for _l, w, _p in seen), 3),
                               before_step_us=round(statistics.median(p for _l, _w, p in seen), 3)))
    rows.sort(key=lambda r: -r.others_wait_us * r.steps)
    return sorted(rows[:MAX_ROWS], key=lambda r: r.position)

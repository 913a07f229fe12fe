"""Merging rank summaries into one view of the job: the ``cross_rank`` report section.

Definitions (per-step means, µs):

**Wait in collectives**: a collective ends at about the same moment on every
rank, because none can finish before the last one arrives; a rank that
arrived early spends the difference inside the collective. gpuprof matches
the *i*-th collective of each type across ranks and counts, per rank, its
duration minus the shortest duration any rank had for it (the transfer
itself), as the opening part of the collective (waiting comes before the
transfer). The union of these parts per step is the rank's wait for the
others: overlapping collectives do not count the same waiting twice. It
needs no clock alignment between machines.

**Straggler**: the rank(s) the others wait for, from the arrival order at
every matched collective, consistently over the steps and above a noise
floor; the others' wait is split into the part from before the recorded step
and the part inside it, by phase (:mod:`gpuprof.distributed.arrivals`).
**Cause**: the phase (data loading, compute, optimizer, host work, sync,
unrecorded host time; see :mod:`gpuprof.distributed.summary`) in which the
straggler spends the most time more than the median other rank before the
collectives it arrives last at.

**Bus bandwidth** of a collective type: bytes times the nccl-tests factor
(:func:`gpuprof.trace.collectives.bus_factor`) over the shortest
duration of each matched instance, summed over instances whose size is known;
the group size is the one the trace records, else the job's world size.

**Exposed transfer**: per rank, per matched collective, its time with no
compute beside it, at most the fastest rank's duration (the transfer itself;
the rest of a longer duration is waiting, GP701's); per step, capped by the
rank's exposed communication and its step; the median over ranks.

The merge reads only :class:`~gpuprof.distributed.summary.RankSummary`
objects: its cost is linear in ranks times collectives per rank.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from gpuprof.distributed.arrivals import Arrivals, arrivals
from gpuprof.distributed.jobpath import JobPath, job_path
from gpuprof.distributed.summary import RankSummary, instances_by_type
from gpuprof.trace.arrays import sorted_unique
from gpuprof.trace.collectives import COLLECTIVE_TYPES, bus_factor
from gpuprof.units import fmt_us

__all__ = ["CrossRank", "RankRow", "CollectiveRow", "merge", "CROSS_RANK_VERSION"]

CROSS_RANK_VERSION = "1.2"


@dataclass(frozen=True)
class RankRow:
    """One rank in the cross-rank table (per-step means, µs)."""

    rank: int
    path: str
    device: str
    num_steps: int
    step_us: float
    compute_us: float
    comm_us: float
    exposed_comm_us: float
    data_loading_us: float
    host_us: float
    sync_us: float
    unrecorded_us: float
    wait_us: float  # waiting in collectives for other ranks (mean per step)
    wait_median_us: float  # the same, median over steps: what a consistent straggler shows
    collectives_per_step: float

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class CollectiveRow:
    """One collective type over the job."""

    type: str
    per_step: float  # median over ranks
    mean_us: float  # mean duration on the fastest rank of each matched instance
    mean_bytes: float | None
    bytes_per_step: float | None
    small: int  # instances (on the rank with most) under the GP704 size, per step
    bus_gbps: float | None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class CrossRank:
    """The ``cross_rank`` report section (JSON layout: docs/report-schema.md)."""

    kind = "cross_rank"
    world_size: int | None
    backend: str
    ranks: list[RankRow]
    collectives: list[CollectiveRow]
    stragglers: list[int] = field(default_factory=list)
    straggler_cause: str | None = None
    straggler_excess_us: float = 0.0  # of the cause, over the median other rank
    others_wait_us: float = 0.0  # median wait per step of the non-straggler ranks
    matched: int = 0  # collectives matched across ranks (per rank)
    ddp_forwards_per_step: float = 0.0
    ddp_rounds_per_optimizer_step: float | None = None
    optimizer_steps_per_step: float = 0.0
    small_per_step: float = 0.0
    small_us_per_step: float = 0.0
    unused_search_us: float = 0.0  # median over ranks, per step
    unused_searches_per_step: float = 0.0
    exposed_transfer_us: float = 0.0  # median over ranks, per step: exposed collective time, waiting excluded
    arrivals: Arrivals = field(default_factory=Arrivals)
    critical_path: JobPath | None = None  # the ranks' paths joined at their collectives (1.2)
    notes: list[str] = field(default_factory=list)
    summaries: list[RankSummary] = field(default_factory=list, repr=False)

    @property
    def step_us(self) -> float:
        """Median over ranks of the median step time."""
        return statistics.median(r.step_us for r in self.ranks) if self.ranks else 0.0

    def row(self, rank: int) -> RankRow:
        return next(r for r in self.ranks if r.rank == rank)

    def to_dict(self) -> dict[str, Any]:
        return {"version": CROSS_RANK_VERSION, "world_size": self.world_size, "backend": self.backend,
                "step_us": self.step_us, "ranks": [r.to_dict() for r in self.ranks],
                "collectives": [c.to_dict() for c in self.collectives], "stragglers": list(self.stragglers),
                "straggler_cause": self.straggler_cause, "straggler_excess_us": self.straggler_excess_us,
                "others_wait_us": self.others_wait_us, "matched": self.matched,
                "ddp_forwards_per_step": self.ddp_forwards_per_step,
                "ddp_rounds_per_optimizer_step": self.ddp_rounds_per_optimizer_step,
                "optimizer_steps_per_step": self.optimizer_steps_per_step,
                "small_collectives_per_step": self.small_per_step,
                "small_collectives_us_per_step": self.small_us_per_step,
                "unused_parameter_search_us": self.unused_search_us,
                "unused_parameter_searches_per_step": self.unused_searches_per_step,
                "exposed_transfer_us": self.exposed_transfer_us, "arrivals": self.arrivals.to_dict(),
                "critical_path": self.critical_path.to_dict() if self.critical_path is not None else None,
                "notes": list(self.notes)}


def merge(summaries: Sequence[RankSummary], small_bytes: int = 1 << 20, straggler_min_share: float = 0.05) -> CrossRank:
    """One CrossRank from the summaries of a job's ranks (ranks without a number get the next free ones)."""
    notes: list[str] = []
    ranked = _number(summaries, notes)
    ranks = [r for r, _ in ranked]
    sums = [s for _, s in ranked]
    worlds = {s.world_size for s in sums if s.world_size}
    world = max(worlds) if worlds else None
    if len(worlds) > 1:
        notes.append(f"the traces disagree on the world size ({sorted(worlds)}): are they one job?")
    if world and len(sums) < world:
        notes.append(f"{len(sums)} of {world} ranks analysed: the others' waits and speed are unknown")
    # per rank, the wait intervals of its matched collectives: the first (duration - fastest) of each,
    # since a rank waits before the transfer can start; their union per step is its wait (collectives
    # that overlap, as DDP's buckets on gloo's threads do, do not count the same waiting twice)
    spans: list[list[tuple[float, float, int]]] = [[] for _ in sums]
    min_durs: dict[int, np.ndarray] = {}
    matched = 0
    # each rank's lists as arrays once, not once per collective type: the loop below is types x ranks
    types = [np.asarray(s.inst_type, dtype=np.int64) for s in sums]
    durs = [np.asarray(s.inst_dur, dtype=np.float64) for s in sums]
    starts_of = [np.asarray(s.inst_start, dtype=np.float64) for s in sums]
    steps_of = [np.asarray(s.inst_step, dtype=np.int64) for s in sums]
    present = set(sorted_unique(np.concatenate(types)).tolist()) if types else set()
    for t in range(len(COLLECTIVE_TYPES)):
        if t not in present:
            continue
        masks = [ty == t for ty in types]
        per_rank = [d[m] for d, m in zip(durs, masks)]
        counts = {len(d) for d in per_rank}
        m = min(counts)
        if max(counts) == 0:
            continue
        if len(counts) > 1:
            notes.append(f"{COLLECTIVE_TYPES[t]}: the ranks recorded different numbers "
                         f"({min(counts)} to {max(counts)}); the first {m} are compared")
        if m == 0:
            continue
        mat = np.vstack([d[:m] for d in per_rank])
        fastest = mat.min(axis=0)
        min_durs[t] = fastest
        for i in range(len(sums)):
            starts = starts_of[i][masks[i]][:m]
            steps = steps_of[i][masks[i]][:m]
            spans[i].extend(zip(starts.tolist(), (starts + mat[i] - fastest).tolist(), steps.tolist()))
        matched += m
    step_waits = [_union_per_step(sp, max(s.num_steps, 1)) for sp, s in zip(spans, sums)]
    rows = [RankRow(rank=rank, path=s.path, device=s.device, num_steps=s.num_steps, step_us=s.step_us,
                    compute_us=s.compute_us, comm_us=s.comm_us, exposed_comm_us=s.exposed_comm_us,
                    data_loading_us=s.data_loading_us, host_us=s.host_us, sync_us=s.sync_us,
                    unrecorded_us=s.unrecorded_us, wait_us=float(w.mean()) if s.num_steps else 0.0,
                    wait_median_us=float(np.median(w)) if s.num_steps else 0.0,
                    collectives_per_step=len(s.inst_type) / s.num_steps if s.num_steps else 0.0)
            for rank, s, w in zip(ranks, sums, step_waits)]
    backends = sorted({s.backend for s in sums if s.backend})
    out = CrossRank(world_size=world, backend="/".join(backends), ranks=rows,
                    collectives=_collective_rows(sums, min_durs, small_bytes, world or len(sums)), matched=matched,
                    notes=notes, summaries=list(sums))
    index = instances_by_type(sums)  # (once: the arrivals and the job's critical path both match by it)
    out.arrivals = arrivals(ranks, sums, out.step_us, straggler_min_share, index)
    _stragglers(out)
    out.exposed_transfer_us = _exposed_transfer(sums, min_durs, out.step_us)
    out.critical_path = job_path(ranks, sums, index)
    if out.critical_path is None and any(s.num_steps and not s.path_seg_end for s in sums):
        out.notes.append("no job critical path: some rank summaries carry no critical-path segments (written by an "
                         "older gpuprof); analyse those ranks' traces again")
    if out.arrivals.before_step_ranks:
        late = ", ".join(map(str, out.arrivals.before_step_ranks))
        out.notes.append(
            f"the others wait {fmt_us(out.arrivals.before_step_us)} per step (mean) for rank(s) {late} at the first "
            "collective because they entered the recorded step late; what delayed them happened before the "
            "recording began and is not in these traces (record the step before too: a longer warm-up-free "
            "active window, or compare the end of the previous step)")
    _ddp(out, sums)
    _small(out, sums, min_durs, small_bytes)
    return out


def _union_per_step(spans: list[tuple[float, float, int]], steps: int) -> np.ndarray:
    """Length of the union of ``(start, end, step)`` spans, given to the step of each merged run's first span."""
    out = np.zeros(steps)
    cur_s = cur_e = 0.0
    cur_step = -1
    for start, end, step in sorted(spans):
        if end <= start:
            continue
        if cur_step >= 0 and start <= cur_e:
            cur_e = max(cur_e, end)
            continue
        if cur_step >= 0:
            out[min(max(cur_step, 0), steps - 1)] += cur_e - cur_s
        cur_s, cur_e, cur_step = start, end, step
    if cur_step >= 0:
        out[min(max(cur_step, 0), steps - 1)] += cur_e - cur_s
    return out


def _number(summaries: Sequence[RankSummary], notes: list[str]) -> list[tuple[int, RankSummary]]:
    taken = {s.rank for s in summaries if s.rank is not None}
    seen: set[int] = set()
    out: list[tuple[int, RankSummary]] = []
    nxt = 0
    for s in summaries:
        r = s.rank
        if r is None or r in seen:
            while nxt in taken or nxt in seen:
                nxt += 1
            notes.append(f"{s.path}: {'no rank in the trace or its name' if r is None else f'rank {r} again'}; "
                         f"counted as rank {nxt}")
            r = nxt
        seen.add(r)
        out.append((r, s))
    return sorted(out, key=lambda rs: rs[0])


def _collective_rows(sums: Sequence[RankSummary], min_durs: dict[int, np.ndarray], small_bytes: int,
                     world: int) -> list[CollectiveRow]:
    """One row per collective type; a group size the trace does not give is the job's world size."""
    rows = []
    for t, kind in enumerate(COLLECTIVE_TYPES):
        per_step = [s.inst_type.count(t) / s.num_steps for s in sums if s.num_steps]
        if not any(per_step):
            continue
        # sizes and groups from the rank with the most instances of this type (all ranks send alike)
        ref = max(sums, key=lambda s: s.inst_type.count(t))
        idx = [i for i, k in enumerate(ref.inst_type) if k == t]
        sizes = [ref.inst_bytes[i] for i in idx]
        known = [b for b in sizes if b >= 0]
        fastest = min_durs.get(t)
        bus = None
        if fastest is not None and known:
            moved = 0.0
            time = 0.0
            for j, dur in enumerate(fastest.tolist()):
                b = sizes[j]
                if b >= 0 and dur > 0:
                    group = ref.inst_group[idx[j]]
                    moved += b * bus_factor(kind, group if group > 0 else world)
                    time += float(dur)
            bus = moved / time / 1e3 if time > 0 else None  # bytes/µs -> GB/s
        steps = max(ref.num_steps, 1)
        rows.append(CollectiveRow(type=kind, per_step=statistics.median(per_step),
                                  mean_us=float(fastest.mean()) if fastest is not None and len(fastest) else 0.0,
                                  mean_bytes=sum(known) / len(known) if known else None,
                                  bytes_per_step=sum(known) / steps if known else None,
                                  small=sum(1 for b in known if b < small_bytes), bus_gbps=bus))
    return rows


def _stragglers(out: CrossRank) -> None:
    """The straggler fields of the section, from the arrival analysis."""
    arr = out.arrivals
    if not arr.stragglers:
        return
    out.stragglers = list(arr.stragglers)
    out.others_wait_us = arr.waited_mean_us
    if arr.phases:
        cause = max(arr.phases, key=lambda k: arr.phases[k])
        out.straggler_cause = cause
        out.straggler_excess_us = arr.phases[cause]


def _exposed_transfer(sums: Sequence[RankSummary], min_durs: dict[int, np.ndarray], step_us: float) -> float:
    """Median over ranks of the exposed transfer time per step: per matched collective, the part of it with no
    compute beside it, at most the fastest rank's duration (the transfer; the rest is waiting), capped by the
    rank's exposed communication and by its step."""
    per_rank = []
    for s in sums:
        if len(s.inst_exposed) != len(s.inst_type) or not s.num_steps:
            continue
        pos: dict[int, int] = {}
        total = 0.0
        for t, exposed in zip(s.inst_type, s.inst_exposed):
            j = pos.get(t, 0)
            pos[t] = j + 1
            fastest = min_durs.get(t)
            transfer = float(fastest[j]) if fastest is not None and j < len(fastest) else 0.0
            total += min(exposed, transfer)
        per_rank.append(min(total / s.num_steps, s.exposed_comm_us, s.step_us or step_us))
    return float(statistics.median(per_rank)) if per_rank else 0.0


def _ddp(out: CrossRank, sums: Sequence[RankSummary]) -> None:
    steps = sum(s.num_steps for s in sums)
    if not steps:
        return
    out.ddp_forwards_per_step = sum(s.ddp_forwards for s in sums) / steps
    out.unused_search_us = statistics.median(s.unused_search_us for s in sums)
    out.unused_searches_per_step = sum(s.unused_searches for s in sums) / steps
    out.optimizer_steps_per_step = sum(s.optimizer_steps for s in sums) / steps
    opt = sum(s.optimizer_steps for s in sums)
    if opt and any(s.ddp_forwards for s in sums):
        out.ddp_rounds_per_optimizer_step = sum(s.ddp_sync_rounds for s in sums) / opt


def _small(out: CrossRank, sums: Sequence[RankSummary], min_durs: dict[int, np.ndarray], small_bytes: int) -> None:
    """Collectives under ``small_bytes`` per step, and their time on the fastest rank."""
    if not sums:
        return
    ref = max(sums, key=lambda s: len(s.inst_type))
    steps = max(ref.num_steps, 1)
    count = 0
    time = 0.0
    pos: dict[int, int] = {}
    for k, b in zip(ref.inst_type, ref.inst_bytes):
        j = pos.get(k, 0)
        pos[k] = j + 1
        if 0 <= b < small_bytes:
            count += 1
            fastest = min_durs.get(k)
            if fastest is not None and j < len(fastest):
                time += float(fastest[j])
    out.small_per_step = count / steps
    out.small_us_per_step = time / steps

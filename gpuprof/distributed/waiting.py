"""Time inside collective kernels spent waiting for other ranks, split from busy time (issue 37).

A collective kernel (NCCL/RCCL) starts when its rank reaches it and cannot finish before the last rank of its
group has arrived: its duration is the wait for that rank plus the transfer. The GPU is "busy" for all of it,
so a rank waiting for a slow peer reads as well utilised. The wait is estimated per collective instance
(:class:`~gpuprof.distributed.summary.RankSummary`'s instances: the main GPU's collectives in the steps):

* **ranks** (several ranks of the job given): the instance's duration less the shortest duration any rank had
  for the same collective (the *i*-th of its type on every rank, as :mod:`gpuprof.distributed.arrivals`
  matches them): the part before the last rank arrived;
* **trace** (one rank): the duration less the shortest instance *in this trace* of the same type and message
  size (the transfer, as close as one rank can tell). Instances whose size is unknown, or that have no twin
  of their size, get no estimate (0): on one rank nothing separates their wait from their transfer. It is a
  lower bound: when every instance waited, the shortest did too.

Only the part of a wait during which no compute kernel ran beside the collective counts
(``min(wait, exposed time)``, exposed as :mod:`gpuprof.distributed.summary` defines it), capped at the
breakdown's communication: that is time the GPU did no work. ``comm_wait_us`` is its mean per step and
``gpu_working_utilization`` the GPU busy time less it, over the step time; ``gpu_utilization`` keeps its
meaning (waiting included).
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuprof.distributed.summary import RankSummary, instances_by_type
from gpuprof.report import TraceSummary

__all__ = ["trace_waits", "rank_waits", "apply_waits"]


def trace_waits(s: RankSummary) -> list[float | None]:
    """Per instance of ``s``: its wait by the one-rank estimate (module docstring); None where there is none."""
    fastest: dict[tuple[int, int], float] = {}
    count: dict[tuple[int, int], int] = {}
    for t, b, d in zip(s.inst_type, s.inst_bytes, s.inst_dur, strict=True):
        if b >= 0:
            key = (t, b)
            fastest[key] = min(fastest.get(key, d), d)
            count[key] = count.get(key, 0) + 1
    return [d - fastest[(t, b)] if b >= 0 and count[(t, b)] > 1 else None
            for t, b, d in zip(s.inst_type, s.inst_bytes, s.inst_dur, strict=True)]


def rank_waits(sums: Sequence[RankSummary]) -> list[list[float | None]]:
    """Per summary, per instance: its wait by the cross-rank estimate; the one-rank estimate where an instance
    has no match on every rank (module docstring)."""
    out = [trace_waits(s) for s in sums]
    if len(sums) < 2:
        return out
    index = instances_by_type(sums)
    for t in set.intersection(*(set(ix) for ix in index)):
        for j in range(min(len(ix[t]) for ix in index)):
            at = [ix[t][j] for ix in index]
            fastest = min(s.inst_dur[i] for s, i in zip(sums, at, strict=True))
            for k, (s, i) in enumerate(zip(sums, at, strict=True)):
                out[k][i] = s.inst_dur[i] - fastest
    return out


def apply_waits(summary: TraceSummary, s: RankSummary, waits: Sequence[float | None], source: str) -> None:
    """Set ``summary``'s waiting fields from the per-instance ``waits`` of its rank summary ``s`` (None: no
    estimate for that instance; the fields stay None when no instance has one: unknown, not "no waiting")."""
    if not s.inst_dur or summary.num_steps <= 0 or all(w is None for w in waits):
        return
    if summary.gpu_utilization is None:  # a CPU-only (gloo) job: no GPU to be busy or idle
        return
    exposed = s.inst_exposed if len(s.inst_exposed) == len(waits) else [0.0] * len(waits)
    idle = sum(min(max(w, 0.0), e) for w, e in zip(waits, exposed, strict=True) if w is not None) / summary.num_steps
    idle = min(idle, summary.breakdown_us.get("communication", 0.0), summary.gpu_busy_us)
    summary.comm_wait_us = round(idle, 3)
    summary.comm_wait_source = source
    step = summary.step_time_mean_us
    summary.gpu_working_utilization = (summary.gpu_busy_us - idle) / step if step > 0 else None

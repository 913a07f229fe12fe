"""The cross-rank findings' what-ifs: GP701's and GP702's replayed savings beside the rules' costs.

Both are replayed before the rules run, where the data is: GP701's on the
matched collectives' arrivals (:mod:`gpuprof.distributed.arrivals`), GP702's
on each rank's step graph when the rank is summarised
(:mod:`gpuprof.trace.critpath.overlap`, ``RankSummary.overlap_what_if_us``).
Here each becomes the finding's ``what_if_saving_us``, and its ``what_if_note``
where it and the rule's cost differ beyond the margin
(:func:`gpuprof.trace.critpath.margin.margin_note`, docs/critical-path.md).
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Iterable

from gpuprof.distributed.summary import RankSummary
from gpuprof.findings import Finding
from gpuprof.trace.critpath.margin import margin_note

__all__ = ["straggler_what_if", "overlap_what_if", "STRAGGLER_HELD", "STRAGGLER_MORE", "OVERLAP_LESS",
           "OVERLAP_MORE", "OVERLAP_NOT_REPLAYED"]

# GP701's what-if note, where the replay and the rule's cost differ beyond the margin (docs/critical-path.md)
STRAGGLER_HELD = ("another rank arrives late too: with the straggler's delay removed the collectives wait for it, "
                  "so the saving is the replay's, less than the others' median wait (the rule's cost)")
STRAGGLER_MORE = "the replay saves more than the rule's cost: the others' waits differ widely; believe the replay"

# GP702's what-if notes
OVERLAP_LESS = ("the replay saves less than the exposed transfer: with the collectives beside the compute, the "
                "step still waits for what else sets it (the host's work, the last collective, which ends when it "
                "did, or a host wait for one); believe the what-if")
OVERLAP_MORE = ("the replay saves more than the exposed transfer: the compute held behind the collectives also "
                "waited while they waited for other ranks, or held the host; believe the what-if")
OVERLAP_NOT_REPLAYED = ("not replayed: no rank's trace has its collectives on a GPU (CPU/gloo ranks, or summaries "
                        "of an older gpuprof); the rule's cost stands")


def straggler_what_if(found: Finding, saving: float, step_us: float) -> Finding:
    """GP701's finding with the straggler's delay removed, replayed on the arrivals: each collective then ends
    when the latest other rank arrives, which a second late rank can hold back."""
    differs = margin_note(found.cost_us_per_step, saving, step_us) is not None
    note = (STRAGGLER_HELD if saving < (found.cost_us_per_step or 0.0) else STRAGGLER_MORE) if differs else None
    return dataclasses.replace(found, what_if_saving_us=round(saving, 1), what_if_note=note)


def overlap_what_if(found: Finding, summaries: Iterable[RankSummary], step_us: float) -> Finding:
    """GP702's finding with its collectives overlapped: each rank's saving (replayed on its step graph), the
    median over the ranks replayed, as the rule's cost is the median over ranks, and never above the step."""
    per_rank = [s.overlap_what_if_us for s in summaries if s.overlap_what_if_us is not None]
    if not per_rank:
        return dataclasses.replace(found, what_if_note=OVERLAP_NOT_REPLAYED)
    saving = float(statistics.median(per_rank))
    if step_us > 0:
        saving = min(saving, step_us)
    differs = margin_note(found.cost_us_per_step, saving, step_us) is not None
    note = (OVERLAP_LESS if saving < (found.cost_us_per_step or 0.0) else OVERLAP_MORE) if differs else None
    return dataclasses.replace(found, what_if_saving_us=round(saving, 1), what_if_note=note)

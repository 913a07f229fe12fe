"""A fixed finding's what-if against its measured change: why they differ, when they do.

The what-if (docs/critical-path.md) replays the recorded steps with the
finding's cause removed and everything else unchanged; the measured change is
the mean step before minus after. Beyond ``WHAT_IF_AGREEMENT`` of the larger
(and beyond the noise of a per-step mean), the row of ``gpuprof diff`` says how
much of the change was the finding's own part of the step and how much the rest.
"""

from __future__ import annotations

from typing import Any

__all__ = ["WHAT_IF_AGREEMENT", "what_if_gap"]

WHAT_IF_AGREEMENT = 0.15  # a fixed finding's what-if and the measured change agree within this share of the larger


def what_if_gap(row: dict[str, Any], noise: float | None) -> str | None:
    """Why a fixed finding's measured change is not its what-if (beyond ``WHAT_IF_AGREEMENT`` and the noise); None
    when they agree or either is unknown. The what-if holds every other part of the step unchanged
    (docs/critical-path.md): what the rest of the step did is the usual reason."""
    what_if, measured = row.get("what_if_saving_us_per_step"), row.get("measured_saving_us_per_step")
    if what_if is None or measured is None:
        return None
    gap = measured - what_if
    if abs(gap) <= WHAT_IF_AGREEMENT * max(abs(what_if), abs(measured)) or (noise is not None and abs(gap) <= noise):
        return None
    text = f"measured {measured / 1000:.3g} ms per step against a what-if of {what_if / 1000:.3g} ms"
    part, saved = row.get("measured_part"), row.get("measured_part_saving_us_per_step")
    if part and saved is not None:
        rest = measured - saved
        return (f"{text}: its own part ({part.split('.')[-1].replace('_', ' ')}) shrank by {saved / 1000:.3g} ms and the rest of the step "
                f"{'grew' if rest < 0 else 'shrank'} by {abs(rest) / 1000:.3g} ms; the what-if holds the rest unchanged")
    return f"{text}: the runs differ beyond the fixed cause; the what-if holds the rest of the step unchanged"

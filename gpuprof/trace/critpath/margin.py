"""A rule's cost against its replay: which figure to believe, and why (docs/critical-path.md, "The margin").

A finding's what-if (``what_if_saving_us``) is the step time its fix would save, replayed on the step graph
(:mod:`gpuprof.trace.critpath.replay`); the rules declare what the fix removes (``Rule.what_if``,
:mod:`gpuprof.rules.whatif`). Where the rule's own cost and the replay differ by more than
:data:`MARGIN_SHARE` of the larger (and by more than :data:`MARGIN_STEP_SHARE` of the mean step),
``what_if_note`` says which to believe (:func:`margin_note`) and why, from the replay (:func:`replay_reason`:
which edge ended the replayed steps, what the GPU did during the waits removed). Nothing here knows a rule.
"""

from __future__ import annotations

from gpuprof.findings import Finding
from gpuprof.trace.critpath.graph import StepGraph
from gpuprof.trace.critpath.replay import Removal, Replayer
from gpuprof.trace.intervals import Intervals
from gpuprof.units import fmt_us

__all__ = ["MARGIN_SHARE", "MARGIN_STEP_SHARE", "NOTE_HIDDEN", "NOTE_STARVES", "NOTE_MORE", "WHY_GPU", "WHY_TRANSFER",
           "WHY_HOST", "WHY_STARVES", "WHY_PART", "NOTE_NOT_REPLAYED", "NOTE_CROSS_RANK", "margin_note",
           "replay_reason", "carry_note", "step_of"]

MARGIN_SHARE = 0.25
MARGIN_STEP_SHARE = 0.01

# The notes' openings (a note goes on with the reason the graph gives: which edge kept the step, what the GPU did)
NOTE_HIDDEN = "the step still waits for what else sets it"
NOTE_STARVES = "starves the GPU"
NOTE_MORE = "saves more than the rule's cost"
# the reasons (derived from the replay: see replay_reason)
WHY_GPU = ("the GPU's queued work: the replayed step ends with the GPU, which ran work through {busy:.0%} of these "
           "waits")
WHY_TRANSFER = ("the transfers themselves and the GPU work queued with them: the replayed step ends with the GPU, "
                "which ran work through {busy:.0%} of these waits")
WHY_HOST = "the host's own work: the replayed step ends with the main thread, which ran on between these waits"
WHY_STARVES = ("the GPU work it held back (the host work that launches it waited) ends {idle} per step earlier in "
               "the replay, more than the cause's own cost")
WHY_PART = ("the rule's cost counts only part of the time removed ({waits} per step on the main thread), and the host "
            "work after it runs earlier")
NOTE_NOT_REPLAYED = "not replayed: its cause is not a node of the step graph; the rule's cost is its own estimate"
NOTE_CROSS_RANK = "not replayed: a cross-rank cause (the ranks' graphs are not joined); the rule's cost stands"


def replay_reason(g: StepGraph, r: Replayer, rm: Removal, cost: float | None) -> tuple[str, str]:
    """Why the replay and the rule's cost differ, from the replay (which edge ends the replayed steps, what the GPU
    did during the waits removed): ``(reason if it saves less, reason if it saves more)``."""
    n = max(len(g.steps), 1)
    ws = sorted(rm.drop | rm.make_async)
    spans = Intervals.from_pairs((float(g.w_ts[w]), float(g.w_end[w])) for w in ws)
    waits = spans.total() + rm.cut_host.total()
    gpu_iv = Intervals.from_arrays(g.g_ts, g.g_end) if g.n_gpu else Intervals.empty()
    busy = gpu_iv.intersect(spans).total() / spans.total() if spans.total() > 0 else 0.0
    host, gpu = r.ends(rm)
    if g.n_gpu and (gpu >= host or r.last_held):  # the GPU ends the replayed steps, or released their last wait
        less = (WHY_TRANSFER if rm.make_async else WHY_GPU).format(busy=busy)
    else:
        less = WHY_HOST
    _h0, gpu0 = r.recorded
    if g.n_gpu and (gpu0 - gpu) / n > (cost or 0.0):
        # GPU work the cause held back: in the replay it ends earlier, by more than the cause's own cost
        more = f"{NOTE_STARVES}: " + WHY_STARVES.format(idle=fmt_us((gpu0 - gpu) / n))
    else:
        more = f"{NOTE_MORE}: " + WHY_PART.format(waits=fmt_us(waits / n))
    return less, more


def carry_note(cost: float | None, saving: float, step: float, note: str | None) -> str | None:
    """:func:`margin_note` for a what-if carried to another finding of the same problem (GP601 absorbing GP102):
    the carried ``note``'s reason where the figures still differ the same way, else the note without a reason."""
    new = margin_note(cost, saving, step)
    if new is None or note is None:
        return new
    if new.startswith(NOTE_HIDDEN) == note.startswith(NOTE_HIDDEN) and note.startswith(
            (NOTE_HIDDEN, NOTE_STARVES, NOTE_MORE)):
        return note
    return new


def step_of(f: Finding) -> float | None:
    """The mean step a finding's cost share is of (None without both)."""
    if f.cost_us_per_step is None or not f.cost_share:
        return None
    return f.cost_us_per_step / f.cost_share


def margin_note(cost: float | None, saving: float, step: float,
                reasons: tuple[str, str] | None = None) -> str | None:
    """Which figure to believe when the rule's cost and the replay disagree beyond the margin (None: they agree).
    ``reasons``: why, if the replay saves less and if it saves more (:func:`replay_reason`, from the graph); without
    them, the note says only which figure to believe."""
    if cost is None:
        return None
    gap = abs(saving - cost)
    if gap <= MARGIN_SHARE * max(cost, saving) or gap <= MARGIN_STEP_SHARE * step:
        return None
    if saving < cost:
        why = f": {reasons[0]}" if reasons else ""
        return f"{NOTE_HIDDEN}{why}; the replay saves less than the rule's cost; believe the what-if"
    return f"{reasons[1] if reasons else NOTE_MORE}; believe the what-if"

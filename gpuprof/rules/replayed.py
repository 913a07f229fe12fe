"""Each finding's what-if: the step time its fix would save, replayed on the step graph (docs/critical-path.md).

Each rule declares what removing its cause means on the graph, beside its check (``Rule.what_if``,
:mod:`gpuprof.rules.whatif`); :func:`with_what_if` replays it (:mod:`gpuprof.trace.critpath.replay`) and sets
the finding's ``what_if_saving_us``. Where the rule's own cost and the replay differ beyond the margin,
``what_if_note`` says which to believe and why (:mod:`gpuprof.trace.critpath.margin`); a finding with a cost
whose rule declares no what-if says it cannot be replayed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from gpuprof.findings import Finding
from gpuprof.rules.base import all_rules
from gpuprof.rules.whatif import ReplayContext, WhatIf
from gpuprof.trace.critpath.graph import build_graph
from gpuprof.trace.critpath.margin import (
    MARGIN_STEP_SHARE,
    NOTE_CROSS_RANK,
    NOTE_HIDDEN,
    NOTE_NOT_REPLAYED,
    margin_note,
    replay_reason,
)
from gpuprof.trace.critpath.replay import Replayer, replay_saving
from gpuprof.trace.metrics import TraceMetrics

__all__ = ["with_what_if", "cross_rank_not_replayed", "declared_what_ifs", "NOTE_OTHER_THREADS", "CROSS_RANK_SOURCE"]

NOTE_OTHER_THREADS = ("part of these calls ran on other host threads (the autograd or a pin-memory thread): the "
                      "replay cuts only the main thread's time, as the trace does not record what the main thread "
                      "waited for on another; take the what-if as the lower bound and the rule's cost as the upper")
CROSS_RANK_SOURCE = "cross-rank"  # the source of a finding made from the ranks' summaries (GP7xx), not one trace


def declared_what_ifs() -> dict[str, WhatIf]:
    """Every registered trace rule's declared what-if, by code."""
    return {r.code: r.what_if for r in all_rules() if r.what_if is not None}


def with_what_if(m: TraceMetrics, findings: Iterable[Finding], cores: int | None = None) -> list[Finding]:
    """``findings`` (of ``m``'s trace) with their what-if set (see the module docstring). ``cores``: the CPU cores
    the trainer may run on, where known (a trace does not record them), for a what-if that depends on them (a loader
    fix on a trace without GPU work: ``WhatIf.without_gpu``)."""
    declared = declared_what_ifs()
    out = []
    findings = list(findings)
    ctx: ReplayContext | None = None
    for f in findings:
        action = declared.get(f.code)
        if f.origin != "trace" or f.cost_us_per_step is None and action is None:
            out.append(f)
            continue
        if action is None or not m.steps:
            out.append(dataclasses.replace(
                f, what_if_note=NOTE_CROSS_RANK if f.source == CROSS_RANK_SOURCE else NOTE_NOT_REPLAYED))
            continue
        if ctx is None:
            g = m.memo(build_graph)
            ctx = ReplayContext(g, Replayer(g), m, findings)
        g = ctx.graph
        rm = action.removal(ctx, f)
        saving = replay_saving(ctx.replayer, rm)
        if action.without_gpu is not None and not g.n_gpu:
            out.append(action.without_gpu(f, saving, cores, m.mean_step_time))
            continue
        note = margin_note(f.cost_us_per_step, saving, m.mean_step_time)
        if note is not None:  # why, from the graph (one more replay, only where the figures differ)
            note = margin_note(f.cost_us_per_step, saving, m.mean_step_time,
                               replay_reason(g, ctx.replayer, rm, f.cost_us_per_step))
        if note is not None and note.startswith(NOTE_HIDDEN) and action.elsewhere_us is not None \
                and action.elsewhere_us(ctx, f) > MARGIN_STEP_SHARE * m.mean_step_time:
            note = NOTE_OTHER_THREADS  # the gap is (partly) calls the main thread's time line does not hold
        out.append(dataclasses.replace(f, what_if_saving_us=round(saving, 1), what_if_note=note))
    return out


def cross_rank_not_replayed(findings: Iterable[Finding]) -> list[Finding]:
    """The cross-rank findings (GP7xx, made from the ranks' summaries, not from one trace's graph), each with a
    cost saying it is not replayed: the ranks' graphs are not joined (docs/critical-path.md)."""
    return [dataclasses.replace(f, what_if_note=NOTE_CROSS_RANK)
            if f.cost_us_per_step is not None and f.what_if_saving_us is None and f.what_if_note is None else f
            for f in findings]

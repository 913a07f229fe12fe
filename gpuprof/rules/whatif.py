"""The what-if a rule declares beside its check (``Rule.what_if``), as a ruff rule declares its fix.

A finding's what-if is the step time its fix would save, replayed on the trace's step graph
(docs/critical-path.md). The graph and the replay know no rule (:mod:`gpuprof.trace.critpath`); each rule whose
cause is a node of the graph says what removing it means there: a :class:`WhatIf` whose ``removal`` picks, from
the finding and the graph, the waits to drop or make asynchronous, the launch gaps to close or the host time to cut
(a :class:`~gpuprof.trace.critpath.replay.Removal`). :func:`gpuprof.rules.replayed.with_what_if` replays each
finding's removal and says, where the rule's cost and the replay disagree, which to believe
(:mod:`gpuprof.trace.critpath.margin`). The picks the rules share are here: the data waits (a loader fix) and the
copies' waits (by direction).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from gpuprof.findings import Finding
from gpuprof.trace.critpath.graph import WAIT_DATA, StepGraph
from gpuprof.trace.critpath.replay import Removal, Replayer
from gpuprof.trace.intervals import Intervals
from gpuprof.trace.metrics import TraceMetrics

__all__ = ["WhatIf", "ReplayContext", "Pick", "data_waits", "copy_waits"]


@dataclass
class ReplayContext:
    """What a rule's removal is picked from: one trace's step graph, its replayer and metrics, and every finding of
    the trace (a rule may leave out what another reports: GP205 the start-up calls GP206 names)."""

    graph: StepGraph
    replayer: Replayer
    metrics: TraceMetrics
    findings: list[Finding]
    memo: dict[str, Intervals] = field(default_factory=dict)  # what a pick computes once per trace


#: picks, from the replay's context, what removing one finding's cause takes away on the graph
Pick = Callable[[ReplayContext, Finding], Removal]


@dataclass(frozen=True)
class WhatIf:
    """What removing a rule's cause means on the step graph (docs/critical-path.md, the what-if table).

    ``label`` says it in words (``"data wait gone"``); ``removal`` picks it. ``elsewhere_us``, where the cause
    can also run on host threads the replay does not cut (GP205's runtime calls on the autograd or pin-memory
    threads), gives that time per step: where it weighs more than the margin and the replay saves less than the
    cost, the note says the what-if is the lower bound. ``without_gpu``, for a cause whose fix needs the CPU
    (a loader fix: the workers' loading runs on the trainer's cores), gives the finding's what-if on a trace
    without GPU work, from the replayed saving, the cores (None: unknown) and the mean step.
    """

    label: str
    removal: Pick
    elsewhere_us: Callable[[ReplayContext, Finding], float] | None = None
    without_gpu: Callable[[Finding, float, int | None, float], Finding] | None = None


def data_waits(ctx: ReplayContext, f: Finding) -> Removal:
    """Every data wait of the main thread in the recorded steps, dropped (the loading overlapped by workers)."""
    g, r = ctx.graph, ctx.replayer
    return Removal(drop=frozenset(int(w) for w in r.waits if g.w_kind[w] == WAIT_DATA))


def copy_waits(direction: str | None, make_async: bool) -> Pick:
    """The waits of blocking copies (``direction``: ``"HtoD"``, ``"DtoH"``, None for both), made asynchronous (their
    call time stays, the wait for the GPU goes) or dropped."""

    def pick(ctx: ReplayContext, f: Finding) -> Removal:
        g, r = ctx.graph, ctx.replayer
        ws = frozenset(int(w) for w in r.waits if g.w_kind[w] != WAIT_DATA and g.w_tag[w]
                       and (direction is None or g.w_tag[w] == direction))
        return Removal(make_async=ws) if make_async else Removal(drop=ws)

    return pick

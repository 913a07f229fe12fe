"""The view model both HTML surfaces draw: the summary cards' figures and the findings as drawn.

The standalone page (:mod:`gpuprof.htmlpage.page`) and the TensorBoard tab
(:mod:`gpuprof.tbplugin.data`) feed the same script (``report.js``: ``GP.cards``,
``GP.findings``); each computed these figures itself before, so a change to one
could make the two surfaces disagree on the same trace. Each surface keeps what
only it reads its inputs from (a :class:`~gpuprof.report.Report`, or the tab's
cached per-trace analyses) and hands the figures here.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from gpuprof.findings import Finding
from gpuprof.render.critpath import fmt_what_if
from gpuprof.render.format import fmt_cost, linked_message
from gpuprof.render.groups import applies_to, group_cost, group_findings, trace_label

__all__ = ["TraceFigures", "headline", "drawn_finding", "drawn_findings"]


@dataclass(frozen=True)
class TraceFigures:
    """One trace's figures as its summary states them (docs/report-schema.md, ``traces[]``)."""

    devices: tuple[str, ...]  # device names, in the summary's order
    num_steps: int
    step_time_mean_us: float
    gpu_busy_us: float  # per step, on the main device
    gpu_utilization: float | None  # None: no GPU activity

    @classmethod
    def of(cls, summary: dict[str, Any], devices: Iterable[str]) -> TraceFigures:
        """From a trace summary in its JSON form; ``devices``: its device names as the surface reads them."""
        return cls(tuple(devices), summary["num_steps"], summary["step_time_mean_us"], summary["gpu_busy_us"],
                   summary.get("gpu_utilization"))


def headline(traces: Sequence[TraceFigures], step_times_us: Sequence[float], steps: int) -> dict[str, Any]:
    """The summary cards over every step of every trace: ``step_times_us`` every step's time, ``steps`` their count.

    GPU utilisation is busy time over step time, summed over the traces that have GPU activity (the run's one
    definition, :class:`gpuprof.saved.RunFigures`), not a mean of the traces' utilisations.
    """
    from gpuprof.saved.figures import busy_share

    return {
        "traces": len(traces),
        "devices": list(dict.fromkeys(n for t in traces for n in t.devices if n)),
        "steps": steps,
        "step_time_us": statistics.median(step_times_us) if step_times_us else None,
        "step_time_mean_us": sum(step_times_us) / len(step_times_us) if step_times_us else None,
        "gpu_utilization": busy_share((t.gpu_busy_us, t.step_time_mean_us, t.num_steps) for t in traces
                                      if t.gpu_utilization is not None),
    }


def drawn_finding(f: Finding, where: dict[str, Any] | None = None) -> dict[str, Any]:
    """A finding as the pages draw it: its JSON form, where it came from (``where``: the tab's ``trace``,
    ``report``, ``scope``), and its message, cost and what-if as every renderer states them (:mod:`gpuprof.render.format`,
    :mod:`gpuprof.render.critpath`)."""
    return {**f.to_dict(), **(where or {}), "display_message": linked_message(f), "display_cost": fmt_cost(f),
            "display_what_if": fmt_what_if(f)}


def drawn_findings(findings: Sequence[Finding], labels: dict[str, str]) -> list[dict[str, Any]]:
    """A report's findings as the page draws them, most expensive first: over several traces (``labels``, the
    traces' ``#1``, ``#2``), the same finding in several traces is one card (:mod:`gpuprof.render.groups`, as the
    terminal and markdown show it) carrying ``trace_label``, ``applies_to`` (each trace with its cost) and
    ``group_size``; over one trace, one card per finding."""
    if len(labels) <= 1:
        return [drawn_finding(f) for f in findings]
    out = []
    for group in group_findings(findings):
        f = group[0]
        out.append({**drawn_finding(f), "display_cost": group_cost(group, labels), "group_size": len(group),
                    "trace_label": trace_label(f.source, labels), "applies_to": applies_to(group, labels)})
    return out

"""The same finding in several traces, shown once: one grouping for every view.

A report over several traces (a run's worker files, the windows of a job, the
ranks of a node) holds each trace's findings; the same problem at the same line
is one finding per trace. The terminal, the markdown report and the HTML pages
show it once, with the traces it applies to and each one's cost, so a report of
six problems in two traces reads as six, not twelve (and not six in one view
and twelve in another).
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuprof import units as U
from gpuprof.findings import Finding
from gpuprof.render import format as F
from gpuprof.render.safe import shorten, visible
from gpuprof.report import Report

__all__ = ["trace_labels", "trace_label", "group_findings", "applies_to", "group_cost", "groups_head"]


def trace_labels(report: Report) -> dict[str, str]:
    """``#1``, ``#2``, ... for the traces of a report, in report order."""
    return {t.path: f"#{i}" for i, t in enumerate(report.traces, 1)}


def trace_label(source: str | None, labels: dict[str, str]) -> str:
    """A finding's trace as its label (``#2``), or its shortened path when the report does not hold it."""
    if source is None:
        return "-"
    return labels.get(source) or shorten(visible(source), 60)


def group_findings(findings: Sequence[Finding]) -> list[list[Finding]]:
    """Findings of several traces grouped by rule code and source location, most expensive first.

    The message is not part of the key: it holds each trace's own numbers
    (``12.3 ms per step``), so the same problem at the same line of the
    training script reads differently in every worker or step file. Findings
    without a location group by their code alone (a whole-trace problem, like
    low utilisation, seen in several traces). Each group's first finding is
    its most expensive; ``findings`` must come sorted (``Report.sorted_findings``).
    """
    groups: dict[tuple[str, str | None], list[Finding]] = {}
    for f in findings:
        groups.setdefault((f.code, F.fmt_location(f)), []).append(f)
    return list(groups.values())


def applies_to(group: Sequence[Finding], labels: dict[str, str]) -> str:
    """``#1 32.8 ms/step, #3 33.0 ms/step`` in trace order."""
    order = {path: i for i, path in enumerate(labels)}
    items = sorted(group, key=lambda f: (order.get(f.source or "", len(order)), f.source or ""))
    parts = []
    for f in items:
        cost = f" {U.fmt_us(f.cost_us_per_step)}/step" if f.cost_us_per_step is not None else ""
        parts.append(f"{trace_label(f.source, labels)}{cost}")
    return ", ".join(parts)


def group_cost(group: Sequence[Finding], labels: dict[str, str]) -> str:
    """The group's cost line: its most expensive finding's cost, and which trace that is when there are several."""
    f = group[0]
    cost = F.fmt_cost(f)
    if len(group) > 1:
        cost += f" in {trace_label(f.source, labels)}, the most expensive of {len(group)}"
    return cost


def groups_head(n_findings: int, n_traces: int, n_groups: int) -> str:
    """The heading's count: ``12 in 2 traces, 6 distinct, each shown once with the traces it applies to``."""
    return f"{n_findings} in {n_traces} traces, {n_groups} distinct, each shown once with the traces it applies to"

"""One finding flow: every rule is run by one runner, every report's findings finished at one boundary.

Whatever produces findings (the trace rules, the cross-rank rules GP7xx, the
checks a capture makes while the loop runs, the memory analysis), they reach
a report the same way (docs/codes.md, "One finding flow"):

1. **Run** (:func:`run_rules`, in :mod:`gpuprof.runner`): each rule of a rule set that the
   :class:`Selection` wants runs once. A rule that raises has unknown
   findings, so it is never quiet: it adds no findings (not even those it
   yielded before raising), the other rules still run, and then
   :class:`~gpuprof.errors.RuleError` (exit 3) names every failed code -
   unless the caller passed a ``failures`` list (the capture and the
   TensorBoard plugin, which must not stop), which receives
   ``(code, exception)`` and whose report names the codes in
   ``failed_rules`` with a note that the analysis is incomplete.
   ``GPUPROF_STRICT_RULES`` (the test suite sets it) raises even then.
   Severity follows cost here (:func:`gpuprof.codespec.severity_for_cost`),
   for every rule set.
2. **Finish** (:func:`finish`): the one place a report's findings are
   filtered by ``--select``/``--ignore`` (capture's ``select=``/``ignore=``),
   folded by the overlap policy (:func:`gpuprof.codes.apply_overlaps`),
   linked (GP101's idle parts to the findings that explain them; a cost
   counted in another finding) and sorted. Links are data
   (:class:`~gpuprof.findings.Link` on the finding), drawn by each renderer.

The :class:`Selection` also decides which rules run at all (step 1): a rule
whose code is not wanted is not run, so the rules that do run share costs
among themselves (GP202 claims the pageable copies itself under
``--select GP202``). That is choosing rules, not filtering findings; the
findings are filtered once, in :func:`finish`.

**Step denominator.** A cost share (``cost_share``, and the share a message
shows) is a fraction of the *mean* step time: total step time / steps of one
trace for trace rules (``TraceMetrics.mean_step_time``), the median over ranks
of each rank's mean step for cross-rank rules
(:func:`gpuprof.distributed.rules.job_step_us`). The mean, because a cost per
step is a mean too (its total over the steps / steps): the share is then the
part of the recorded time the problem took, shares of one trace add up, and
no cost exceeds 100% of its step (a larger one is capped and its measured
figure kept as the evidence ``cost_measured_us_per_step``).
"""

from __future__ import annotations

import dataclasses
from typing import Iterable, Sequence

from gpuprof.findings import Finding, Link, sort_findings
from gpuprof.runner import Selection

__all__ = [
    "finish",
    "link_costs",
]


def finish(findings: Iterable[Finding], selection: Selection | None = None) -> list[Finding]:
    """A report's findings, finished once (see the module docstring, step 2); no ``selection``: keep all."""
    from gpuprof.codes import apply_overlaps
    from gpuprof.rules.links import link_idle_parts

    kept = [f for f in findings if selection is None or selection.wants(f.code)]
    return sort_findings(link_idle_parts(link_costs(apply_overlaps(kept))))


def link_costs(findings: Sequence[Finding]) -> list[Finding]:
    """Each finding whose evidence says ``cost_counted_in`` CODE, with a ``cost_counted_in`` link to it.

    The rule that leaves a shared cost to another names it in its evidence
    (where the measurement is); the link makes that a field every renderer
    draws the same way. Idempotent.
    """
    out = []
    for f in findings:
        # the two spellings rules use: an evidence named cost_counted_in (GP202, GP203) or an extra of one (GP702)
        codes = [str(e.value) if e.metric == "cost_counted_in" else str(e.extra["cost_counted_in"])
                 for e in f.evidence if e.metric == "cost_counted_in" or e.extra.get("cost_counted_in")]
        new = tuple(Link("cost_counted_in", c) for c in dict.fromkeys(codes) if Link("cost_counted_in", c) not in f.links)
        out.append(dataclasses.replace(f, links=f.links + new) if new else f)
    return out

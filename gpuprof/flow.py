"""One finding flow: every rule is run by one runner, every report's findings finished at one boundary.

Whatever produces findings (the trace rules, the cross-rank rules GP7xx, the
checks a capture makes while the loop runs, the memory analysis), they reach
a report the same way (docs/codes.md, "One finding flow"):

1. **Run** (:func:`run_rules`): each rule of a rule set that the
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

**Step denominator.** A cost share (``cost_share``) is a fraction of the
*median* step time: of one trace's steps for trace rules, of the ranks'
median step for cross-rank rules (:func:`share_of_step`). The median, not
the mean, so that one slow step (a checkpoint, the first step's warm-up)
does not shrink every share.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

from gpuprof.codespec import severity_for_cost
from gpuprof.errors import RuleError
from gpuprof.findings import Finding, Link, code_matches, sort_findings

__all__ = [
    "Selection",
    "RuleUnit",
    "RuleFailure",
    "run_rules",
    "finish",
    "strict_rules",
    "STRICT_ENV",
    "link_costs",
]

RuleFailure = tuple[str, BaseException]  # (rule code, what it raised)

# Set (to anything but "0") to make every rule failure raise, even where the caller
# collects them (the capture side): the test suite runs with it, so a crashing rule
# fails its tests instead of looking like "no findings".
STRICT_ENV = "GPUPROF_STRICT_RULES"


def strict_rules() -> bool:
    """True when ``GPUPROF_STRICT_RULES`` is set (the test suite sets it): a rule that raises is never collected."""
    return os.environ.get(STRICT_ENV, "").strip() not in ("", "0")


@dataclass(frozen=True)
class Selection:
    """``--select``/``--ignore`` as code prefixes (names already resolved: :func:`gpuprof.codes.resolve_selectors`).

    Empty ``select`` selects every code; ``ignore`` wins over ``select``.
    """

    select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()

    @classmethod
    def of(cls, select: Iterable[str] = (), ignore: Iterable[str] = ()) -> "Selection":
        return cls(tuple(s.strip() for s in select if s.strip()), tuple(s.strip() for s in ignore if s.strip()))

    def wants(self, code: str) -> bool:
        if self.select and not code_matches(code, self.select):
            return False
        return not (self.ignore and code_matches(code, self.ignore))


@dataclass(frozen=True)
class RuleUnit:
    """One rule ready to run: its code, its options (``info_below_share`` among them) and the call."""

    code: str
    options: Mapping[str, Any]
    check: Callable[[], Iterable[Finding]]


def run_rules(units: Iterable[RuleUnit], where: str, failures: list[RuleFailure] | None = None) -> list[Finding]:
    """Run each unit (see the module docstring, step 1); ``where`` names the input in a RuleError."""
    out: list[Finding] = []
    failed: list[RuleFailure] = []
    for unit in units:
        try:
            # list() first: a rule that raises halfway through its generator adds no partial findings
            found = list(unit.check())
        except Exception as err:  # noqa: BLE001 - raised as RuleError or handed to the caller, never dropped
            failed.append((unit.code, err))
            continue
        out += [severity_for_cost(f, unit.options) for f in found]
    if failed:
        if failures is None or strict_rules():
            raise RuleError(where, failed) from failed[0][1]
        failures.extend(failed)
    return out


def finish(findings: Iterable[Finding], selection: Selection = Selection()) -> list[Finding]:
    """A report's findings, finished once (see the module docstring, step 2)."""
    from gpuprof.codes import apply_overlaps
    from gpuprof.rules.links import link_idle_parts

    kept = [f for f in findings if selection.wants(f.code)]
    return sort_findings(link_idle_parts(link_costs(apply_overlaps(kept))))


def link_costs(findings: Sequence[Finding]) -> list[Finding]:
    """Each finding whose evidence says ``cost_counted_in`` CODE, with a ``cost_counted_in`` link to it.

    The rule that leaves a shared cost to another names it in its evidence
    (where the measurement is); the link makes that a field every renderer
    draws the same way. Idempotent.
    """
    out = []
    for f in findings:
        codes = [str(e.extra["cost_counted_in"]) for e in f.evidence if e.extra.get("cost_counted_in")]
        new = tuple(Link("cost_counted_in", c) for c in dict.fromkeys(codes) if Link("cost_counted_in", c) not in f.links)
        out.append(dataclasses.replace(f, links=f.links + new) if new else f)
    return out

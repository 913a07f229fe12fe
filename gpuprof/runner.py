"""The one rule runner (step 1 of the finding flow, :mod:`gpuprof.flow`): selection, failure policy, severity.

Every rule set runs through :func:`run_rules`: the trace rules
(:func:`gpuprof.analysis.run_rules`) and the cross-rank rules
(:func:`gpuprof.distributed.rules.run_cross_rank_rules`). See
:mod:`gpuprof.flow` for the policy. This module imports no registry, so any
rule set may use it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from gpuprof.codespec import severity_for_cost
from gpuprof.errors import RuleError
from gpuprof.findings import Finding, code_matches

__all__ = ["Selection", "RuleUnit", "RuleFailure", "run_rules", "strict_rules", "STRICT_ENV"]

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

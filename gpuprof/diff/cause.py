"""A gone finding judged on its cause's own figure, and what the two sides of a diff are to each other.

**The cause figure.** Each trace rule declares the figure that is its cause (``Rule.cause``,
:mod:`gpuprof.rules.cause`); the report keeps it for every step of every trace (``traces[].cause_per_step``).
A finding found before and not after is *fixed* only when that figure improved beyond its own per-step spread:

* ``median`` figures (most): the change of the median of the side's steps (pooled over its traces) must exceed
  the noise band ``2·sqrt(σb²/nb + σa²/na)`` with σ the robust spread (1.4826 × MAD) of each side's per-step
  values, and the Mann-Whitney rank test on the two sides' per-step values must tell them apart (p < 0.05,
  with at least 3 steps a side);
* ``mean`` figures (GP901's step time, carried by a few outlier steps): the change of the mean must exceed
  twice the standard error of the difference of the means (plain standard deviation).

Otherwise the cause is *still there*: the figure is not better beyond its noise in the other run.

**The relation of the sides.** A diff is a before/after of one program. Two other pairs are labelled, and then
no finding is called fixed: *ranks* (each side holds traces of other ranks of one job: the same world size
above 1, no rank in common, the same step ids) and *different programs* (the operators the two runs run by
name overlap little: the share of a side's operator self time, CPU and GPU, spent in operator names the other
side also runs is under ``MIN_PROGRAM_OVERLAP`` on either side, **and** so is the share of the operator names
of both sides that both run; a fix replaces some operators, by time or by name, rarely most of both).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from gpuprof.rules.cause import CauseFigure
from gpuprof.saved.types import SavedReport
from gpuprof.stats import mean_noise, noise_band

__all__ = ["MIN_PROGRAM_OVERLAP", "P_CAUSE", "CauseJudgement", "cause_of", "judge_cause", "relation"]

P_CAUSE = 0.05  # the rank test's level for a median figure's change
MIN_PROGRAM_OVERLAP = 0.5  # under this share of either side's operator time in shared names: different programs


def cause_of(code: str) -> CauseFigure | None:
    """The cause figure rule ``code`` declares, or None (no such trace rule, or it declares none)."""
    from gpuprof.rules.base import get_rule

    rule = get_rule(code)
    return rule.cause if rule is not None and rule.code == code else None


@dataclass(frozen=True)
class CauseJudgement:
    """The cause figure of a gone finding on both sides, and whether it improved beyond its noise."""

    figure: CauseFigure
    before: float
    after: float
    noise: float | None
    p_value: float | None
    steps: tuple[int, int]

    @property
    def improvement(self) -> float:
        """How much better after is (in the figure's unit; negative: worse)."""
        return (self.after - self.before) if self.figure.higher_is_better else (self.before - self.after)

    @property
    def improved(self) -> bool | None:
        """Better beyond the noise (and, for a median figure, told apart by the rank test); None: too few steps."""
        if self.noise is None:
            return None
        if self.improvement <= self.noise:
            return False
        return self.p_value is None or self.p_value < P_CAUSE if self.figure.statistic == "median" else True

    def as_row(self) -> dict[str, Any]:
        f = self.figure
        return {"figure": f.label, "unit": f.unit, "higher_is_better": f.higher_is_better, "statistic": f.statistic,
                "before": self.before, "after": self.after, "noise": self.noise, "p_value": self.p_value,
                "steps_before": self.steps[0], "steps_after": self.steps[1], "improved": self.improved}

    def text(self) -> str:
        f = self.figure

        def fmt(x: float) -> str:
            return f"{x:.3%}" if f.unit == "fraction" else f"{x / 1000:.3g} ms"

        noise = "unknown (fewer than 2 steps a side)" if self.noise is None else f"±{fmt(self.noise)}"
        p = f", rank test p={self.p_value:.2g}" if self.p_value is not None and f.statistic == "median" else ""
        what = "mean" if f.statistic == "mean" else "median"
        return f"{f.label} ({what} per step) {fmt(self.before)} → {fmt(self.after)}, noise {noise}{p}"


def judge_cause(figure: CauseFigure, before: list[float], after: list[float],
                rank_test: Callable[[list[float], list[float]], float | None]) -> CauseJudgement | None:
    """The judgement of ``figure`` from each side's per-step values (``rank_test``: the two-sided p-value of the
    rank test, :func:`gpuprof.stats.rank_test_p`); None when a side has none."""
    if not before or not after:
        return None
    nb, na = len(before), len(after)
    if figure.statistic == "mean":
        x, y = statistics.fmean(before), statistics.fmean(after)
        return CauseJudgement(figure, x, y, mean_noise(before, after), None, (nb, na))
    x, y = statistics.median(before), statistics.median(after)
    return CauseJudgement(figure, x, y, noise_band(before, after), rank_test(before, after), (nb, na))


def relation(before: SavedReport, after: SavedReport,
             ops_before: Mapping[str, float], ops_after: Mapping[str, float]) -> tuple[str, str | None]:
    """``("before_after", None)``, or ``("ranks" | "different_programs", why)`` (module docstring). ``before`` and
    ``after`` are the reports; ``ops_*`` map operator names to their self time per step on that side."""
    rb, ra = _ranks_of(before), _ranks_of(after)
    if rb is not None and ra is not None:
        (ranks_b, world_b, steps_b), (ranks_a, world_a, steps_a) = rb, ra
        if world_b == world_a and world_b > 1 and not ranks_b & ranks_a and steps_b and steps_b == steps_a:
            return "ranks", (f"the sides are other ranks of one job (ranks {_list(ranks_b)} and {_list(ranks_a)} of "
                             f"{world_b}, the same steps {_list(steps_b)}): compared as ranks, not as before and after")
    shared = set(ops_before) & set(ops_after)
    tb, ta = sum(ops_before.values()), sum(ops_after.values())
    if tb > 0 and ta > 0:
        ob = sum(v for k, v in ops_before.items() if k in shared) / tb
        oa = sum(v for k, v in ops_after.items() if k in shared) / ta
        names = len(shared) / len(set(ops_before) | set(ops_after))
        if min(ob, oa) < MIN_PROGRAM_OVERLAP and names < MIN_PROGRAM_OVERLAP:
            return "different_programs", (f"the runs run different operators: {ob:.0%} of the first's operator time "
                                          f"and {oa:.0%} of the second's is in operators both run, {names:.0%} of the "
                                          f"operator names are common (both under {MIN_PROGRAM_OVERLAP:.0%}): not a "
                                          "before and after of one program")
    return "before_after", None


def _ranks_of(doc: SavedReport) -> tuple[set[int], int, set[int]] | None:
    """(ranks, world size, step ids) of a report whose every trace names its rank and one world size, else None."""
    ranks = {t.rank for t in doc.traces}
    worlds = {t.world_size for t in doc.traces}
    if not doc.traces or None in ranks or None in worlds or len(worlds) != 1:
        return None
    return {r for r in ranks if r is not None}, next(w for w in worlds if w is not None), \
        {s for t in doc.traces for s in t.step_ids}


def _list(xs: set[int]) -> str:
    s = sorted(xs)
    return ", ".join(map(str, s)) if len(s) <= 4 else f"{s[0]}-{s[-1]} ({len(s)})"

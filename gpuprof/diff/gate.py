"""The CI gate of ``gpuprof diff --fail-on-regression PCT [--metric NAME]`` (docs/diff.md, "Regression gate").

A metric *regressed* when it got worse (higher, or lower for
``gpu_utilization``/``gpu_busy``) by more than the threshold, relative to
its before value, **and** the worsening is larger than the noise band (the
step-time noise of :mod:`gpuprof.diff.compare`, in the metric's unit). With
fewer than 2 steps on a side the noise is unknown and the threshold alone
decides (the verdict says so). A metric, noise or change that is not a finite number is not judged
(``worse_by`` null): the command line fails such a gate (exit 2), it never passes.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["parse_threshold", "judge"]


def parse_threshold(text: str) -> float:
    """The regression threshold as a fraction (docs/diff.md, "Regression gate"): ValueError for anything else.

    ``5%`` and ``5`` both mean five per cent (0.05): a bare number is read as per cent, as the option's
    name says. A bare number between 0 and 1 (``0.05``) is refused as ambiguous: it reads as 5 % to whoever
    thinks in fractions and as 0.05 % to whoever thinks in per cent, and a CI gate must not guess
    (write ``5%`` or ``0.05%``). ``0`` fails on any worsening beyond the noise.
    """
    t = text.strip()
    percent = t.endswith("%")
    try:
        value = float(t[:-1] if percent else t)
    except ValueError:
        raise ValueError(f"{text!r} is not a percentage such as 5% or 5") from None
    if not value >= 0 or value == float("inf"):
        raise ValueError(f"{text!r}: the threshold must be a finite percentage >= 0")
    if not percent and 0 < value < 1:
        raise ValueError(f"{text!r} is ambiguous: write {value * 100:g}% for {value * 100:g} per cent, "
                         f"or {value:g}% for {value:g} per cent")
    return value / 100.0


def judge(diff: dict[str, Any], metric: str, threshold: float) -> dict[str, Any]:
    """The regression verdict for ``metric`` (stored as the diff's ``regression``); KeyError for an unknown metric."""
    m = next((m for m in diff["metrics"] if m["name"] == metric), None)
    if m is None:
        raise KeyError(metric)
    before, after, noise = m["before"], m["after"], m["noise"]
    verdict: dict[str, Any] = {"metric": metric, "threshold": threshold, "before": before, "after": after,
                               "worse_by": None, "noise": noise, "regressed": False, "reason": ""}
    if before is None or after is None or before == 0:
        verdict["reason"] = f"{metric} is not measured on both sides: not judged"
        return verdict
    if not all(math.isfinite(x) for x in (before, after, 0.0 if noise is None else noise)):
        # NaN or infinity compares false with everything: it would pass any threshold
        verdict["reason"] = f"{metric} is not a finite number on both sides: not judged"
        return verdict
    worse_abs = (after - before) if m["lower_is_better"] else (before - after)
    worse = worse_abs / abs(before)
    if not math.isfinite(worse):  # a before of 1e-320 (denormal): the relative change overflows
        verdict["reason"] = f"{metric}'s change relative to {before!r} is not a finite number: not judged"
        return verdict
    verdict["worse_by"] = worse
    if worse <= threshold:
        verdict["reason"] = f"{metric} {_dir(worse)} {_pct(abs(worse))}: within the {_pct(threshold)} threshold"
        return verdict
    if noise is not None and worse_abs <= noise:
        verdict["reason"] = (f"{metric} worse by {_pct(worse)}, over the {_pct(threshold)} threshold but within the "
                             f"noise of the per-step spread ({_fmt(noise, m['unit'])})")
        return verdict
    verdict["regressed"] = True
    noise_text = "noise unknown (fewer than 2 steps on a side)" if noise is None else f"beyond the noise ({_fmt(noise, m['unit'])})"
    verdict["reason"] = f"{metric} worse by {_pct(worse)}: over the {_pct(threshold)} threshold and {noise_text}"
    return verdict


def _dir(worse: float) -> str:
    return "worse by" if worse > 0 else "better by"


def _pct(x: float) -> str:
    return f"{x * 100:.1f}%"


def _fmt(x: float, unit: str) -> str:
    if unit == "fraction":
        return f"{x * 100:.1f} points"
    from gpuprof.units import fmt_us

    return fmt_us(x)

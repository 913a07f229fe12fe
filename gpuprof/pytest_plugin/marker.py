"""``@pytest.mark.gpuprof(...)``: the limits a test's training steps must keep, checked before anything runs.

Pure: no torch, no pytest. Each argument is checked here with a one-line
error naming the key, so a misspelt limit never reads as "no limit"
(docs/pytest.md, "The marker").
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

__all__ = ["Limits", "MarkerError", "KEYS", "SEVERITIES", "parse_limits"]

#: the marker's keys, in the order docs/pytest.md lists them
KEYS = ("max_step_ms", "fail_on", "baseline", "max_regression", "metric", "steps", "select", "ignore")
SEVERITIES = ("info", "warning", "error", "never")
DEFAULT_STEPS = 5
MAX_STEPS = 1000
DEFAULT_REGRESSION = "5%"


class MarkerError(ValueError):
    """A marker argument that is not what docs/pytest.md allows (its message is the one line shown)."""


@dataclass(frozen=True)
class Limits:
    """What one test is held to. ``max_regression`` is a fraction (0.05 for 5 %); ``baseline`` is absolute."""

    max_step_ms: float | None = None
    fail_on: str = "warning"
    baseline: Path | None = None
    max_regression: float | None = None
    metric: str = "step_time"
    steps: int = DEFAULT_STEPS
    select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()

    def describe(self) -> str:
        """The limits as the marker would spell them (for the failure message)."""
        parts = []
        if self.max_step_ms is not None:
            parts.append(f"max_step_ms={self.max_step_ms:g}")
        parts.append(f"fail_on={self.fail_on!r}")
        if self.baseline is not None:
            parts.append(f"baseline={str(self.baseline)!r}")
            parts.append(f"max_regression='{(self.max_regression or 0) * 100:g}%'")
            if self.metric != "step_time":
                parts.append(f"metric={self.metric!r}")
        return ", ".join(parts)


def parse_limits(args: Sequence[object], kwargs: Mapping[str, object], test_dir: Path) -> Limits:
    """The marker's arguments as :class:`Limits`; MarkerError (one line) for anything else.

    ``baseline`` is read relative to ``test_dir`` (the test file's directory) unless absolute.
    """
    if args:
        raise MarkerError(f"takes keyword arguments only ({', '.join(KEYS)}); got {len(args)} positional")
    unknown = sorted(k for k in kwargs if k not in KEYS)
    if unknown:
        raise MarkerError(f"unknown key {unknown[0]!r} (known: {', '.join(KEYS)})")
    max_step = kwargs.get("max_step_ms")
    if max_step is not None and not (_is_number(max_step) and 0 < float(max_step) < math.inf):  # type: ignore[arg-type]
        raise MarkerError(f"max_step_ms={max_step!r}: a number of milliseconds > 0")
    fail_on = kwargs.get("fail_on", "warning")
    if not isinstance(fail_on, str) or fail_on.lower() not in SEVERITIES:
        raise MarkerError(f"fail_on={fail_on!r}: one of {', '.join(SEVERITIES)}")
    baseline = _baseline(kwargs.get("baseline"), test_dir)
    regression = _regression(kwargs.get("max_regression"), baseline is not None)
    metric = kwargs.get("metric", "step_time")
    if metric != "step_time":
        from gpuprof.diff.compare import METRICS

        if not isinstance(metric, str) or metric not in METRICS:
            raise MarkerError(f"metric={metric!r}: one of {', '.join(METRICS)}")
        if baseline is None:
            raise MarkerError("metric needs a baseline to compare with (baseline=PATH)")
    steps = kwargs.get("steps", DEFAULT_STEPS)
    if isinstance(steps, bool) or not isinstance(steps, int) or not 1 <= steps <= MAX_STEPS:
        raise MarkerError(f"steps={steps!r}: the steps recorded, an int from 1 to {MAX_STEPS}")
    return Limits(max_step_ms=float(max_step) if max_step is not None else None,  # type: ignore[arg-type]
                  fail_on=fail_on.lower(), baseline=baseline, max_regression=regression, metric=str(metric),
                  steps=steps, select=_codes("select", kwargs.get("select")),
                  ignore=_codes("ignore", kwargs.get("ignore")))


def _is_number(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _baseline(value: object, test_dir: Path) -> Path | None:
    if value is None:
        return None
    if not isinstance(value, (str, os.PathLike)) or not os.fspath(value):
        raise MarkerError(f"baseline={value!r}: a path (a report.json, a run directory or a trace)")
    path = Path(os.fspath(value))
    return path if path.is_absolute() else test_dir / path


def _regression(value: object, has_baseline: bool) -> float | None:
    if value is None:
        return _threshold(DEFAULT_REGRESSION) if has_baseline else None
    if not has_baseline:
        raise MarkerError("max_regression needs a baseline to compare with (baseline=PATH)")
    if not (isinstance(value, str) or _is_number(value)):
        raise MarkerError(f"max_regression={value!r}: a percentage such as '5%'")
    return _threshold(str(value))


def _threshold(text: str) -> float:
    from gpuprof.diff.gate import parse_threshold  # the parser of gpuprof diff --fail-on-regression: one meaning

    try:
        return parse_threshold(text)
    except ValueError as err:
        raise MarkerError(f"max_regression: {err}") from None


def _codes(key: str, value: object) -> tuple[str, ...]:
    """Codes, prefixes or names, as a list or one comma-separated string (as ``--select``)."""
    if value is None:
        return ()
    words = value.split(",") if isinstance(value, str) else value
    if not isinstance(words, (list, tuple)) or not all(isinstance(w, str) for w in words):
        raise MarkerError(f"{key}={value!r}: codes, prefixes or names (a list, or one string 'GP1,GP203')")
    from gpuprof.codes import resolve_selectors

    try:
        return tuple(resolve_selectors(words))
    except ValueError as err:
        raise MarkerError(f"{key}: {err}") from None

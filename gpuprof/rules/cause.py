"""The figure that is a rule's cause, declared on the rule beside its check (``Rule.cause``).

`gpuprof diff` calls a finding that is gone *fixed* only when the figure that is its cause improved beyond
that figure's own per-step spread (docs/diff.md, "Fixed"). So each rule says which figure that is (the
FP32 GEMM kernels' time per step for GP302, the MFU for GP307, the time the host waited for data for GP102),
as a ruff rule declares its fix: a :class:`CauseFigure` whose ``per_step`` computes the figure for each
recorded step of a trace, whether or not the rule fired there (the other run of a diff needs it most when
the finding is gone). The analysis keeps the values per trace (``traces[].cause_per_step``, by code).
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from typing import Callable, Iterable, Literal

from gpuprof.trace.metrics import TraceMetrics
from gpuprof.trace.model import Event

__all__ = ["CauseFigure", "kernels_per_step", "idle_part_per_step", "gpu_idle_per_step", "data_wait_per_step",
           "step_time_per_step"]


@dataclass(frozen=True)
class CauseFigure:
    """A rule's cause as a figure per step.

    ``label`` names it for people (``"FP32/FP64 GEMM/conv kernel time"``); ``unit`` is ``us`` (per step) or
    ``fraction``; ``higher_is_better`` says which way is an improvement (MFU: up); ``statistic`` says how a
    run's steps are summarised and compared: ``median`` (robust spread and the rank test, for figures every
    step has) or ``mean`` (plain spread, for figures carried by a few steps, such as outlier steps, which a
    median cannot see). ``per_step(metrics)`` gives one value per recorded step, or None where the trace
    cannot measure it (no steps, no GPU, an unknown peak).
    """

    label: str
    per_step: Callable[[TraceMetrics], list[float] | None]
    unit: Literal["us", "fraction"] = "us"
    higher_is_better: bool = False
    statistic: Literal["median", "mean"] = "median"

    def values(self, m: TraceMetrics) -> list[float] | None:
        """``per_step(m)``, kept only when it has one finite value per step."""
        if not m.num_steps:
            return None
        got = self.per_step(m)
        if got is None or len(got) != m.num_steps:
            return None
        out = [float(x) for x in got]
        return out if all(x == x and abs(x) != float("inf") for x in out) else None


def kernels_per_step(m: TraceMetrics, events: Iterable[Event]) -> list[float]:
    """The summed duration of ``events`` (GPU work) in each step, by the step their start falls in."""
    out = [0.0] * m.num_steps
    starts = m.step_starts
    for ev in events:
        i = bisect_right(starts, ev.ts) - 1
        if 0 <= i < len(out) and ev.ts <= m.steps[i].end:
            out[i] += ev.dur
    return out


def idle_part_per_step(part: str) -> Callable[[TraceMetrics], list[float] | None]:
    """The GPU-idle part ``part`` (docs/report-schema.md, ``idle_breakdown_us``) of each step."""

    def per_step(m: TraceMetrics) -> list[float] | None:
        return [float(s.get(part, 0.0)) for s in m.idle_per_step] if m.trace.has_gpu_activity else None

    return per_step


def gpu_idle_per_step(m: TraceMetrics) -> list[float] | None:
    """The GPU idle time of each step, all causes (the idle parts summed)."""
    return [float(sum(s.values())) for s in m.idle_per_step] if m.trace.has_gpu_activity else None


def data_wait_per_step(m: TraceMetrics) -> list[float] | None:
    """The time the step waited for its batch (``DataLoader.__next__``)."""
    return [float(x) for x in m.data_loading_per_step]


def step_time_per_step(m: TraceMetrics) -> list[float] | None:
    """The step time itself."""
    return [float(x) for x in m.step_times]

"""A run's headline figures, computed once from its saved reports (one per rank, or one per window).

``gpuprof history``, ``gpuprof diff``, the trackers (W&B, MLflow) and the TensorBoard tab all state a run's
step time, GPU utilisation, data-loading share and memory peak; they take them from :class:`RunFigures`,
so one run reads the same everywhere. Over the run's traces (every rank, every recorded window):

* **step time**: the median of all the steps pooled (a trace from before schema 1.2, which lists no step
  times, counts its median step for each of its steps); without steps in traces, the median of the capture
  sections' medians (``step_time_median_ms``);
* **GPU utilisation**: the GPUs' busy time over the step time, both summed over the traces that had GPU
  activity (each trace's busy time and step time per step times its steps). A job's utilisation is the
  share of its GPUs' time they were busy: a rank or window with more steps weighs more, and the figure
  is that of one trace holding all the steps, which a plain mean of the traces' utilisations is not;
* **data-loading share**: the time waiting for batches over the step time, summed the same way, from each
  trace's ``data_loading_share`` (schema 1.4's one definition, :mod:`gpuprof.trace.dataloading`); a report
  from before 1.4 gives its ``breakdown_us.data_loading`` instead; without either, the mean of the capture
  sections' shares;
* **memory peak**: the highest allocated peak of any device in a memory section (bytes).

A figure none of the reports gives is None, never 0.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Literal, Sequence

from gpuprof.saved.types import SavedReport, SavedTrace

__all__ = ["RunFigures", "busy_share", "steps_of"]


@dataclass(frozen=True)
class RunFigures:
    step_time_us: float | None = None
    gpu_utilization: float | None = None  # fraction
    data_loading_share: float | None = None  # fraction
    memory_peak_bytes: float | None = None

    @classmethod
    def of(cls, reports: Iterable[SavedReport]) -> RunFigures:
        """The figures of the run whose reports are ``reports`` (module docstring)."""
        reports = list(reports)
        traces = [t for r in reports for t in r.traces]
        captures = [s for r in reports for s in r.sections_of("capture")]
        figures = cls.of_traces(traces)
        steps = [v * 1000.0 for s in captures if (v := _num(s.get("step_time_median_ms"))) is not None]
        shares = [v for s in captures if (v := _num(s.get("data_loading_share"))) is not None]
        step, share = figures.step_time_us, figures.data_loading_share
        if step is None and steps:  # a capture that recorded no trace (or no step in one)
            step = statistics.median(steps)
        if share is None and shares:
            share = statistics.fmean(shares)
        peaks = [v for r in reports for s in r.sections_of("memory") for dev in s.get("devices") or []
                 if isinstance(dev, dict) and isinstance(dev.get("allocated"), dict)
                 if (v := _num(dev["allocated"].get("peak"))) is not None]
        return cls(step, figures.gpu_utilization, share, max(peaks) if peaks else None)

    @classmethod
    def of_traces(cls, traces: Sequence[SavedTrace]) -> RunFigures:
        """The step time, GPU utilisation and data-loading share over ``traces`` (module docstring)."""
        steps = steps_of(traces, stand_in="median")
        timed = [t for t in traces if t.gpu_utilization is not None]
        shared = [t for t in traces if t.data_loading_share is not None]
        if shared:
            loading = sum(t.data_loading_share * t.total_us() for t in shared if t.data_loading_share is not None)
        else:  # a report from before schema 1.4
            shared = [t for t in traces if "data_loading" in t.breakdown_us]
            loading = sum(t.breakdown_us["data_loading"] * t.num_steps for t in shared)
        loading_time = sum(t.total_us() for t in shared)
        return cls(step_time_us=statistics.median(steps) if steps else None,
                   gpu_utilization=busy_share((t.gpu_busy_us, t.step_time_mean_us, t.num_steps) for t in timed),
                   data_loading_share=loading / loading_time if loading_time > 0 else None)

    def to_dict(self) -> dict[str, float | None]:
        return asdict(self)


def busy_share(traces: Iterable[tuple[float, float, int]]) -> float | None:
    """GPU utilisation over traces given as (busy per step, mean step, steps), those with GPU activity only:
    busy time over step time, both summed (module docstring); None without step time."""
    busy = time = 0.0
    for per_step, mean, n in traces:
        busy += per_step * n
        time += mean * n
    return busy / time if time > 0 else None


def steps_of(traces: Sequence[SavedTrace], stand_in: Literal["mean", "median"] = "mean") -> list[float]:
    """Every step's time of ``traces``, pooled in order; a pre-1.2 trace, which lists none, gives its ``stand_in``
    step for each of its steps (its mean: what a per-step series sums to; its median: what a median keeps)."""
    out: list[float] = []
    for t in traces:
        out += t.step_times_us or [t.step_time_mean_us if stand_in == "mean" else t.step_time_us] * t.num_steps
    return out


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

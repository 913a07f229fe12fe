"""What an analysis returns: summaries plus findings, with a versioned JSON schema.

The JSON form (``Report.to_dict``) is a public interface: its layout is
described in ``docs/report-schema.md`` and versioned by ``SCHEMA_VERSION``.
Adding a field is a minor change (``1.x``); renaming or removing one bumps
the major number.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Annotated, Any, Protocol

import msgspec

from gpuprof.findings import Finding, Severity, sort_findings
from gpuprof.notebookhook import report_html
from gpuprof.redact import scrub
from gpuprof.trace.critpath.rows import CriticalPart, CriticalPath  # filled by trace.critpath.path; no numpy here
from gpuprof.trace.model import DeviceInfo  # defined with the trace model (the loader makes it); part of the report
from gpuprof.trace.statrows import CopyStat, KernelStat, OpStat, SyncStat  # filled by trace.stats; no numpy here
from gpuprof.trace.timelinerows import Timeline  # defined with the code that fills it (docs/views.md, "Timeline")
from gpuprof.trace.viewrows import Mfu, TraceViews  # defined with the code that fills them (docs/views.md)

__all__ = ["SCHEMA_VERSION", "MAX_TRACE_US", "StepUs", "DeviceInfo", "KernelStat", "OpStat", "CopyStat", "SyncStat",
           "TraceSummary", "CriticalPath", "CriticalPart", "Section", "JobPhase", "JobSeries", "JobSamples",
           "JobSummary", "JobWindow", "Report"]

SCHEMA_VERSION = "1.7"
MAX_TRACE_US = float(2**53)  # 285 years: no clock reads more; the trace loader leaves such events out too
# a step's duration as a saved report is read back (gpuprof.saved decodes the job with these types); one step's
# ceiling is gpuprof.saved.check's
StepUs = Annotated[float, msgspec.Meta(ge=0.0, le=MAX_TRACE_US)]


@dataclass
class TraceSummary:
    """The headline metrics of one trace. Every metric is defined in the module ``gpuprof.trace.metrics`` names."""

    path: str
    devices: list[DeviceInfo] = field(default_factory=list)
    has_gpu_activity: bool = False
    num_steps: int = 0
    step_ids: list[int] = field(default_factory=list)
    step_time_us: float = 0.0  # median step time
    step_time_mean_us: float = 0.0
    lead_in_us: float | None = None  # before the first GPU work, without step markers; excluded from the steps
    gpu_busy_us: float = 0.0  # mean per step
    gpu_utilization: float | None = None  # fraction, None without GPU activity
    breakdown_us: dict[str, float] = field(default_factory=dict)  # mean per step
    idle_breakdown_us: dict[str, float] = field(default_factory=dict)  # mean per step
    top_kernels: list[KernelStat] = field(default_factory=list)
    top_ops: list[OpStat] = field(default_factory=list)
    copies: list[CopyStat] = field(default_factory=list)
    syncs: list[SyncStat] = field(default_factory=list)
    rank: int | None = None
    world_size: int | None = None
    num_events: int = 0
    file_bytes: int = 0
    notes: list[str] = field(default_factory=list)
    step_times_us: list[float] = field(default_factory=list)  # each analysed step's time, in step order (1.2)
    views: TraceViews | None = None  # operators, kernels, modules, ranges (1.2; docs/views.md)
    # time waiting in DataLoader.__next__ / step time, the one definition (gpuprof.trace.dataloading; 1.4)
    data_loading_share: float | None = None
    mfu: Mfu | None = None  # model FLOPs utilisation of the steps and per module (docs/views.md, "MFU")
    # inside collective kernels waiting for other ranks, no compute beside: part of gpu_busy_us and of
    # breakdown_us["communication"] (gpuprof.distributed.waiting); None without collectives
    comm_wait_us: float | None = None
    comm_wait_source: str | None = None  # "ranks" (several ranks given) or "trace" (one rank's estimate)
    gpu_working_utilization: float | None = None  # (gpu_busy_us - comm_wait_us) / step_time_mean_us
    critical_path: CriticalPath | None = None  # mean per step (1.5; docs/critical-path.md)
    timeline: Timeline | None = None  # the recorded steps as lanes (1.5; docs/views.md, "Timeline")
    # per rule code, its declared cause figure for each step (gpuprof.rules.cause; 1.6; docs/diff.md, "Fixed")
    cause_per_step: dict[str, list[float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.path = scrub(os.fspath(self.path))  # a URL's credentials never reach a view (gpuprof.redact)

    def to_dict(self) -> dict[str, Any]:
        # msgspec writes a dataclass field by field, in order: the schema is the field list above
        return msgspec.to_builtins(self)  # type: ignore[no-any-return]


@dataclass
class JobPhase:
    """One phase of a watched job (``gpuprof/capture/job/phases.py`` finds them): a run of steps alike in step time.

    ``kind``: ``warmup``, ``steady``, ``slowdown``, ``contention`` (slower because other processes had the cores),
    ``eval``, ``recorded`` or ``own_work`` (steps gpuprof slowed). Steps are the loop's step indices
    (0 = the first step), ``end_step`` inclusive; the statistics are over the phase's steps.
    """

    kind: str
    start_step: int
    end_step: int
    step_time_median_us: StepUs
    steps: int = 0
    step_time_min_us: StepUs = 0.0
    step_time_p90_us: StepUs = 0.0
    step_time_max_us: StepUs = 0.0
    data_wait_share: float | None = None  # time waiting for batches / step time over the phase
    # ``contention`` phases: the training thread's time runnable but waiting for a core / the phase's time
    core_wait_share: float | None = None


@dataclass
class JobSeries:
    """The job's per-step series in compact columns, one point per ``bucket`` steps (at most a few thousand).

    Point ``i`` covers steps ``first_step[i] .. first_step[i] + bucket - 1``; a column holds the
    bucket's median (``_min``/``_max``: its extremes). A column is None where nothing measured it
    (no DataLoader seen, no CUDA).
    """

    bucket: int = 1
    first_step: list[int] = field(default_factory=list)
    step_time_us: list[StepUs] = field(default_factory=list)
    step_time_min_us: list[StepUs] = field(default_factory=list)
    step_time_max_us: list[StepUs] = field(default_factory=list)
    data_wait_us: list[float] | None = None
    cuda_allocated_mib: list[float] | None = None
    cuda_reserved_mib: list[float] | None = None
    cuda_peak_mib: list[float] | None = None
    host_rss_mib: list[float] | None = None  # the process's resident memory at the step (the last sample before)


@dataclass
class JobSamples:
    """What the watch's sampler thread read about once per ``interval_s`` (off the training thread).

    CPU figures are percentages of one core (200 = two cores busy); ``workers_*`` are the trainer's
    child processes (DataLoader workers). The ``gpu_*`` columns come from NVML (None without CUDA or
    without nvidia-ml-py); ``throttle_reasons`` is NVML's bit mask.
    """

    interval_s: float = 1.0
    step: list[int] = field(default_factory=list)  # steps completed when the sample was taken
    process_cpu_pct: list[float] = field(default_factory=list)
    workers_cpu_pct: list[float | None] = field(default_factory=list)
    # the workers' CPU demand: time on a core plus time runnable but waiting for one (Linux schedstat), so a
    # CPU-bound worker reads ~100 per worker even on a machine so busy that it gets less
    workers_demand_pct: list[float | None] = field(default_factory=list)
    workers: list[int | None] = field(default_factory=list)
    # the training thread's time on a core and its time runnable but waiting for one (Linux schedstat), % of
    # the interval; None (the columns empty) where not read: what tells a job that slowed from one that other
    # processes kept off the cores (a ``contention`` phase)
    thread_cpu_pct: list[float | None] | None = None
    thread_wait_pct: list[float | None] | None = None
    gpu_util_pct: list[float | None] | None = None
    gpu_memory_used_mib: list[float | None] | None = None
    gpu_sm_clock_mhz: list[float | None] | None = None
    gpu_power_w: list[float | None] | None = None
    gpu_throttle_reasons: list[int | None] | None = None


@dataclass
class JobWindow:
    """One window the capture recorded into a trace of its own (report.json ``job.windows``; docs/run.md)."""

    start_step: int  # its first recorded step
    steps: int
    reason: str  # "default", "anomaly" or "trigger"


@dataclass
class JobSummary:
    """The whole job as the watch saw it (report.json's top-level ``job``; docs/report-schema.md)."""

    steps: int = 0
    phases: list[JobPhase] = field(default_factory=list)
    series: JobSeries = field(default_factory=JobSeries)
    samples: JobSamples | None = None
    cores: int | None = None  # CPU cores the trainer may run on
    h2d_copy_us: float | None = None  # host-to-device copy time per step: not measured per step (docs/run.md)
    windows: list[JobWindow] = field(default_factory=list)  # the recorded windows (gpuprof.capture.job.verdict)


class Section(Protocol):
    """Any further summary (memory analysis, a capture run) that a report can carry.

    ``kind`` names it in JSON; renderers look the kind up to draw it.
    """

    kind: str

    def to_dict(self) -> dict[str, Any]: ...


@dataclass
class Report:
    """The result of ``gpuprof analyze`` / ``gpuprof memory`` / a capture run."""

    command: str  # "analyze", "memory", "memory-diff", "capture"
    inputs: list[str] = field(default_factory=list)
    traces: list[TraceSummary] = field(default_factory=list)
    sections: list[Any] = field(default_factory=list)  # objects following the Section protocol
    findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # codes of rules that raised (capture side only; `gpuprof analyze` exits 3 instead):
    # their findings are unknown, so an empty ``findings`` does not mean "nothing wrong"
    failed_rules: list[str] = field(default_factory=list)
    # traces whose analysis failed on a cluster worker even after a retry (``--dask``): left out of
    # the report, which says so in a note; a cross-rank section then covers the other ranks only
    failed_ranks: list[str] = field(default_factory=list)
    # the whole job as the capture's watch saw it (1.3; None for a report of traces alone)
    job: JobSummary | None = None

    def __post_init__(self) -> None:
        # the one place a report's input names are made: every renderer shows them, so a URL's
        # credentials and secret query values are masked here (gpuprof.redact)
        self.inputs = [scrub(os.fspath(p)) for p in self.inputs]
        self.failed_ranks = [scrub(p) for p in self.failed_ranks]

    def _repr_html_(self) -> str | None:
        """The report as an inert HTML fragment, shown by Jupyter for a cell's value (None: plain text)."""
        return report_html(self)  # gpuprof.notebookhook: the renderer lives above this layer

    def sorted_findings(self) -> list[Finding]:
        return sort_findings(self.findings)

    def max_severity(self) -> Severity | None:
        if not self.findings:
            return None
        return max((f.severity for f in self.findings), key=lambda s: s.rank)

    def count_at_or_above(self, bar: Severity) -> int:
        return sum(1 for f in self.findings if f.severity.rank >= bar.rank)

    def to_dict(self) -> dict[str, Any]:
        from gpuprof.version import __version__

        # msgspec writes the summaries and findings (dataclasses) field by field, in order;
        # sections keep their own to_dict (their layout is theirs), led by their kind
        return msgspec.to_builtins(  # type: ignore[no-any-return]
            {
                "schema_version": SCHEMA_VERSION,
                "tool": {"name": "gpuprof", "version": __version__},
                "command": self.command,
                "inputs": self.inputs,
                "traces": self.traces,
                "sections": [{"kind": s.kind, **s.to_dict()} for s in self.sections],
                "findings": self.sorted_findings(),
                "notes": self.notes,
                "failed_rules": self.failed_rules,
                "failed_ranks": self.failed_ranks,
                "job": self.job,
            }
        )

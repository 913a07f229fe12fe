"""The frozen run object: what the end of a window or of the run needs from the live session.

The session (:mod:`gpuprof.capture.session`) copies it on the driving thread
(:meth:`Profiler.facts`), where it may touch torch and the state the loop
keeps changing; from then on the end of the window or of the run
(:mod:`gpuprof.capture.end`) reads files and this object only, so it can run
on a background thread and never needs the ``Profiler``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from gpuprof.findings import Finding, SourceLocation

if TYPE_CHECKING:  # pragma: no cover - annotations only
    from gpuprof.capture.config import CaptureConfig
    from gpuprof.capture.job.phases import WatchData
    from gpuprof.capture.job.windows import PlannedWindow
    from gpuprof.capture.leaklines import StatementSite
    from gpuprof.capture.settings import TorchSettings

#: the last window's walk for GP640's statement (``wanted``: a memory growth was found; else nothing is walked)
LeakLines = Callable[[bool], "tuple[StatementSite, ...]"]
LEAK_STATEMENTS = "leak statements"  # the guard's name for that walk

__all__ = ["CaptureSection", "RunFacts", "TraceFile"]


@dataclass(frozen=True)
class TraceFile:
    """One trace written by the session, with the global steps it recorded."""

    path: Path  # its ProfilerStep#N are the loop's step numbers
    first_step: int
    last_step: int
    snapshot: Path | None = None
    window: PlannedWindow | None = None  # a window asked for after the default one (None: the default window)

    @property
    def reason(self) -> str:
        """Why this window was recorded: ``default``, ``anomaly`` or ``trigger`` (report.json ``job.windows``)."""
        return self.window.reason if self.window is not None else "default"

    def __repr__(self) -> str:
        return f"TraceFile({str(self.path)!r}, steps {self.first_step}-{self.last_step})"


@dataclass
class CaptureSection:
    """What the capture did: where its files are and the per-step numbers it measured (a report section).

    Each report gets its own copy (its ``failures`` are that report's).
    """

    kind: str = "capture"
    logdir: str = ""
    run_dir: str = ""
    out_dir: str = ""
    worker: str = ""
    rank: int | None = None
    steps: int = 0
    step_time_median_ms: float | None = None
    data_loading_share: float | None = None
    recorded_steps: list[list[int]] = field(default_factory=list)  # [first, last] per trace
    traces: list[str] = field(default_factory=list)
    memory_snapshots: list[str] = field(default_factory=list)
    oom_files: list[str] = field(default_factory=list)
    tensorboard_dir: str | None = None
    memory_series: str | None = None  # "cuda" or "host_rss"
    memory_first_mib: float | None = None
    memory_last_mib: float | None = None
    failures: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, object]:
        d = dict(self.__dict__)
        d.pop("kind")
        return d


@dataclass(frozen=True)
class RunFacts:
    """Everything the report of a window or of the run reads from the live session, copied once.

    Built on the driving thread by the session; read on any thread by
    :mod:`gpuprof.capture.end`. ``traces`` are the trace files on disk,
    ``runtime`` the GP6xx findings measured in the process, ``section`` the
    capture section (copied into each report), ``files`` what the capture
    wrote besides the traces and reports (memory snapshots, OOM dumps).
    """

    steps: int
    traces: tuple[TraceFile, ...]
    runtime: tuple[Finding, ...]
    section: CaptureSection
    notes: tuple[str, ...]
    config: CaptureConfig
    settings: TorchSettings | None = None  # torch settings read after the first step
    roots_have_conv: bool = False
    shapes_stable: bool | None = None
    tensorboard: bool = False  # a TensorBoard writer is open (the traces' GPU utilisation goes there)
    cuda: bool = False  # the capture measures CUDA (else the host)
    location: SourceLocation | None = None  # the user's loop, for findings without a better place
    report_json: str | None = None  # where report.json/report.md go; None without an output directory
    report_md: str | None = None
    out_dir: str | None = None
    run_dir: str | None = None
    worker: str = ""
    rank: int | None = None
    distributed: bool = False  # one rank of several (the final report gathers the cross-rank view)
    files: tuple[str, ...] = ()  # memory snapshots and out-of-memory dumps written so far
    # the user statements whose allocations outlived the last recorded window (GP640's line; end of run only)
    statements: tuple[StatementSite, ...] = ()
    watch: WatchData | None = None  # the whole job's numbers (report.json's ``job``); None with watch=False

    @property
    def trace_paths(self) -> list[str]:
        return [str(t.path) for t in self.traces]

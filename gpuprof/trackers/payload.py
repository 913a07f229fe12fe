"""What gpuprof sends to a tracker, built once from the report's JSON document (docs/report-schema.md).

The same :class:`Publication` goes to every tracker, so W&B and MLflow hold the same table and figures:

* ``findings``: one row per finding, most expensive first (:data:`FINDING_COLUMNS`);
* ``windows``: the headline figures of each recorded step window (one per trace), at the window's last
  step (:data:`METRICS`); a figure the report does not know is left out, never sent as 0;
* ``artefacts``: files to attach (report.md, report.json, the HTML page, the traces).

It reads the JSON form (what report.json holds) through the saved-report reader (:mod:`gpuprof.saved`), not the
live :class:`~gpuprof.report.Report`, so a capture, ``gpuprof analyze`` and a saved report give the same
publication, with the figures ``gpuprof history`` and ``gpuprof diff`` state (:class:`~gpuprof.saved.RunFigures`).
"""

from __future__ import annotations

import math
import os
import stat
from dataclasses import dataclass, field
from typing import Any, Iterable

from msgspec import UNSET

from gpuprof.saved.check import saved_report
from gpuprof.saved.figures import RunFigures
from gpuprof.saved.types import SavedReport, SavedTrace, given

__all__ = ["FINDING_COLUMNS", "METRICS", "Artefact", "FindingRow", "Publication", "Window", "publication",
           "window_figures"]

FINDING_COLUMNS = ("code", "severity", "title", "cost_ms_per_step", "cost_share", "location", "message")
# metric key (as sent, under the "gpuprof/" prefix) -> what it is
METRICS: dict[str, str] = {
    "step_time_ms": "median step time of the window (ms)",
    "gpu_utilization": "share of the step time a GPU kernel ran (fraction)",
    "data_loading_share": "share of the step time spent loading data (fraction)",
    "mfu": "model FLOPs utilisation: the kernels' FLOPs at the device's peak over the step time (fraction; "
           "sent when the kernels with known FLOPs run at least half the kernel time)",
    "memory_peak_mib": "highest allocated device memory of the run (MiB)",
    "findings": "findings in the report",
    "findings_at_warning": "findings at warning or error (what --fail-on warning gates on)",
}
PREFIX = "gpuprof/"
# a bigger file is not attached (a note says so): trackers copy every artefact, and multi-GB traces would
# fill the user's quota; GPUPROF_TRACKER_MAX_MB raises or lowers the bound
MAX_ARTEFACT_MB = 512
# MFU is sent when the kernels whose FLOPs are known run at least this share of the kernel time
MFU_MIN_COVERAGE = 0.5


@dataclass(frozen=True)
class FindingRow:
    code: str
    severity: str
    title: str
    cost_ms_per_step: float | None
    cost_share: float | None
    location: str | None  # file:line of the user's source, when known
    message: str

    def cells(self) -> list[str | float | None]:
        return [getattr(self, c) for c in FINDING_COLUMNS]


@dataclass(frozen=True)
class Window:
    """The figures of one recorded step window, logged at ``step`` (its last step)."""

    step: int
    metrics: dict[str, float]


@dataclass(frozen=True)
class Artefact:
    path: str  # a local file
    kind: str  # "report", "html", "trace"


@dataclass
class Publication:
    run_name: str
    findings: list[FindingRow] = field(default_factory=list)
    windows: list[Window] = field(default_factory=list)
    artefacts: list[Artefact] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what was left out, and why
    # tracker -> a run to log into when none is active by then (the one active when a capture started)
    run_ids: dict[str, str] = field(default_factory=dict)

    def table(self) -> dict[str, list[Any]]:
        """The findings as columns (MLflow's ``log_table``, a pandas-free form of the same table)."""
        return {c: [getattr(r, c) for r in self.findings] for c in FINDING_COLUMNS}


def _title(code: str, name: str) -> str:
    from gpuprof.codes import get_spec

    try:
        spec = get_spec(code)
    except ValueError:
        spec = None
    return spec.title if spec is not None else name


def finding_rows(report: SavedReport) -> list[FindingRow]:
    return [FindingRow(code=f.code, severity="" if f.severity is UNSET else f.severity, title=_title(f.code, given(f.name)),
                       cost_ms_per_step=None if f.cost_us_per_step is None else round(f.cost_us_per_step / 1000.0, 4),
                       cost_share=f.cost_share, location=f.where(), message=given(f.message))
            for f in report.findings]


def trace_mfu(trace: SavedTrace) -> float | None:
    """MFU of one trace: the time its kernels would take at the device's peak (each kernel row's
    ``total_us x mfu``) over the steps' time (``num_steps x step_time_mean_us``).

    Only kernels whose FLOPs and peak are known count, so it is a lower bound; None (not known) unless
    those kernels run at least :data:`MFU_MIN_COVERAGE` of the trace's kernel time: a figure over a few
    GEMMs of a convolutional network would read as a near-zero MFU that the run does not have.
    """
    views = trace.views
    if views is None or not trace.total_us():
        return None
    known = [(k.total_us, k.mfu) for k in views.kernels if k.mfu is not None]
    total = views.kernel_total_us
    if not known or not total or sum(t for t, _ in known) < MFU_MIN_COVERAGE * total:
        return None
    return sum(t * m for t, m in known) / trace.total_us()


def window_figures(traces: list[SavedTrace]) -> dict[str, float]:
    """The headline figures of one recorded window (its traces: one per rank), the run's figures' definitions
    (:class:`~gpuprof.saved.RunFigures`); unknown ones left out. MFU: the traces' kernel time at peak over
    their step time."""
    figures = RunFigures.of_traces(traces)
    out = {"step_time_ms": None if not figures.step_time_us else figures.step_time_us / 1000.0,
           "gpu_utilization": figures.gpu_utilization, "data_loading_share": figures.data_loading_share}
    mfu = [(m, t.total_us()) for t in traces if (m := trace_mfu(t)) is not None]
    if mfu:
        out["mfu"] = sum(m * w for m, w in mfu) / sum(w for _, w in mfu)
    return {k: v for k, v in out.items() if v is not None}


def windows(doc: dict[str, Any] | SavedReport) -> list[Window]:
    """One :class:`Window` per recorded window, in step order; the run's figures (memory peak, findings counts)
    at the last. Traces that end at the same step (the ranks of one window) are one window.

    A report without traces (a capture that recorded none) gives one window from its capture section.
    """
    report = doc if isinstance(doc, SavedReport) else saved_report(doc)
    by_step: dict[int, list[SavedTrace]] = {}
    for i, t in enumerate(report.traces):
        by_step.setdefault(max(t.step_ids, default=i), []).append(t)
    out = [Window(step=step, metrics=window_figures(traces)) for step, traces in by_step.items()]
    run = RunFigures.of([report])
    if not out:
        for sec in report.sections_of("capture")[:1]:
            figures = {"step_time_ms": None if run.step_time_us is None else run.step_time_us / 1000.0,
                       "data_loading_share": run.data_loading_share}
            steps = sec.get("steps")
            out.append(Window(step=steps if isinstance(steps, int) and not isinstance(steps, bool) else 0,
                              metrics={k: v for k, v in figures.items() if v is not None}))
    if not out:
        out.append(Window(step=0, metrics={}))
    out.sort(key=lambda w: w.step)
    run_wide: dict[str, float] = {}
    if run.memory_peak_bytes is not None:
        run_wide["memory_peak_mib"] = run.memory_peak_bytes / 2**20
    run_wide["findings"] = float(len(report.findings))
    # counts, not a summed cost: GP101's cost (GPU idle, all causes) holds the time other findings explain
    run_wide["findings_at_warning"] = float(sum(f.severity in ("warning", "error") for f in report.findings))
    out[-1] = Window(step=out[-1].step, metrics={**out[-1].metrics, **run_wide})
    return out


def publication(doc: dict[str, Any], run_name: str, artefacts: Iterable[Artefact] = ()) -> Publication:
    """The :class:`Publication` of one report document (read as a saved report is: :class:`ReportProblem` when a
    value does not fit the schema); artefacts that are not regular files are left out."""
    report = saved_report(doc)
    pub = Publication(run_name=run_name, findings=finding_rows(report), windows=windows(report))
    limit = max_artefact_bytes()
    for a in artefacts:
        name = os.path.basename(a.path)
        try:
            st = os.lstat(a.path)
        except OSError:
            pub.notes.append(f"{a.kind} {name} not attached: it is gone")
            continue
        if not stat.S_ISREG(st.st_mode):  # a link, a FIFO, a directory: never followed or opened
            pub.notes.append(f"{a.kind} {name} not attached: not a regular file")
        elif st.st_size > limit:
            pub.notes.append(f"{a.kind} {name} not attached: {st.st_size / 2**20:.0f} MiB, over the "
                             f"{limit / 2**20:.0f} MiB bound (GPUPROF_TRACKER_MAX_MB)")
        else:
            pub.artefacts.append(a)
    return pub


def max_artefact_bytes() -> int:
    """The largest file attached: GPUPROF_TRACKER_MAX_MB (MiB) when it is a number >= 0, else :data:`MAX_ARTEFACT_MB`."""
    raw = os.environ.get("GPUPROF_TRACKER_MAX_MB", "")
    try:
        mb = float(raw) if raw.strip() else MAX_ARTEFACT_MB
    except ValueError:
        mb = MAX_ARTEFACT_MB
    return int(mb * 2**20) if math.isfinite(mb) and mb >= 0 else MAX_ARTEFACT_MB * 2**20

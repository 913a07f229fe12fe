"""What gpuprof sends to a tracker, built once from the report's JSON document (docs/report-schema.md).

The same :class:`Publication` goes to every tracker, so W&B and MLflow hold the same table and figures:

* ``findings``: one row per finding, most expensive first (:data:`FINDING_COLUMNS`);
* ``windows``: the headline figures of each recorded step window (one per trace), at the window's last
  step (:data:`METRICS`); a figure the report does not know is left out, never sent as 0;
* ``artefacts``: files to attach (report.md, report.json, the HTML page, the traces).

It reads the JSON form (what report.json holds), not the live :class:`~gpuprof.report.Report`, so a capture,
``gpuprof analyze`` and a saved report give the same publication.
"""

from __future__ import annotations

import math
import os
import stat
import statistics
from dataclasses import dataclass, field
from typing import Any, Iterable

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


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v) if math.isfinite(v) else None


def _title(code: str, name: str) -> str:
    from gpuprof.codes import get_spec

    try:
        spec = get_spec(code)
    except ValueError:
        spec = None
    return spec.title if spec is not None else name


def finding_rows(doc: dict[str, Any]) -> list[FindingRow]:
    rows = []
    for f in doc.get("findings") or []:
        if not isinstance(f, dict):
            continue
        code, name = str(f.get("code", "")), str(f.get("name", ""))
        loc = f.get("location") if isinstance(f.get("location"), dict) else None
        where = None
        if loc and isinstance(loc.get("file"), str):
            line = loc.get("line")
            where = f"{loc['file']}:{line}" if isinstance(line, int) and not isinstance(line, bool) else loc["file"]
        cost = _num(f.get("cost_us_per_step"))
        rows.append(FindingRow(code=code, severity=str(f.get("severity", "")), title=_title(code, name),
                               cost_ms_per_step=None if cost is None else round(cost / 1000.0, 4),
                               cost_share=_num(f.get("cost_share")), location=where,
                               message=str(f.get("message", ""))))
    return rows


def trace_mfu(trace: dict[str, Any]) -> float | None:
    """MFU of one trace: the time its kernels would take at the device's peak (each kernel row's
    ``total_us x mfu``) over the steps' time (``num_steps x step_time_mean_us``).

    Only kernels whose FLOPs and peak are known count, so it is a lower bound; None (not known) unless
    those kernels run at least :data:`MFU_MIN_COVERAGE` of the trace's kernel time: a figure over a few
    GEMMs of a convolutional network would read as a near-zero MFU that the run does not have.
    """
    views = trace.get("views")
    steps, mean = _num(trace.get("num_steps")), _num(trace.get("step_time_mean_us"))
    if not isinstance(views, dict) or not steps or not mean:
        return None
    known = [(t, m) for k in views.get("kernels") or [] if isinstance(k, dict)
             if (t := _num(k.get("total_us"))) is not None and (m := _num(k.get("mfu"))) is not None]
    total = _num(views.get("kernel_total_us"))
    if not known or not total or sum(t for t, _ in known) < MFU_MIN_COVERAGE * total:
        return None
    return sum(t * m for t, m in known) / (steps * mean)


def window_figures(trace: dict[str, Any]) -> dict[str, float]:
    """The headline figures of one trace (one recorded window); unknown ones left out."""
    out: dict[str, float] = {}
    step = _num(trace.get("step_time_us"))
    if step is not None and step > 0:
        out["step_time_ms"] = step / 1000.0
    util = _num(trace.get("gpu_utilization"))
    if util is not None:
        out["gpu_utilization"] = util
    share = _num(trace.get("data_loading_share"))  # schema 1.4; an older report has no such figure
    if share is not None:
        out["data_loading_share"] = share
    mfu = trace_mfu(trace)
    if mfu is not None:
        out["mfu"] = mfu
    return out


def _mean(figures: list[dict[str, float]]) -> dict[str, float]:
    keys = dict.fromkeys(k for f in figures for k in f)
    return {k: statistics.fmean(f[k] for f in figures if k in f) for k in keys}


def _last_step(trace: dict[str, Any], fallback: int) -> int:
    ids = [int(s) for s in trace.get("step_ids") or [] if isinstance(s, int) and not isinstance(s, bool)]
    return max(ids) if ids else fallback


def _sections(doc: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [s for s in doc.get("sections") or [] if isinstance(s, dict) and s.get("kind") == kind]


def _memory_peak(doc: dict[str, Any]) -> float | None:
    peaks = [v for s in _sections(doc, "memory") for dev in s.get("devices") or [] if isinstance(dev, dict)
             if isinstance(dev.get("allocated"), dict) and (v := _num(dev["allocated"].get("peak"))) is not None]
    return max(peaks) / 2**20 if peaks else None


def windows(doc: dict[str, Any]) -> list[Window]:
    """One :class:`Window` per recorded window, in step order; the run's figures (memory peak, findings counts)
    at the last. Traces that end at the same step (the ranks of one window) are one window: their figures' mean.

    A report without traces (a capture that recorded none) gives one window from its capture section.
    """
    traces = [t for t in doc.get("traces") or [] if isinstance(t, dict)]
    by_step: dict[int, list[dict[str, float]]] = {}
    for i, t in enumerate(traces):
        by_step.setdefault(_last_step(t, i), []).append(window_figures(t))
    # the ranks of one window (a distributed job's traces end at the same step): one window, their mean
    out = [Window(step=step, metrics=_mean(figs)) for step, figs in by_step.items()]
    if not out:
        for sec in _sections(doc, "capture")[:1]:
            figures = {}
            if (ms := _num(sec.get("step_time_median_ms"))) is not None:
                figures["step_time_ms"] = ms
            if (share := _num(sec.get("data_loading_share"))) is not None:
                figures["data_loading_share"] = share
            steps = _num(sec.get("steps"))
            out.append(Window(step=int(steps) if steps else 0, metrics=figures))
    if not out:
        out.append(Window(step=0, metrics={}))
    out.sort(key=lambda w: w.step)
    last = out[-1]
    run_wide: dict[str, float] = {}
    peak = _memory_peak(doc)
    if peak is not None:
        run_wide["memory_peak_mib"] = peak
    findings = [f for f in doc.get("findings") or [] if isinstance(f, dict)]
    run_wide["findings"] = float(len(findings))
    # counts, not a summed cost: GP101's cost (GPU idle, all causes) holds the time other findings explain
    run_wide["findings_at_warning"] = float(sum(f.get("severity") in ("warning", "error") for f in findings))
    out[-1] = Window(step=last.step, metrics={**last.metrics, **run_wide})
    return out


def publication(doc: dict[str, Any], run_name: str, artefacts: Iterable[Artefact] = ()) -> Publication:
    """The :class:`Publication` of one report document; artefacts that are not regular files are left out."""
    pub = Publication(run_name=run_name, findings=finding_rows(doc), windows=windows(doc))
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

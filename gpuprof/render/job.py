"""The job's words: its phases and CPU figures as every view shows them (terminal, markdown, the capture's summary).

One function per shape (rows of a table, the summary's lines), so a phase's
figures read the same everywhere. The data is report.json's ``job``
(:class:`gpuprof.report.JobSummary`).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from gpuprof.render.safe import one_line, shorten
from gpuprof.report import JobPhase, JobSummary
from gpuprof.units import fmt_pct, fmt_us

__all__ = ["PHASE_HEADERS", "MAX_PHASES_SHOWN", "phase_rows", "job_lines", "reference_phase", "cpu_line",
           "shown_phases"]

PHASE_HEADERS = ("phase", "steps", "count", "median step", "p90", "vs steady", "data wait")
MAX_PHASES_SHOWN = 12  # the views show the first and last phases beyond this; report.json holds all


def reference_phase(job: JobSummary) -> JobPhase | None:
    """The first steady phase: what a slowdown is measured against."""
    return next((p for p in job.phases if p.kind == "steady"), None)


def _kind(p: JobPhase) -> str:
    """The phase's kind, safe to print (a saved report may hold anything there)."""
    return shorten(one_line(p.kind), 24)


def _ratio(p: JobPhase, ref: JobPhase | None) -> str:
    if ref is None or p is ref or ref.step_time_median_us <= 0:
        return "-"
    r = p.step_time_median_us / ref.step_time_median_us
    return f"{r:.2f}x"


def shown_phases(phases: Sequence[JobPhase]) -> tuple[list[JobPhase], int]:
    """The phases a view lists (the first and last ones of a long list) and how many are left out."""
    if len(phases) <= MAX_PHASES_SHOWN:
        return list(phases), 0
    head = MAX_PHASES_SHOWN - 2
    return list(phases[:head]) + list(phases[-2:]), len(phases) - MAX_PHASES_SHOWN


def phase_rows(job: JobSummary) -> tuple[list[tuple[str, str, str, str, str, str, str]], int]:
    """One row per shown phase (:data:`PHASE_HEADERS`), and the number of phases left out."""
    ref = reference_phase(job)
    shown, left = shown_phases(job.phases)
    rows = [(_kind(p), f"{p.start_step}-{p.end_step}", str(p.steps), fmt_us(p.step_time_median_us),
             fmt_us(p.step_time_p90_us), _ratio(p, ref),
             fmt_pct(p.data_wait_share) if p.data_wait_share is not None else "-") for p in shown]
    return rows, left


def cpu_line(job: JobSummary) -> str | None:
    """The sampler's CPU figures in one line (medians over the samples), or None without samples."""
    s = job.samples
    if s is None or not s.process_cpu_pct:
        return None
    text = f"CPU (median of {len(s.process_cpu_pct)} samples): trainer {statistics.median(s.process_cpu_pct):.0f}%"
    workers = [w for w in s.workers if w is not None]
    wpct = [w for w in s.workers_cpu_pct if w is not None]
    if workers and wpct:
        text += f", {max(workers)} worker process{'es' if max(workers) != 1 else ''} {statistics.median(wpct):.0f}% in all"
    if job.cores:
        text += f", of {job.cores * 100}% ({job.cores} cores)"
    gpu = [u for u in (s.gpu_util_pct or []) if u is not None]
    if gpu:
        text += f"; GPU busy {statistics.median(gpu):.0f}% (NVML)"
    return text


def job_lines(job: JobSummary) -> list[str]:
    """The job in a few lines: steps watched, each phase with its median step time, the CPU figures."""
    ref = reference_phase(job)
    shown, left = shown_phases(job.phases)
    parts = []
    for p in shown:
        extra = f", {_ratio(p, ref)} steady" if p.kind in ("slowdown", "contention") else ""
        if p.kind == "contention" and p.core_wait_share is not None:
            extra += f", waiting for a core {fmt_pct(p.core_wait_share)}"
        parts.append(f"{_kind(p)} {p.start_step}-{p.end_step} ({fmt_us(p.step_time_median_us)}{extra})")
    if left:
        parts.insert(len(shown) - 2, f"... {left} more")
    lines = [f"watched {job.steps} step{'s' if job.steps != 1 else ''}: " + ", ".join(parts)]
    cpu = cpu_line(job)
    if cpu is not None:
        lines.append(cpu)
    return lines

"""The analysis pipeline: files → trace model → metrics → rules → report.

``analyze(path)`` is what ``gpuprof analyze`` and the capture side call. It
needs no torch and no GPU.
"""

from __future__ import annotations

import gc
import os
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from gpuprof.errors import InputError
from gpuprof.findings import Finding, filter_findings, sort_findings
from gpuprof.report import Report, TraceSummary
from gpuprof.rules.base import Rule, RuleContext, all_rules
from gpuprof.trace.load import find_traces, load_trace
from gpuprof.trace.metrics import TraceMetrics, compute_metrics
from gpuprof.trace.model import Trace

__all__ = ["analyze", "analyze_trace", "run_rules"]

ProgressFactory = Callable[[Path], "Callable[[int, int], None] | None"]


def run_rules(
    trace: Trace,
    metrics: TraceMetrics,
    options: Mapping[str, Mapping[str, Any]] | None = None,
    select: Iterable[str] = (),
    ignore: Iterable[str] = (),
    notes: list[str] | None = None,
) -> list[Finding]:
    """Run every registered rule (narrowed by ``select``/``ignore`` code prefixes).

    A rule that raises is reported in ``notes`` and skipped, so one broken rule
    never hides the others' findings.
    """
    from gpuprof.findings import code_matches

    select = [s for s in select if s]
    ignore = [s for s in ignore if s]
    options = options or {}
    findings: list[Finding] = []
    for rule_cls in all_rules():
        if select and not code_matches(rule_cls.code, select):
            continue
        if ignore and code_matches(rule_cls.code, ignore):
            continue
        opts = {**rule_cls.defaults(), **dict(options.get(rule_cls.code, {}))}
        rule: Rule = rule_cls()
        try:
            findings.extend(rule.check(RuleContext(trace, metrics, opts)))
        except Exception as err:  # noqa: BLE001 - reported in the notes, never silent
            if os.environ.get("GPUPROF_DEBUG"):
                raise
            if notes is not None:
                notes.append(f"rule {rule_cls.code} failed on {trace.path}: {type(err).__name__}: {err}")
    return findings


def analyze_trace(
    trace: Trace,
    options: Mapping[str, Mapping[str, Any]] | None = None,
    select: Iterable[str] = (),
    ignore: Iterable[str] = (),
) -> tuple[TraceSummary, list[Finding]]:
    """Metrics and findings of one loaded trace."""
    metrics = compute_metrics(trace)
    summary = metrics.summary()
    notes: list[str] = []
    findings = run_rules(trace, metrics, options, select, ignore, notes)
    summary.notes.extend(notes)
    if not metrics.has_step_markers and metrics.steps:
        summary.notes.append("no ProfilerStep# markers: the whole trace is treated as one step")
    return summary, sort_findings(findings)


def analyze(
    path: str | os.PathLike[str],
    *,
    select: Iterable[str] = (),
    ignore: Iterable[str] = (),
    options: Mapping[str, Mapping[str, Any]] | None = None,
    progress: ProgressFactory | None = None,
) -> Report:
    """Analyse a trace file, or every trace under a directory, into one Report.

    Raises :class:`gpuprof.errors.InputError` for unusable input.
    """
    # The analysis allocates millions of short tuples and no reference cycles worth
    # collecting; the cyclic GC's repeated full passes over them cost ~10% of the run.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _analyze(path, list(select), list(ignore), options, progress)
    finally:
        if gc_was_enabled:
            gc.enable()


def _analyze(
    path: str | os.PathLike[str],
    select: list[str],
    ignore: list[str],
    options: Mapping[str, Mapping[str, Any]] | None,
    progress: ProgressFactory | None,
) -> Report:
    files = find_traces(path)
    report = Report(command="analyze", inputs=[os.fspath(path)])
    errors: list[InputError] = []
    for f in files:
        cb = progress(f) if progress is not None else None
        try:
            trace = load_trace(f, progress=cb)
        except InputError as err:
            if len(files) == 1:
                raise
            # In a directory, one unreadable file is skipped (and said), not fatal.
            errors.append(err)
            report.notes.append(f"skipped {err}")
            continue
        summary, findings = analyze_trace(trace, options, select, ignore)
        del trace  # only the summary and findings outlive the trace
        report.traces.append(summary)
        report.findings.extend(findings)
    if not report.traces:
        raise InputError(path, f"no readable trace ({len(errors)} files failed; first: {errors[0].problem})")
    report.findings = sort_findings(filter_findings(report.findings, select, ignore))
    return report

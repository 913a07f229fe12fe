"""The capture's words: the printed summary, the TensorBoard findings text, the report's capture section.

Every name that reaches the terminal goes through :func:`gpuprof.render.safe.visible`
/ :func:`~gpuprof.render.safe.one_line`, every one in markdown through
:func:`~gpuprof.render.markdown.md_escape` / ``md_code``: control characters
and markup in a run, module or file name are shown, never obeyed.
"""

from __future__ import annotations

import os
import shlex
from typing import Protocol

from gpuprof.capture.run import CaptureSection
from gpuprof.findings import Finding, Severity, sort_findings
from gpuprof.render.format import fmt_cost, linked_message
from gpuprof.render.safe import one_line, visible
from gpuprof.render.sections import register_section
from gpuprof.report import Report
from gpuprof.units import fmt_us

__all__ = ["capture_section", "final_line", "finding_lines", "findings_markdown", "no_steps_text", "short_report"]


class SummaryFacts(Protocol):
    """What :func:`short_report` reads besides the report (a :class:`~gpuprof.capture.run.RunFacts`)."""

    @property
    def steps(self) -> int: ...

    @property
    def report_md(self) -> str | None: ...


def _section_markdown(sec: CaptureSection) -> str:
    # paths hold the worker name (host name, user-set) and may hold anything: code spans, visible controls
    from gpuprof.render.markdown import md_code  # here: the end-of-run card reads this module without numpy
    from gpuprof.render.tbtext import capture_facts

    lines = ["## Capture", "", f"- run directory: {md_code(sec.run_dir)}"]
    if sec.tensorboard_dir:
        lines.append(f"- TensorBoard: {md_code('tensorboard --logdir ' + shlex.quote(sec.tensorboard_dir))}")
    lines += capture_facts(sec, None)
    return "\n".join(lines) + "\n"


register_section("capture", markdown=_section_markdown)


def capture_section(report: Report) -> CaptureSection | None:
    """The report's capture section, if it has one."""
    return next((s for s in report.sections if isinstance(s, CaptureSection)), None)


def no_steps_text(batches: int) -> str:
    return (f"the DataLoader monitor saw {batches} batch{'es' if batches != 1 else ''} but no step was marked, so "
            "nothing was recorded or checked: call prof.step() once per training iteration (or decorate the "
            "train-step function with @gpuprof.profile_step)")


def states_cost(f: Finding) -> bool:
    """True when the finding's message already gives its cost (a trace rule's ``; cost: ...`` ending, or a
    figure such as GP601's ``(1992.80 ms/step)``): the summary then does not repeat it."""
    if f.cost_us_per_step is None:
        return False
    ms = f.cost_us_per_step / 1000
    return "; cost: " in f.message or f"{ms:.2f} ms/step" in f.message or f"{fmt_us(f.cost_us_per_step)}/step" in f.message


def _cost_suffix(f: Finding) -> str:
    """`` cost 12.3 ms/step (18.0% of step)`` after a finding's message (the figure every view shows,
    :func:`gpuprof.render.format.fmt_cost`), unless the message states it already."""
    if f.cost_us_per_step is None or states_cost(f):
        return ""
    return f" cost {fmt_cost(f)}"


def findings_markdown(report: Report) -> str:
    """The findings and the run facts for TensorBoard's Text tab (:mod:`gpuprof.render.tbtext`)."""
    from gpuprof.render.tbtext import findings_text

    return findings_text(report)


def short_report(report: Report, facts: SummaryFacts, width: int | None = None) -> str:
    """The summary printed when the report is written: every finding, each with its fix.

    Reads ``report`` and, from ``facts``, the step count (a report without a
    capture section) and where report.md is. ``width``: the columns to wrap
    at (words whole, continuation lines indented; None: no wrapping, one
    line per item, for logs read by grep).
    """
    sec = capture_section(report)
    lines = []
    head = f"gpuprof: {sec.steps if sec is not None else facts.steps} steps"
    if sec and sec.step_time_median_ms is not None:
        head += f", median {sec.step_time_median_ms:.2f} ms/step"
    utils = [t.gpu_utilization for t in report.traces if t.gpu_utilization is not None]
    if utils:
        head += f", GPU busy {sum(utils) / len(utils):.0%} of recorded steps"
    if sec and sec.data_loading_share is not None:
        head += f", data loading {sec.data_loading_share:.0%}"
    lines.append(head)
    for line in _job_lines(report):
        lines += _wrapped(line, width, 4)
    findings = sort_findings(report.findings)
    if findings:
        counts = {s: sum(1 for f in findings if f.severity == s) for s in Severity}
        parts = [f"{n} {s.value}{'s' if n != 1 else ''}" for s, n in sorted(counts.items(),
                 key=lambda kv: -kv[0].rank) if n]
        lines.append(f"gpuprof: {len(findings)} finding{'s' if len(findings) != 1 else ''} ({', '.join(parts)})")
        for f in findings:  # all of them, whole: the summary is the report most users read
            lines += finding_lines(f, width)
    elif not report.failed_rules:
        lines.append("gpuprof: no findings")
    if report.failed_rules:
        lines.append(f"gpuprof: {'' if findings else 'no findings, but '}{_incomplete(report)}")
    for n in report.notes:
        lines += _wrapped(f"gpuprof: note: {one_line(n)}", width, 4)
    if facts.report_md is not None and sec is not None:
        lines.append(f"gpuprof: files in {visible(sec.run_dir)}")
        for t in sec.traces:
            lines.append(f"  trace        {visible(t)}")
        if sec.traces:
            lines.append("               open in Perfetto (https://ui.perfetto.dev, Open trace file) or "
                         f"run: gpuprof analyze {visible(shlex.quote(sec.run_dir))}")
        for s in sec.memory_snapshots[:2]:
            lines.append(f"  memory       {visible(s)}  (gpuprof memory {visible(shlex.quote(s))})")
        if sec.tensorboard_dir:
            lines.append(f"  TensorBoard  tensorboard --logdir {visible(shlex.quote(sec.tensorboard_dir))}")
        if os.path.exists(facts.report_md):
            lines.append(f"  report       {visible(facts.report_md)} (and report.json)")
    return "\n".join(lines)


def finding_lines(f: Finding, width: int | None = None) -> list[str]:
    """One finding as the summary shows it: severity, code, message, cost and place, then its fix (also the
    pytest plugin's failure message, so a finding reads the same there)."""
    where = f" [{_short_loc(f)}]" if f.location else ""
    lines = _wrapped(f"  {f.severity.value} {visible(f.code)} {one_line(linked_message(f))}{_cost_suffix(f)}{where}",
                     width, 4)
    if f.advice:
        lines += _wrapped(f"    Fix: {one_line(f.advice)}", width, 9)
    return lines


def final_line(report: Report, facts: SummaryFacts, out_dir: str | None, at_step: int) -> str:
    """The end-of-run line when the findings are those printed at the window's end."""
    head = short_report(report, facts).split("\n", 1)[0]
    where = f" in {visible(out_dir)}" if out_dir is not None else ""
    return "\n".join([f"{head}; findings as printed at step {at_step}; report.json and report.md rewritten with the "
                      f"whole run{where}"] + _job_lines(report))


def _job_lines(report: Report) -> list[str]:
    """The watch's few lines (steps watched, phases with medians, CPU), when the report has a job."""
    from gpuprof.render.job import job_lines

    if report.job is None or not report.job.steps:
        return []
    return [f"gpuprof: {visible(line)}" for line in job_lines(report.job)]


def _wrapped(line: str, width: int | None, indent: int) -> list[str]:
    """``line`` wrapped at ``width`` between words (continuations indented), or whole without a width."""
    if width is None:
        return [line]
    from gpuprof.render.layout import wrap_text

    return wrap_text(line, width, indent)


def _incomplete(report: Report) -> str:
    """The line that keeps a report with failed rules from reading as complete."""
    rules = ("rule " if len(report.failed_rules) == 1 else "rules ") + ", ".join(report.failed_rules)
    return f"the analysis is incomplete: {rules} failed (a gpuprof bug; see the notes)"


def _short_loc(f: Finding) -> str:
    loc = f.location
    assert loc is not None
    name = visible(os.path.basename(loc.file))
    return f"{name}:{loc.line}" if loc.line is not None else name

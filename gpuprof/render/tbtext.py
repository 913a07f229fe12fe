"""The findings of a capture as markdown for TensorBoard's Text tab.

TensorBoard renders this text with Python-Markdown in a pane styled
``word-break: break-word``: inside a table that lets the browser squeeze a
column to one character, so a five-column findings table read ``war ning``
and ``GP 601``. Here nothing long goes in a table: each finding is a list
item (severity, code, name, cost and place on its first line, the message
and the fix below), which wraps between words like any paragraph.

Paths are shown relative to the run's directory (the folder TensorBoard
lists as the run): the reader is already looking at that run, and an
absolute path (``/home/me/.../gpuprof_logs/run/worker.pt.trace.json.gz``)
only made the lines long. Everything from the data goes through
:func:`~gpuprof.render.markdown.md_escape` or
:func:`~gpuprof.render.markdown.md_code`, as in ``report.md``.
"""

from __future__ import annotations

import os
import shlex
from typing import Any

from gpuprof.findings import Finding, sort_findings
from gpuprof.render import format as F
from gpuprof.render.critpath import fmt_what_if
from gpuprof.render.markdown import md_code, md_escape
from gpuprof.report import Report

__all__ = ["findings_text", "relative_to"]


def relative_to(path: str, base: str | None) -> str:
    """``path`` relative to ``base`` when it lies inside it, else as given."""
    if not base or not path:
        return path
    try:
        rel = os.path.relpath(path, base)
    except ValueError:  # another drive (Windows)
        return path
    return path if rel.startswith("..") else rel


def _finding(i: int, f: Finding) -> list[str]:
    head = f"{i}. **{f.severity.value}** {md_code(f.code)} {md_escape(f.name)}"
    if f.cost_us_per_step is not None:
        head += f" · cost {md_escape(F.fmt_cost(f))}"
    if f.location is not None:
        head += f" · {md_code(str(f.location))}"
    # Python-Markdown continues a list item only with 4 spaces of indent
    out = [head, "", f"    {md_escape(F.linked_message(f))}"]
    what_if = fmt_what_if(f)
    if what_if:
        out += ["", f"    **What-if:** {md_escape(what_if)}"]
    if f.advice:
        out += ["", f"    **Fix:** {md_escape(f.advice)}"]
    return out + [""]


def capture_facts(sec: Any, base: str | None) -> list[str]:
    """The capture section's facts as markdown list items (steps, data loading, traces, snapshots, dumps,
    failures); file paths relative to ``base`` when given. report.md and the Text tab both list them."""
    lines = []
    if sec.steps:
        med = f", median step {sec.step_time_median_ms:.2f} ms" if sec.step_time_median_ms is not None else ""
        lines.append(f"- steps: {sec.steps}{med}")
    if sec.data_loading_share is not None:
        lines.append(f"- data loading: {sec.data_loading_share:.1%} of step time")
    lines += [f"- trace (steps {first}-{last}): {md_code(relative_to(t, base))}"
              for t, (first, last) in zip(sec.traces, sec.recorded_steps)]
    for s in sec.memory_snapshots:
        rel = relative_to(s, base)
        lines.append(f"- memory snapshot: {md_code(rel)} ({md_code('gpuprof memory ' + shlex.quote(rel))})")
    lines += [f"- out-of-memory dump: {md_code(relative_to(s, base))}" for s in sec.oom_files]
    for part, why in sec.failures.items():
        lines.append(f"- {md_escape(part)} failed: {md_escape(why)}")
    return lines


def _capture(sec: Any) -> list[str]:
    """The capture's facts; file paths relative to its run directory."""
    name = relative_to(sec.run_dir, sec.logdir) if sec.run_dir else ""
    lines = ["**Capture**" + (f" (run {md_code(name)}; paths below are in it)" if name else ""), ""]
    return lines + capture_facts(sec, sec.run_dir or None)


def findings_text(report: Report) -> str:
    """The Text tab's markdown: the total (which says when rules failed), every finding as a list
    item, the traces, the capture's facts."""
    sec = next((s for s in report.sections if getattr(s, "kind", None) == "capture"), None)
    base = sec.run_dir if sec is not None and sec.run_dir else None
    findings = sort_findings(report.findings)
    lines = [f"**{md_escape(F.findings_total(report))}**", ""]
    for i, f in enumerate(findings, 1):
        lines += _finding(i, f)
    for t in report.traces:
        util = f", GPU utilisation {t.gpu_utilization:.0%}" if t.gpu_utilization is not None else ""
        lines.append(f"Trace {md_code(relative_to(t.path, base))}: {t.num_steps} steps, median step "
                     f"{t.step_time_us / 1000:.2f} ms{util}")
        lines.append("")
    if sec is not None:
        lines += _capture(sec) + [""]
    if report.notes:
        lines += ["Notes:", ""] + [f"- {md_escape(n)}" for n in report.notes] + [""]
    return "\n".join(lines).rstrip("\n") + "\n"

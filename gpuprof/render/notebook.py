"""Reports and capture results as inert HTML, for a Jupyter notebook (``_repr_html_``).

A notebook shows the value of a cell's last expression with its
``_repr_html_``: ``prof.report``, ``prof.result``, ``step.finish()`` (the
capture result builds its headline and files and calls :func:`fragment`). The
fragment is static HTML: no script, no style sheet, no link, no attribute
that holds data. Every name (a module, a file, a run, a finding's message)
goes through :func:`~gpuprof.render.safe.clip` (controls and bidi
overrides shown as escapes, cut to a bounded length) and then :func:`html.escape` (``<``, ``>``,
``&`` and quotes as entities), so a hostile name reads as text and is never
markup. The findings are the ones the printed summary shows, in its order.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence

from gpuprof.findings import Finding, sort_findings
from gpuprof.notebookhook import register_html
from gpuprof.render.safe import clip
from gpuprof.report import Report

__all__ = ["fragment", "report_html"]


def _t(text: object) -> str:
    """One piece of data as HTML text (at most MAX_TEXT characters: a huge name makes no huge page)."""
    return html.escape(clip(text), quote=True)


def _cost(f: Finding) -> str:
    if f.cost_us_per_step is None:
        return ""
    share = f" ({f.cost_share:.0%})" if f.cost_share is not None else ""
    return f"{f.cost_us_per_step / 1000:.2f} ms/step{share}"


def _where(f: Finding) -> str:
    loc = f.location
    if loc is None:
        return ""
    return f"{loc.file}:{loc.line}" if loc.line is not None else loc.file


def fragment(head: str, findings: Sequence[Finding], failed_rules: Sequence[str], notes: Iterable[str],
              files: Iterable[tuple[str, str]]) -> str:
    """The fragment: a headline, the findings table (each with its fix), the notes, the files (label, path)."""
    out = ['<div class="gpuprof">', f"<p><b>gpuprof</b> {_t(head)}</p>"]
    ordered = sort_findings(list(findings))
    if ordered:
        out.append("<table><thead><tr><th>severity</th><th>code</th><th>finding</th><th>cost</th><th>where</th>"
                   "</tr></thead><tbody>")
        for f in ordered:
            fix = f"<br><i>Fix:</i> {_t(f.advice)}" if f.advice else ""
            out.append(f"<tr><td>{_t(f.severity.value)}</td><td>{_t(f.code)}</td><td>{_t(f.message)}{fix}</td>"
                       f"<td>{_t(_cost(f))}</td><td>{_t(_where(f))}</td></tr>")
        out.append("</tbody></table>")
    elif not failed_rules:
        out.append("<p>No findings.</p>")
    if failed_rules:
        out.append(f"<p><b>The analysis is incomplete:</b> {_t(', '.join(failed_rules))} failed (a gpuprof bug; "
                   "see the notes).</p>")
    items = [f"<li>{_t(n)}</li>" for n in notes]
    if items:
        out.append("<p>Notes:</p><ul>" + "".join(items) + "</ul>")
    rows = [f"<tr><td>{_t(what)}</td><td><code>{_t(path)}</code></td></tr>" for what, path in files]
    if rows:
        out.append("<table><tbody>" + "".join(rows) + "</tbody></table>")
    out.append("</div>")
    return "\n".join(out)


def report_html(report: Report) -> str:
    """A :class:`~gpuprof.report.Report` (analysis or capture) as an inert HTML fragment."""
    steps = sum(t.num_steps for t in report.traces)
    head = f"{report.command}: {len(report.traces)} trace{'s' if len(report.traces) != 1 else ''}"
    section = next((s for s in report.sections if getattr(s, "kind", None) == "capture"), None)
    files: list[tuple[str, str]] = []
    if section is not None:
        d = section.to_dict()
        steps = int(d.get("steps") or 0)
        med = d.get("step_time_median_ms")
        head = f"capture: {steps} steps" + (f", median {med:.2f} ms/step" if isinstance(med, float) else "")
        share = d.get("data_loading_share")
        if isinstance(share, float):
            head += f", data loading {share:.0%}"
        files.append(("run directory", str(d.get("run_dir", ""))))
        files += [("trace", str(t)) for t in d.get("traces", [])]
    elif steps:
        head += f", {steps} steps"
    return fragment(head, report.findings, report.failed_rules, report.notes, files)


register_html(report_html)

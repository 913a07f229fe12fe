"""A standalone, offline, inert HTML page of a report or of a diff.

The page holds the summary, the step-time chart, the findings and the views
(sortable, searchable tables) of a report; for a diff, the per-step table,
both runs' step times, the findings fixed/new/changed and the operators and
kernels that changed, every row the diff document holds. It is drawn by the
same script as the TensorBoard tab (:mod:`gpuprof.render.web`: summary cards,
step chart, findings, the views as sortable, searchable tables, and the whole
comparison of two runs, ``GP.diff``, which the tab's "Compare with" section
draws too); this module only adds the page's layout. It loads nothing (no network, no file), and it is
inert whatever names the data holds, built exactly as the memory viewer
(:mod:`gpuprof.memory.htmlsafe`): the data is one escaped JSON document, the
page's one script builds the DOM with ``textContent``/``setAttribute`` of
fixed attribute names only, and the content-security policy allows that
script and stylesheet by hash and nothing else.
"""

from __future__ import annotations

import os
from typing import Any

from gpuprof.memory.htmlsafe import fill_template, page_head, script_json, text_for_html
from gpuprof.render import web
from gpuprof.render.format import fmt_comm_wait, fmt_mfu
from gpuprof.render.groups import trace_labels
from gpuprof.render.web.model import TraceFigures, drawn_findings, headline
from gpuprof.report import Report

__all__ = ["report_page_data", "diff_page_data", "render_page", "report_page", "diff_page"]


def report_page_data(report: Report) -> dict[str, Any]:
    """The numbers a report's page draws (also what tests read back from the page).

    The views are whole: every row the JSON report keeps (up to 500 per view,
    the rest summed in ``rest``), as in the TensorBoard tab. Findings carry
    ``display_message``/``display_cost``, their message and cost as every
    renderer states them (:mod:`gpuprof.render.format`).
    """
    d = report.to_dict()
    traces = []
    for t in d["traces"]:
        traces.append({
            "path": t["path"],
            "devices": list(dict.fromkeys(x.get("name", "") for x in t.get("devices", []))),
            "num_steps": t["num_steps"],
            "step_time_us": t["step_time_us"],
            "step_time_mean_us": t["step_time_mean_us"],
            "gpu_busy_us": t["gpu_busy_us"],
            "gpu_utilization": t["gpu_utilization"],
            "breakdown_us": t["breakdown_us"],
            "idle_breakdown_us": t["idle_breakdown_us"],
            "step_ids": t["step_ids"],
            "step_times_us": t.get("step_times_us", []),
            "views": t.get("views"),
        })
    # one card per distinct finding, labelled with the traces it applies to (as the terminal and markdown show it)
    findings = drawn_findings(report.sorted_findings(), trace_labels(report))
    title = "gpuprof report: " + ", ".join(_title_name(p) for p in report.inputs)
    # the summary cards: the same figures as the TensorBoard tab's run headline (gpuprof.render.web.model)
    head = headline([TraceFigures.of(t, t["devices"]) for t in traces],
                    [x for t in traces for x in t["step_times_us"]], sum(t["num_steps"] for t in traces))
    if len(report.traces) == 1:  # one trace's MFU and waiting in collectives, worded as every renderer words them
        head["mfu_text"] = fmt_mfu(report.traces[0])
        head["comm_wait_text"] = fmt_comm_wait(report.traces[0])
    return {"kind": "report", "title": title, "inputs": d["inputs"], "headline": head, "traces": traces,
            "findings": findings, "findings_total": len(report.findings), "notes": d["notes"], "version": d["tool"]["version"], "job": d.get("job")}


def diff_page_data(diff: dict[str, Any]) -> dict[str, Any]:
    """The numbers a diff's page draws: the diff document itself, whole (every row it holds), under ``diff``.

    The page draws it with ``GP.diff`` of the shared drawing code, as the TensorBoard tab's "Compare with"
    section draws the same document from its ``compare`` route.
    """
    b, a = diff["before"], diff["after"]
    title = f"gpuprof diff: {_title_name(str(b['label']))} \u2192 {_title_name(str(a['label']))}"
    return {"kind": "diff", "title": title, "diff": diff, "version": diff["tool"]["version"]}


def _title_name(path: str) -> str:
    """An input as a page title names it: its last part only (no directory of the machine that wrote the
    page), control characters and line separators as visible escapes, at most 120 characters."""
    from gpuprof.render.safe import clip

    return clip(os.path.basename(path.rstrip("/")) or path, 120)


def render_page(data: dict[str, Any]) -> str:
    """The page for ``data`` (:func:`report_page_data` or :func:`diff_page_data`): two values substituted, in one pass."""
    return fill_template(_TEMPLATE, {"TITLE": text_for_html(data["title"]), "DATA": script_json(data)})


def report_page(report: Report) -> str:
    return render_page(report_page_data(report))


def diff_page(diff: dict[str, Any]) -> str:
    return render_page(diff_page_data(diff))


# The page's own stylesheet and its calls into the shared drawing code (gpuprof/render/web/page.css, page.js;
# report.js, GP.*, comes first in the page's one script). Data reaches the DOM only through that code's
# textContent, Text nodes and setAttribute of fixed attribute names; there is no innerHTML,
# insertAdjacentHTML, outerHTML or document.write.
_PAGE_STYLE = web.read("page.css")
_PAGE_SCRIPT = web.read("page.js")

# One inline script (the shared drawing code, then this page's) and one stylesheet: the policy allows them by hash.
_SCRIPT = web.SCRIPT + _PAGE_SCRIPT
_STYLE = web.STYLE + _PAGE_STYLE

_TEMPLATE = (page_head(_SCRIPT, _STYLE) + """<h1 id="title"></h1><p class="muted" id="sub"></p>
<main id="main"></main>
<script id="data" type="application/json">__DATA__</script>
<script>""" + _SCRIPT + """</script></body></html>
""")

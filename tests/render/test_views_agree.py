"""One report, every view: the same findings with the same codes, locations and cost figures.

The report of a real shared trace, and of a synthetic capture run in which a runtime finding (GP601)
supersedes a trace one (GP102) and GP101's idle parts are explained by other findings, is rendered by
every view gpuprof has: terminal, JSON, markdown, the annotated trace's findings track, the TensorBoard
tab (the plugin's run view) and its Text tab, and the capture's printed summary. Each view is read back
into a set of (code, location, cost figure); all must equal the report's own.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from gpuprof.analysis import analyze
from gpuprof.capture.end.text import findings_markdown, short_report, states_cost
from gpuprof.capture.run import RunFacts
from gpuprof.findings import Evidence, Finding, Severity, SourceLocation
from gpuprof.render import render
from gpuprof.render.annotate import annotation_events, findings_of_trace
from gpuprof.render.format import fmt_cost
from gpuprof.report import Report
from gpuprof.tbplugin.data import analyse_trace_file, run_view
from gpuprof.tbplugin.runs import find_runs
from gpuprof_testing.realtraces import v100_samples
from gpuprof_testing.tracegen import TraceBuilder

Row = tuple[str, str, str]  # (code, location as "file-basename:line" or "", cost figure or "")
CODE = r"(GP\d{3})"


def _loc(file: str | None, line: Any = None) -> str:
    if not file:
        return ""
    return f"{os.path.basename(file)}:{line}" if line not in (None, "None") else os.path.basename(file)


def _row(f: Finding) -> Row:
    loc = f.location
    return (f.code, _loc(loc.file, loc.line) if loc else "", fmt_cost(f) if f.cost_us_per_step is not None else "")


def _from_loc_text(text: str) -> str:
    """``path/x.py:12 (fn)`` -> ``x.py:12``."""
    m = re.match(r"(.*?)(?::(\d+))?(?: \(.*\))?$", text.strip())
    assert m is not None
    return _loc(m.group(1), m.group(2))


def _json_view(report: Report) -> set[Row]:
    return {_row(Finding.from_dict(d)) for d in json.loads(render(report, "json"))["findings"]}


def _terminal_view(report: Report) -> set[Row]:
    from gpuprof.render.terminal import render_terminal

    text = render_terminal(report, color=False, width=400)
    rows = set()
    for block in re.split(r"╭─ \d+\. ", text)[1:]:
        code = re.match(r"\w+ " + CODE, block)
        assert code is not None, block[:200]
        cost = re.search(r"│ Cost\s+(.+?)\s*│", block)
        where = re.search(r"│ Where\s+(.+?)\s*│", block)
        figure = cost.group(1) if cost else ""
        rows.add((code.group(1), _from_loc_text(where.group(1)) if where else "",
                  "" if figure == "not estimated" else figure))
    return rows


def _markdown_view(report: Report) -> set[Row]:
    text = render(report, "markdown")
    rows = set()
    for block in re.split(r"^### \d+\. ", text, flags=re.M)[1:]:
        code = re.match(r"`" + CODE + "`", block)
        assert code is not None
        cost = re.search(r"^- \*\*Cost:\*\* (.+)$", block, re.M)
        where = re.search(r"^- \*\*Where:\*\* `(.+)`$", block, re.M)
        figure = cost.group(1) if cost else ""
        rows.add((code.group(1), _from_loc_text(where.group(1)) if where else "",
                  "" if figure == "not estimated" else figure))
    return rows


def _annotated_view(report: Report, trace: str) -> set[Row]:
    rows = set()
    for e in annotation_events(findings_of_trace(report.findings, trace, [t.path for t in report.traces])):
        a = e.get("args", {})
        if "code" in a:
            cost = a["cost"]
            rows.add((a["code"], _from_loc_text(a["location"]) if "location" in a else "",
                      "" if cost == "not estimated" else cost))
    return rows


def _tensorboard_view(logdir: Path) -> set[Row]:
    (run,) = find_runs(logdir)
    view = run_view(run, logdir, {p: analyse_trace_file(p) for p in run.traces})
    rows = set()
    for d in view["findings"]:
        loc = d.get("location") or {}
        rows.add((d["code"], _loc(loc.get("file"), loc.get("line")), "" if d["cost_us_per_step"] is None else d["display_cost"]))
    return rows


def _tensorboard_text_view(report: Report) -> set[Row]:
    # gpuprof.render.tbtext: "1. **warning** `GP601` name · cost X · `path:line (fn)`", one list item a finding
    rows = set()
    for line in findings_markdown(report).splitlines():
        m = re.match(r"\d+\. \*\*(?:info|warning|error)\*\* `" + CODE + r"`[^·]*(?: · cost ([^·]+?))?(?: · `(.+)`)?$", line)
        if m:
            rows.add((m.group(1), _from_loc_text(m.group(3)) if m.group(3) else "", (m.group(2) or "").strip()))
    return rows


def _capture_summary_view(report: Report) -> set[Row]:
    facts = RunFacts.__new__(RunFacts)  # short_report reads only the step count and report.md's path
    object.__setattr__(facts, "steps", 0)
    object.__setattr__(facts, "report_md", None)
    rows = set()
    for line in short_report(report, facts).splitlines():
        m = re.match(r"  (?:info|warning|error)\s+" + CODE + r" .*?(?: cost (\S+ \S+/step(?: \(.+? of step\))?))?(?: \[(.+)\])?$", line)
        if m:
            rows.add((m.group(1), _from_loc_text(m.group(3)) if m.group(3) else "", m.group(2) or ""))
    return rows


def _all_views(report: Report, logdir: Path) -> dict[str, set[Row]]:
    (trace,) = [t.path for t in report.traces]
    return {
        "json": _json_view(report),
        "terminal": _terminal_view(report),
        "markdown": _markdown_view(report),
        "annotated trace": _annotated_view(report, trace),
        "tensorboard tab": _tensorboard_view(logdir),
        "tensorboard text": _tensorboard_text_view(report),
        "capture summary": _capture_summary_view(report),
    }


def _check(report: Report, logdir: Path) -> set[Row]:
    want = {_row(f) for f in report.findings}
    assert len(want) == len(report.findings)  # the rows tell the findings apart
    views = _all_views(report, logdir)
    # the capture summary does not repeat a cost its message states already (capture.end.text.states_cost)
    said = {_row(f) for f in report.findings if states_cost(f)}
    for name, got in views.items():
        expect = want if name != "capture summary" else (want - said) | {(c, loc, "") for c, loc, _ in said}
        assert got == expect, f"{name} differs from the report: missing {expect - got}, extra {got - expect}"
    return want


@pytest.mark.slow  # slow pass: a real trace (or job) analysed whole; the README's fast command stays under 300 CPU s on a 2-core VM
def test_every_view_shows_the_findings_of_a_real_trace(tmp_path: Path) -> None:
    src = v100_samples()[0]  # num_workers=0: GP101 with linked idle parts, GP102, and more
    logdir = tmp_path / "logs"
    (logdir / "run").mkdir(parents=True)
    trace = logdir / "run" / src.name
    shutil.copyfile(src, trace)
    report = analyze(trace)
    rows = _check(report, logdir)
    assert {"GP101", "GP102"} <= {code for code, _, _ in rows}
    assert any(r[2] for r in rows)  # cost figures compared, not only codes


def _gp601(run: Path) -> dict[str, Any]:
    f = Finding("GP601", "dataloader-main-process", Severity.WARNING,
                "DataLoader with num_workers=0: 40% of the step waits for batches", "Use num_workers=4.",
                (Evidence("dataloader_share", 0.4, 0.1, "fraction"),), 12000.0, 0.4,
                SourceLocation(str(run / "train.py"), 31, "main"), origin="runtime")
    return f.to_dict()


def test_every_view_shows_the_same_findings_when_one_supersedes_another(tmp_path: Path) -> None:
    logdir = tmp_path / "logs"
    run = logdir / "run"
    b = TraceBuilder()
    for _ in range(4):
        with b.step():
            b.dataloader(ms=8.0)
            b.gemm(us=2000)
            b.cpu(us=100)
    trace = b.write(run / "w.pt.trace.json")
    (run / "report.json").write_text(json.dumps({"schema_version": "1.0", "command": "capture", "traces": [],
                                                 "findings": [_gp601(run)], "sections": [], "notes": [],
                                                 "failed_rules": []}))
    plain = analyze(trace)
    assert "GP102" in {f.code for f in plain.findings}  # the trace alone reports it
    report = analyze(run)
    codes = [f.code for f in report.findings]
    assert "GP601" in codes and "GP102" not in codes  # folded into the runtime finding
    gp601 = next(f for f in report.findings if f.code == "GP601")
    assert [(k.kind, k.code) for k in gp601.links] == [("supersedes", "GP102")]
    _check(report, logdir)


@pytest.mark.slow  # every renderer over a whole analysis: out of the README's fast command
def test_idle_part_links_are_data_drawn_by_every_renderer(tmp_path: Path) -> None:
    from gpuprof.render.format import linked_message
    from gpuprof.render.markdown import md_escape
    from gpuprof.render.terminal import render_terminal

    report = analyze(v100_samples()[0])
    gp101 = next(f for f in report.findings if f.code == "GP101")
    explained = [k for k in gp101.links if k.kind == "explained_by"]
    assert explained, "the real trace's idle parts are explained by other findings"
    assert {k.code for k in explained} <= {f.code for f in report.findings}
    assert "(see " not in gp101.message  # the rule's own prose, not edited
    shown = [k for k in explained if k.part and k.part in gp101.message]
    assert shown, "an explained part is among the parts the message names"
    text = linked_message(gp101)
    assert f"{shown[0].part} (see {shown[0].code}" in text

    def flat(s: str) -> str:
        return " ".join(s.replace("│", " ").split())

    assert md_escape(text) in render(report, "markdown") and md_escape(text) in findings_markdown(report)
    assert flat(text) in flat(render_terminal(report, color=False, width=400))
    # the JSON keeps the message as the rule wrote it, and the links as data
    (d,) = [d for d in json.loads(render(report, "json"))["findings"] if d["code"] == "GP101"]
    assert d["message"] == gp101.message and {"kind": "explained_by", "code": shown[0].code, "part": shown[0].part,
                                              "count": None} in d["links"]


# --- the views (operators, kernels, modules, ranges): the same rows and totals in the JSON report, the
# TensorBoard tab's data route and the --html page, all drawn by gpuprof/render/web/report.js ---------------

def _route_views(logdir: Path) -> dict[str, Any]:
    """The selected trace's views as the tab fetches them: the plugin's ``run`` route over HTTP (werkzeug)."""
    import time

    from tensorboard.plugins.base_plugin import TBContext
    from werkzeug.test import Client

    from gpuprof.tbplugin.plugin import GpuprofPlugin

    apps = GpuprofPlugin(TBContext(logdir=str(logdir))).get_plugin_apps()
    c = Client(lambda env, sr: apps[env["PATH_INFO"]](env, sr))
    runs = json.loads(c.get("/runs").get_data(as_text=True))["runs"]
    assert [r["name"] for r in runs] == ["run"]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        j = json.loads(c.get("/run?run=run").get_data(as_text=True))
        if j["status"] != "pending":
            break
        time.sleep(0.05)
    assert j["status"] == "ready", j
    (t,) = j["view"]["traces"]
    return dict(t["summary"]["views"])


@pytest.mark.slow  # slow pass: a real trace (or job) analysed whole; the README's fast command stays under 300 CPU s on a 2-core VM
def test_views_agree_in_json_tensorboard_route_and_html_page(tmp_path: Path) -> None:
    import subprocess

    import pytest

    from gpuprof.htmlpage.page import report_page

    from ..security.html_pages import page_data

    src = v100_samples()[0]  # a V100 ResNet-50 trace recorded with record_shapes: operators by input shapes
    logdir = tmp_path / "logs"
    (logdir / "run").mkdir(parents=True)
    trace = logdir / "run" / src.name
    shutil.copyfile(src, trace)
    report = analyze(trace)
    (want,) = [t["views"] for t in json.loads(render(report, "json"))["traces"]]
    assert len(want["operators"]) == 500 and want["rest"]["operators"]["rows"] > 0 and want["kernels"]
    # totals: the operators' GPU self time (kept rows and the summed rest) plus the unattributed part is all kernel time
    gpu = sum(r["gpu_self_us"] for r in want["operators"]) + want["rest"]["operators"]["gpu_self_us"]
    assert gpu + want["unattributed_gpu_us"] == pytest.approx(want["kernel_total_us"], rel=0.01)
    assert sum(r["total_us"] for r in want["kernels"]) == pytest.approx(want["kernel_total_us"], rel=0.01)

    assert _route_views(logdir) == want, "the TensorBoard tab's data differs from the JSON report"
    page = tmp_path / "report.html"
    page.write_text(report_page(report), encoding="utf-8")
    (got,) = [t["views"] for t in page_data(page)["traces"]]
    assert got == want, "the --html page's data differs from the JSON report"
    node = shutil.which("node")
    if node is None:
        pytest.skip("needs node to run the page's script (the data agreed)")
    shim = Path(__file__).parents[1] / "security" / "page_shim.js"
    run = subprocess.run([node, str(shim), str(page)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr[-2000:]
    drawn = dict(json.loads(run.stdout)["drawn"])  # the page's script drew every row of every non-empty view
    assert drawn == {f"view-{v}": len(want[v]) for v in ("operators", "kernels", "modules", "ranges") if want[v]}

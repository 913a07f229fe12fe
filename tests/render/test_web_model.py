"""One view model for the HTML page and the TensorBoard tab (gpuprof.render.web.model).

The standalone page (``--html``) and the tab draw the same summary cards and
findings with the same script; these tests hold that they get the same figures
for the same real run, that the figures are the ones an independent walk over
the traces' own step times gives, and that the markup is package files.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import pytest

from gpuprof.analysis import analyze
from gpuprof.htmlpage.page import report_page_data
from gpuprof.render import web
from gpuprof.render.format import fmt_cost, linked_message
from gpuprof.trace.load import load_trace
from gpuprof.trace.metrics import compute_metrics
from gpuprof_testing.realtraces import v100_samples

CARDS = ("traces", "devices", "steps", "step_time_us", "step_time_mean_us", "gpu_utilization")


@pytest.fixture(scope="module")
def run_traces() -> list[Path]:
    """One real run of two spans (V100, ResNet-50, num_workers=0): two traces, many steps."""
    return [p for p in v100_samples() if p.parent.name == "resnet50_num_workers_0"]


def _tab_view(traces: list[Path]) -> dict[str, Any]:
    pytest.importorskip("tensorboard", reason="the tab's data side comes with gpuprof[tensorboard]")
    from gpuprof.tbplugin.data import analyse_trace_file, run_view
    from gpuprof.tbplugin.runs import find_runs

    root = traces[0].parent.parent
    run = next(r for r in find_runs(root) if r.name == traces[0].parent.name)
    return run_view(run, root, {p: analyse_trace_file(p) for p in run.traces})


@pytest.mark.slow  # slow pass: a real trace (or job) analysed whole; the README's fast command stays under 300 CPU s on a 2-core VM
def test_the_page_and_the_tab_draw_the_same_cards_for_the_same_run(run_traces: list[Path]) -> None:
    page = report_page_data(analyze([str(p) for p in run_traces]))["headline"]
    tab = _tab_view(run_traces)["headline"]
    assert set(page) == set(CARDS)
    assert {k: tab[k] for k in CARDS} == page
    assert page["traces"] == 2 and page["steps"] > 2  # the run is what the test means (two spans, steps)


@pytest.mark.slow  # slow pass: a real trace (or job) analysed whole; the README's fast command stays under 300 CPU s on a 2-core VM
def test_the_cards_are_the_figures_of_the_traces_own_steps(run_traces: list[Path]) -> None:
    """Independently: every step's time and the main GPU's busy time, from the loaded traces' metrics."""
    steps: list[float] = []
    busy = timed = 0.0
    devices: list[str] = []
    for p in run_traces:
        m = compute_metrics(load_trace(p))
        steps += [s.dur for s in m.steps]
        if m.gpu_utilization is not None:
            busy += m.gpu_busy_total()
            timed += m.total_time
        for d in m.trace.devices:
            if d.name and d.name not in devices:
                devices.append(d.name)
    head = report_page_data(analyze([str(p) for p in run_traces]))["headline"]
    assert head["steps"] == len(steps)
    assert head["step_time_us"] == pytest.approx(statistics.median(steps), rel=1e-9)
    assert head["step_time_mean_us"] == pytest.approx(sum(steps) / len(steps), rel=1e-9)
    assert head["gpu_utilization"] == pytest.approx(busy / timed, rel=1e-9)
    assert head["devices"] == devices


@pytest.mark.slow  # slow pass: a real trace (or job) analysed whole; the README's fast command stays under 300 CPU s on a 2-core VM
def test_the_page_and_the_tab_state_a_finding_the_same_way(run_traces: list[Path]) -> None:
    report = analyze([str(run_traces[0])])
    page = {f["code"]: f for f in report_page_data(report)["findings"]}
    assert page, "the run has findings (GP102 at least): else this test proves nothing"
    for f in report.findings:
        assert page[f.code]["display_message"] == linked_message(f)
        assert page[f.code]["display_cost"] == fmt_cost(f)
    tab = _tab_view(run_traces)
    for d in tab["findings"]:
        if d["code"] in page and d.get("trace") == run_traces[0].name:
            assert d["display_cost"] == page[d["code"]]["display_cost"]


@pytest.mark.parametrize("name", ["report.js", "report.css", "page.js", "page.css", "tab.js", "tab.css", "tab.html", "memory.js",
                                  "memory.css"])
def test_the_markup_is_package_files(name: str) -> None:
    text = web.read(name)
    assert text.strip() and "\r" not in text
    assert (Path(web.__file__).parent / name).is_file()


def test_the_pages_inline_the_files_they_name() -> None:
    from gpuprof.htmlpage import page

    assert web.read("page.js") in page._TEMPLATE and web.read("report.js") in page._TEMPLATE
    pytest.importorskip("tensorboard", reason="the tab's page comes with gpuprof[tensorboard]")
    from gpuprof.tbplugin import page as tab

    assert web.read("tab.js") in tab.INDEX_HTML and web.read("tab.css") in tab.INDEX_HTML
    assert "__SCRIPT__" not in tab.INDEX_HTML and "__POLICY__" not in tab.INDEX_HTML

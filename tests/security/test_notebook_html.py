"""Reports and capture results drawn as HTML in a notebook (``_repr_html_``): inert whatever the names.

The fragment may hold only a few plain elements (no script, no style, no link, no event handler, no
attribute carrying data); each hostile name reads back as its visible text; a huge name makes no huge page.
"""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

import pytest

from gpuprof.analysis import analyze
from gpuprof.capture.result import CaptureResult, RecordedTrace, WindowReport
from gpuprof.capture.run import CaptureSection
from gpuprof.findings import Finding, Severity, SourceLocation
from gpuprof.render.jsonout import render_json
from gpuprof.render.safe import MAX_TEXT, UNSAFE_CODEPOINTS, visible
from gpuprof.report import Report
from gpuprof_testing.tracegen import TraceBuilder

from .conftest import HTML_HOSTILE, HUGE_NAME, TEXT_HOSTILE

NAMES = HTML_HOSTILE + TEXT_HOSTILE + [HUGE_NAME]
IDS = [f"name{i}" for i in range(len(NAMES))]
ELEMENTS = {"div", "p", "b", "i", "br", "table", "thead", "tbody", "tr", "th", "td", "code", "ul", "li"}


class _Reader(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.attrs: list[tuple[str, str | None]] = []
        self.text: list[str] = []
        self.other: list[str] = []  # comments, declarations, processing instructions

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attrs += attrs

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    def handle_comment(self, data: str) -> None:
        self.other.append(data)

    def handle_decl(self, decl: str) -> None:
        self.other.append(decl)

    def handle_pi(self, data: str) -> None:
        self.other.append(data)


def _read(fragment: str) -> _Reader:
    r = _Reader()
    r.feed(fragment)
    r.close()
    return r


def _assert_inert(fragment: str, name: str) -> None:
    r = _read(fragment)
    assert set(r.tags) <= ELEMENTS, sorted(set(r.tags) - ELEMENTS)
    assert r.attrs == [("class", "gpuprof")]  # the one attribute: the wrapper's class, never data
    assert r.other == []
    assert not any(ord(c) in UNSAFE_CODEPOINTS for c in fragment if c != "\n")
    text = "".join(r.text)
    shown = visible(name)
    assert (shown if len(shown) < MAX_TEXT else shown[:20]) in text  # the name reads back as text
    assert len(fragment) < 60 * MAX_TEXT


def _hostile_report(name: str) -> Report:
    f = Finding(code="GP601", name="dataloader", severity=Severity.WARNING, message=f"loader {name} is slow",
                advice=f"fix {name}", location=SourceLocation(f"/home/u/{name}.py", 12, name), origin="runtime",
                cost_us_per_step=1500.0, cost_share=0.25)
    section = CaptureSection(run_dir=f"/logs/{name}", traces=[f"/logs/{name}.pt.trace.json.gz"],
                             recorded_steps=[[1, 3]], steps=3, step_time_median_ms=2.5, data_loading_share=0.4)
    return Report(command="capture", findings=[f], sections=[section], notes=[f"note about {name}"],
                  failed_rules=[name])


@pytest.mark.parametrize("name", NAMES, ids=IDS)
def test_report_html_is_inert(name: str) -> None:
    report = _hostile_report(name)
    html = report._repr_html_()
    assert html is not None and "GP601" in html
    _assert_inert(html, name)


@pytest.mark.parametrize("name", NAMES, ids=IDS)
def test_capture_result_html_is_inert(name: str) -> None:
    report = _hostile_report(name)
    import msgspec

    doc = msgspec.json.decode(render_json(report))
    result = CaptureResult(run_dir=f"/logs/{name}", out_dir=f"/logs/{name}", worker=name, steps=3,
                           step_time_median_ms=2.5, traces=(RecordedTrace(path=f"/logs/{name}.pt.trace.json.gz",
                                                                           first_step=1, last_step=3),),
                           files=(f"/logs/{name}/report.json",),
                           reports=(WindowReport(at_step=3, final=True, report=doc),))
    html = result._repr_html_()
    assert "GP601" in html and "loader" in html
    _assert_inert(html, name)
    inactive = CaptureResult(inactive=f"another profiler {name} runs")._repr_html_()
    _assert_inert(inactive, name)


@pytest.mark.parametrize("name", HTML_HOSTILE[:4] + TEXT_HOSTILE[:2], ids=IDS[:6])
def test_analysed_trace_with_hostile_names_is_inert(name: str, tmp_path: Path) -> None:
    """A real analysis of a trace whose GPU, operator, kernel and frames are the hostile name."""
    b = TraceBuilder(device=name)
    for _ in range(3):
        with b.step():
            with b.frames((name, 12, name)):
                with b.op(name, input_types=["float"]):
                    b.kernel(name, us=500)
                b.sync_op(name)
            b.cpu(us=100, name=name)
    report = analyze(str(b.write(tmp_path / "hostile.pt.trace.json")))
    html = report._repr_html_()
    assert html is not None
    r = _read(html)
    assert set(r.tags) <= ELEMENTS and r.attrs == [("class", "gpuprof")] and r.other == []
    assert not any(ord(c) in UNSAFE_CODEPOINTS for c in html if c != "\n")

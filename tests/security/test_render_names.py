"""Hostile names in real-shaped traces and snapshots reach no renderer as live control characters or markup."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from markdown_it import MarkdownIt

from gpuprof.analysis import analyze
from gpuprof.capture.end.text import findings_markdown, short_report
from gpuprof.capture.run import CaptureSection
from gpuprof.memory.analysis import MemoryOptions, analyze_memory
from gpuprof.memory.load import load_memory
from gpuprof.render.markdown import render_markdown
from gpuprof.render.safe import MAX_TEXT, UNSAFE_CODEPOINTS, shorten, visible
from gpuprof.render.terminal import render_terminal
from gpuprof.report import Report
from gpuprof_testing.snapshots import MiB, SnapshotBuilder
from gpuprof_testing.tracegen import TraceBuilder

from .conftest import HTML_HOSTILE, HUGE_NAME, TEXT_HOSTILE

NAMES = HTML_HOSTILE + TEXT_HOSTILE + [HUGE_NAME]
IDS = [f"name{i}" for i in range(len(NAMES))]

# the only escape sequences the terminal renderer itself writes: SGR colour and style codes
_SGR = re.compile(r"\x1b\[[0-9;]*m")


def _unsafe_left(text: str, allow: str = "\n") -> list[str]:
    """Every character of ``text`` that would act on a terminal or reader (``allow`` excepted)."""
    return sorted({repr(c) for c in text if ord(c) in UNSAFE_CODEPOINTS and c not in allow})


def _trace(name: str, path: Path) -> Path:
    """A trace where ``name`` is the GPU, a Python frame, the operator, the kernel and the syncing op."""
    b = TraceBuilder(device=name)
    for _ in range(3):
        with b.step():
            with b.frames((name, 12, name)):
                with b.op(name, input_types=["float"]):
                    b.kernel(name, us=500)
                b.sync_op(name)
            b.cpu(us=100, name=name)
    return b.write(path)


@pytest.fixture(scope="module", params=range(len(NAMES)), ids=IDS)
def case(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Report]:
    name = NAMES[request.param]
    path = _trace(name, tmp_path_factory.mktemp("t") / "hostile.pt.trace.json")
    report = analyze(str(path))
    assert report.traces[0].top_kernels[0].name == name  # the name really is in the data the renderers get
    return name, report


def test_terminal_shows_names_inert(case: tuple[str, Report]) -> None:
    name, report = case
    out = render_terminal(report, color=True, width=160)
    assert "\x1b[" in out  # it is a colour terminal: the renderer's own codes are there
    rest = _SGR.sub("", out)
    assert "\x1b" not in rest and _unsafe_left(rest) == []
    assert "\x1b]8;" not in out and "\x1b]0;" not in out  # no hyperlink or title from a "[link=...]" name
    # the kernel table shows it recognisably: wrapped to the width, its start and end there (a huge
    # name is cut in the middle)
    flat, shown = re.sub(r"\s", "", visible(name)), re.sub(r"\s", "", rest)
    assert flat[:20] in shown and flat[-20:] in shown
    assert len(out) < 40 * MAX_TEXT  # a 200,000-character name does not make a huge report


def test_markdown_code_spans_hold_the_name(case: tuple[str, Report]) -> None:
    name, report = case
    md = render_markdown(report)
    assert _unsafe_left(md) == []
    assert len(md) < 20 * MAX_TEXT
    tokens = MarkdownIt("commonmark").enable("table").parse(md)
    assert not [t for t in tokens if t.type == "html_block"]
    inline = [c for t in tokens if t.type == "inline" for c in (t.children or [])]
    assert not [c for c in inline if c.type == "html_inline"]
    assert not [c for c in inline if c.type == "link_open"]  # "[md link](javascript:...)" stays text
    spans = {c.content for c in inline if c.type == "code_inline"}
    assert shorten(visible(name), 80) in spans  # the kernel table cell: the whole shown name, one span
    if len(name) < MAX_TEXT:
        assert visible(name) in " ".join(spans)  # the trace path and locations hold it in full elsewhere


def test_capture_summary_and_tensorboard_text(case: tuple[str, Report], tmp_path: Path) -> None:
    name, report = case
    section = CaptureSection(run_dir=f"/logs/{name}", traces=[f"/logs/{name}.pt.trace.json.gz"], recorded_steps=[[1, 3]],
                             memory_snapshots=[f"/logs/{name}.pickle"], tensorboard_dir=f"/logs/{name}",
                             failures={"report writer": f"OSError: {name}"}, steps=3)
    report = Report(command="capture", inputs=report.inputs, traces=report.traces, findings=report.findings,
                    sections=[section], notes=[f"note about {name}"])
    md = findings_markdown(report)
    assert _unsafe_left(md) == []
    spans = [c.content for t in MarkdownIt("commonmark").enable("table").parse(md) if t.type == "inline"
             for c in (t.children or []) if c.type == "code_inline"]
    assert any(visible(name)[:100] in s for s in spans)
    # the lines printed at the end of a run: from the report and the run's copied facts (step count, report.md)
    printed = short_report(report, SimpleNamespace(steps=3, report_md=str(tmp_path / "report.md")))
    assert _unsafe_left(printed) == []
    assert visible(name)[:20] in printed

    pytest.importorskip("torch")
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from gpuprof.render.tensorboard import TEXT_TAG, TensorBoardWriter

    with TensorBoardWriter(tmp_path / "tb") as w:
        w.add_text(md + f"\nraw {name}\n")  # also what a careless caller might pass
    acc = EventAccumulator(str(tmp_path / "tb"), size_guidance={"tensors": 0})
    acc.Reload()
    text = acc.Tensors(f"{TEXT_TAG}/text_summary")[0].tensor_proto.string_val[0].decode("utf-8")
    assert _unsafe_left(text) == []
    assert visible(name)[:20] in text


@pytest.mark.parametrize("name", NAMES, ids=IDS)
def test_memory_sections_show_sites_inert(name: str, tmp_path: Path) -> None:
    b = SnapshotBuilder()
    user = b.stack((f"/home/u/{name}.py", 7, name))
    b.alloc(64 * MiB, user)
    path = tmp_path / "snap.pickle"
    b.dump(path)
    section, findings, _ = analyze_memory(load_memory(str(path)), MemoryOptions())
    report = Report(command="memory", inputs=[str(path)], sections=[section], findings=findings)
    top = section.to_dict()["devices"][0]["top_sites"][0]["site"]
    assert name in top

    out = render_terminal(report, color=True, width=200)
    rest = _SGR.sub("", out)
    assert "\x1b" not in rest and _unsafe_left(rest) == []
    assert visible(name)[:15] in rest
    assert len(out) < 40 * MAX_TEXT

    md = render_markdown(report)
    assert _unsafe_left(md) == []
    tokens = MarkdownIt("commonmark").enable("table").parse(md)
    spans = [c.content for t in tokens if t.type == "inline" for c in (t.children or []) if c.type == "code_inline"]
    assert not [c for t in tokens if t.type == "inline" for c in (t.children or []) if c.type == "html_inline"]
    assert shorten(visible(top), 100) in spans


@pytest.mark.parametrize("width", [80, 50])
@pytest.mark.parametrize("name", TEXT_HOSTILE + [HUGE_NAME], ids=[f"text{i}" for i in range(len(TEXT_HOSTILE))] + ["huge"])
def test_terminal_directory_summary_shows_names_inert(name: str, width: int, tmp_path: Path) -> None:
    """A directory of traces (one summary, per-trace columns, grouped findings): trace file names,
    kernel, operator, sync and frame names all arrive inert, at widths that stack rows too."""
    d = tmp_path / "run"
    d.mkdir()
    file_part = name[:40].replace("/", "_").replace("\x00", "_") if name != HUGE_NAME else "huge"  # a file name holds no NUL
    for i in range(2):
        _trace(name, d / f"w{i}.{file_part}.pt.trace.json")
    report = analyze(str(d))
    assert len(report.traces) == 2
    out = render_terminal(report, color=True, width=width)
    rest = _SGR.sub("", out)
    assert "\x1b" not in rest and _unsafe_left(rest) == []
    assert "#1" in rest and "#2" in rest  # the per-trace summary, not a panel per trace
    assert len(out) < 80 * MAX_TEXT

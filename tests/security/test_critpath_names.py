"""The critical path and the what-if: hostile names stay inert text, and many names stay bounded.

The critical path names operators, kernels and runtime calls taken from the trace; the
what-if carries no name (a number and a fixed note). Both reach the terminal, markdown
and JSON through one row builder (``gpuprof/render/critpath.py``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from gpuprof.analysis import analyze
from gpuprof.render import render
from gpuprof.render.safe import MAX_TEXT, UNSAFE_CODEPOINTS, visible
from gpuprof.render.terminal import render_terminal
from gpuprof.trace.critpath.margin import NOTE_HIDDEN, NOTE_NOT_REPLAYED, NOTE_STARVES
from gpuprof.trace.critpath.path import MAX_PART_NAME, MAX_PARTS, PATH_KINDS
from gpuprof_testing.tracegen import TraceBuilder

from .conftest import HTML_HOSTILE, HUGE_NAME, TEXT_HOSTILE

NAMES = HTML_HOSTILE + TEXT_HOSTILE + [HUGE_NAME]
_SGR = re.compile(r"\x1b\[[0-9;]*m")


def _unsafe(text: str) -> list[str]:
    return sorted({repr(c) for c in text if ord(c) in UNSAFE_CODEPOINTS and c != "\n"})


@pytest.mark.parametrize("name", NAMES, ids=[f"name{i}" for i in range(len(NAMES))])
def test_hostile_names_on_the_path_stay_text(name: str, tmp_path: Path) -> None:
    b = TraceBuilder()
    for _ in range(3):
        with b.step():
            with b.op(name, input_types=["float"], us=2000):  # the host sets the pace: the operator is on the path
                b.kernel(name, us=100)
    report = analyze(str(b.write(tmp_path / "t.pt.trace.json")))
    cp = report.traces[0].critical_path
    # the name really reaches the renderers: whole, or its first MAX_PART_NAME characters and an ellipsis (a part is
    # a label; the operators view keeps a huge name whole)
    shown = name if len(name) <= MAX_PART_NAME else name[:MAX_PART_NAME] + "\u2026"
    assert cp is not None and any(p.name == shown for p in cp.parts)

    out = _SGR.sub("", render_terminal(report, color=True, width=160))
    assert "\x1b" not in out and _unsafe(out) == []
    assert "Critical path" in out and visible(name)[:10].strip() in out.replace("\n", "")
    assert len(out) < 40 * MAX_TEXT

    md = render(report, "markdown")
    assert _unsafe(md) == []
    tokens = MarkdownIt("commonmark").enable("table").parse(md)
    inline = [c for t in tokens if t.type == "inline" for c in (t.children or [])]
    assert not [t for t in tokens if t.type == "html_block"] and not [c for c in inline if c.type == "html_inline"]
    assert not [c for c in inline if c.type == "link_open"]

    doc = json.loads(render(report, "json"))
    assert any(p["name"] == shown for p in doc["traces"][0]["critical_path"]["parts"])  # JSON: exactly that


def test_many_distinct_names_make_a_bounded_path(tmp_path: Path) -> None:
    b = TraceBuilder()
    for _ in range(2):
        with b.step():
            for i in range(3000):  # each its own name, all on the path (back to back on the GPU)
                b.kernel(f"k{i}_" + "x" * 200, us=50.0)
            b.device_synchronize()
    report = analyze(str(b.write(tmp_path / "t.pt.trace.json")))
    cp = report.traces[0].critical_path
    assert cp is not None
    assert len(cp.parts) <= MAX_PARTS + len(PATH_KINDS)  # the rest of each kind folded into "(other)"
    assert sum(p.us for p in cp.parts) == pytest.approx(cp.length_us)
    assert len(json.dumps([p.name for p in cp.parts])) < 10_000


def test_a_hostile_thread_on_the_path_is_drawn_on_its_own_lane_as_data(tmp_path: Path) -> None:
    # another thread's operator on the path is drawn on that thread's lane, whose id is made from the trace's tid:
    # a stranger's string tid full of markup stays data (the lane is the timeline's own, no second lane made from
    # it) and the page carries it escaped
    from click.testing import CliRunner

    from gpuprof.cli import cli

    from .html_pages import page_data

    tid = "</script><script>window.__gpuprof_pwned=1</script>\u202e"
    op = HTML_HOSTILE[0]
    b = TraceBuilder()
    side = b.main_tid + 77
    for _ in range(3):
        with b.step():
            b.cpu(us=200)
            with b.thread(side, join=True):
                b.cpu(us=1500, name=op)  # the main thread waits for it: on the path
            b.kernel("k", us=100)
    doc = b.to_dict()
    for e in doc["traceEvents"]:
        if e.get("tid") == side:
            e["tid"] = tid
    trace = tmp_path / "t.pt.trace.json"
    trace.write_text(json.dumps(doc), encoding="utf-8")
    page = tmp_path / "report.html"
    r = CliRunner().invoke(cli, ["analyze", str(trace), "--html", str(page), "--format", "json",
                                 "-o", str(tmp_path / "report.json")])
    assert r.exit_code in (0, 1), r.output[-2000:]
    tl = page_data(page)["traces"][0]["timeline"]
    lane = f"host:{b.pid}:{tid}"
    lanes = [ln["id"] for ln in tl["lanes"]]
    assert lanes.count(lane) == 1
    rows = [c for c in tl["critical"] if c[0] == lane]
    assert rows and all(c[4] == op for c in rows)
    raw = page.read_text(encoding="utf-8")
    data = raw.split('<script id="data" type="application/json">', 1)[1].split("</script>", 1)[0]
    assert not set("<>&") & set(data) and data.isascii()
    assert "__gpuprof_pwned" not in raw.replace(data, "")


def test_notes_are_fixed_text() -> None:
    # a note is one of gpuprof's own sentences, never built from trace text
    for note in (NOTE_HIDDEN, NOTE_STARVES, NOTE_NOT_REPLAYED):
        assert _unsafe(note) == [] and "<" not in note and "`" not in note

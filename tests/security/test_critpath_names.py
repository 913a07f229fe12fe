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
from gpuprof.testing.tracegen import TraceBuilder
from gpuprof.trace.critpath.path import MAX_PART_NAME, MAX_PARTS, PATH_KINDS
from gpuprof.trace.critpath.whatif import NOTE_HIDDEN, NOTE_NOT_REPLAYED, NOTE_STARVES

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


def test_notes_are_fixed_text() -> None:
    # a note is one of gpuprof's own sentences, never built from trace text
    for note in (NOTE_HIDDEN, NOTE_STARVES, NOTE_NOT_REPLAYED):
        assert _unsafe(note) == [] and "<" not in note and "`" not in note

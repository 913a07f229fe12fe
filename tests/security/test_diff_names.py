"""Hostile operator and kernel names reach the diff's terminal and markdown output inert."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from markdown_it import MarkdownIt

from gpuprof.analysis import analyze
from gpuprof.diff.compare import diff_reports
from gpuprof.diff.render import render_diff_markdown, render_diff_terminal
from gpuprof.render.safe import MAX_TEXT, UNSAFE_CODEPOINTS, visible
from gpuprof_testing.tracegen import TraceBuilder

from .conftest import HTML_HOSTILE, HUGE_NAME, TEXT_HOSTILE

NAMES = HTML_HOSTILE + TEXT_HOSTILE + [HUGE_NAME, "| a | b |\n| --- |", "[x](javascript:alert(1))", "``code``"]
IDS = [f"name{i}" for i in range(len(NAMES))]
_SGR = re.compile(r"\x1b\[[0-9;]*m")


def _trace(name: str, us: int, path: Path) -> str:
    b = TraceBuilder(device="GPU")
    for _ in range(3):
        with b.step():
            with b.op(name, input_types=["float"]):
                b.kernel(name, us=us)
            b.cpu(us=100, name="aten::other")
            b.device_synchronize()  # each step holds its own kernels: steady steps, so the slower kernel is change, not noise
    return str(b.write(path))


@pytest.fixture(scope="module", params=range(len(NAMES)), ids=IDS)
def case(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, Any]]:
    name = NAMES[request.param]
    d = tmp_path_factory.mktemp("t")
    before = analyze(_trace(name, 500, d / "before.pt.trace.json")).to_dict()
    after = analyze(_trace(name, 5000, d / "after.pt.trace.json")).to_dict()
    diff = diff_reports(before, after)
    assert diff["kernels"]["slower"][0]["name"] == name  # the name really reaches the renderers
    return name, diff


def test_terminal_diff_is_inert(case: tuple[str, dict[str, Any]]) -> None:
    name, diff = case
    out = _SGR.sub("", render_diff_terminal(diff, color=True, width=160))
    assert "\x1b" not in out
    assert not [c for c in out if ord(c) in UNSAFE_CODEPOINTS and c != "\n"]
    assert len(out) < 60 * MAX_TEXT


def test_markdown_diff_keeps_names_in_code_spans(case: tuple[str, dict[str, Any]]) -> None:
    name, diff = case
    md = render_diff_markdown(diff)
    assert not [c for c in md if ord(c) in UNSAFE_CODEPOINTS and c != "\n"]
    tokens = MarkdownIt("commonmark").enable("table").parse(md)
    assert not [t for t in tokens if t.type == "html_block"]
    inline = [c for t in tokens if t.type == "inline" for c in (t.children or [])]
    assert not [c for c in inline if c.type in ("html_inline", "link_open")]
    spans = " ".join(c.content for c in inline if c.type == "code_inline")
    assert visible(name)[:20].replace("\n", " ") in spans.replace("\\|", "|") or len(name) > MAX_TEXT

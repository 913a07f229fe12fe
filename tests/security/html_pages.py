"""Snapshots and traces whose names come from the hostile corpus, and a reader for the page gpuprof writes.

Shared by the security tests of the HTML pages (tests/security/test_html_*.py).
"""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from gpuprof_testing.snapshots import GiB, MiB, SnapshotBuilder
from gpuprof_testing.tracegen import TraceBuilder

#: A file name that is itself hostile (it becomes the page title).
HOSTILE_FILE_STEM = "snap'\" autofocus onfocus='x'<!--<script>"


def snapshot_label(i: int, name: str) -> str:
    """The site label gpuprof gives the i-th hostile frame of :func:`hostile_snapshot`."""
    return f"{name}:{10 + i} ({name})"


def hostile_snapshot(directory: Path, names: list[str]) -> Path:
    """One allocation site per name (file name and function are the name), all live at the end, then an OOM
    at a hostile site; the i-th name holds (len(names) + 4 - i) MiB, so the sites rank in corpus order."""
    b = SnapshotBuilder(device_memory=1 * GiB)
    for i, name in enumerate(names):
        b.alloc((len(names) + 4 - i) * MiB, b.stack((name, 10 + i, name), ("/home/u/proj/train.py", 50, "main")))
    try:
        b.alloc(4 * GiB, b.stack((names[0], 99, names[-1])))
    except MemoryError:
        pass  # the snapshot records the oom entry, as PyTorch does
    return Path(b.dump(directory / f"{HOSTILE_FILE_STEM}.pickle"))


def hostile_trace(directory: Path, names: list[str]) -> Path:
    """[memory] events under operators named by the corpus and under Python frames named by it."""
    tb = TraceBuilder(total_memory=80 << 30)
    n = len(names)
    for step in range(2):
        with tb.step():
            for i, name in enumerate(names):
                with tb.op(name):
                    tb.memory(alloc=(2 * n + 8 - i) * MiB if step == 0 else 0)
                with tb.python(name, 10 + i, name):
                    tb.memory(alloc=(n + 4 - i) * MiB if step == 0 else 0)
            tb.cpu(us=50)
    return tb.write(directory / f"{HOSTILE_FILE_STEM}.pt.trace.json")


class PageParts(HTMLParser):
    """What an HTML parser finds in a page: every start tag with its attributes, and each script's text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.scripts: list[tuple[dict[str, str | None], str]] = []
        self.styles: list[str] = []
        self.title = ""
        self._in: str | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag in ("script", "style", "title"):
            self._in, self._text = tag, []

    def handle_data(self, data: str) -> None:
        if self._in:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == self._in:
            text = "".join(self._text)
            if tag == "script":
                self.scripts.append((self.tags[-1][1] if self.tags[-1][0] == "script" else {}, text))
            elif tag == "style":
                self.styles.append(text)
            else:
                self.title = text
            self._in = None


def parse_page(path: Path) -> PageParts:
    parts = PageParts()
    parts.feed(path.read_text(encoding="utf-8"))
    parts.close()
    return parts


def page_data(path: Path) -> dict[str, Any]:
    """The JSON document of a page, read as the browser reads it (the text of <script id="data">)."""
    parts = parse_page(path)
    texts = [text for attrs, text in parts.scripts if attrs.get("id") == "data"]
    assert len(texts) == 1
    return json.loads(texts[0])


def write_hostile_pages(directory: Path, names: list[str]) -> dict[str, Path]:
    """``gpuprof memory --html`` on a hostile snapshot and a hostile trace; {"snapshot"|"trace": page path}."""
    from click.testing import CliRunner

    from gpuprof.cli import cli

    pages = {}
    for kind, src in (("snapshot", hostile_snapshot(directory, names)), ("trace", hostile_trace(directory, names))):
        out = directory / f"{kind}.html"
        r = CliRunner().invoke(cli, ["memory", str(src), "--html", str(out), "--top", str(2 * len(names) + 10),
                                     "--format", "json"], catch_exceptions=False)
        assert r.exit_code in (0, 1), r.output[-2000:]
        pages[kind] = out
    return pages


def shown(name: str, limit: int = 300) -> str:
    """How the page shows a name: the first ``limit`` characters and how many more there are (as its script does)."""
    return name if len(name) <= limit else name[:limit] + f"\u2026 ({len(name) - limit} more characters)"

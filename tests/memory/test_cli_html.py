"""gpuprof memory on the command line, the section renderers, and the HTML page in a real headless browser."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpuprof.cli import cli
from gpuprof.memory.analysis import analyze_memory
from gpuprof.memory.html import build_page_data, render_html
from gpuprof.memory.render import diff_markdown, memory_markdown, memory_terminal
from gpuprof.memory.snapshot import load_snapshot

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _run(*args: str):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_json_output_and_exit_codes(clean_snapshot: Path, oom_snapshot: Path) -> None:
    r = _run("memory", str(clean_snapshot), "--format", "json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["command"] == "memory" and doc["sections"][0]["kind"] == "memory"
    r = _run("memory", str(oom_snapshot), "--format", "json")
    assert r.exit_code == 1
    codes = {f["code"] for f in json.loads(r.output)["findings"]}
    assert {"GP511", "GP512"} <= codes
    assert _run("memory", str(oom_snapshot), "--format", "json", "--fail-on", "error").exit_code == 1
    assert _run("memory", str(oom_snapshot), "--format", "json", "--ignore", "GP51").exit_code == 0


def test_bad_input_exit_2(tmp_path: Path) -> None:
    p = tmp_path / "x.pickle"
    p.write_bytes(b"not a pickle at all")
    r = _run("memory", str(p))
    assert r.exit_code == 2
    assert _run("memory", str(tmp_path / "missing.pickle")).exit_code == 2


def test_diff_cli(leak_pair: tuple[Path, Path]) -> None:
    a, b = leak_pair
    r = _run("memory", "diff", str(a), str(b), "--format", "json")
    assert r.exit_code == 1
    doc = json.loads(r.output)
    assert doc["command"] == "memory-diff"
    assert doc["findings"][0]["location"]["line"] == 61
    r = _run("memory", "diff", str(a), str(b), "--format", "markdown", "--min-growth", "1GiB")
    assert r.exit_code == 0 and "train.py:61" in r.output


def test_section_renderers(oom_snapshot: Path, leak_pair: tuple[Path, Path]) -> None:
    from rich.console import Console

    section, _, _ = analyze_memory(load_snapshot(oom_snapshot))
    md = memory_markdown(section)
    assert "Top holders at the peak" in md and "`/home/u/proj/model.py:30 (forward)`" in md
    assert "**OOM**: 100.00 MiB requested, 64.00 MiB free" in md
    console = Console(record=True, width=160, color_system=None)
    memory_terminal(console, section)
    text = console.export_text()
    assert "peak allocated" in text and "model.py:30 (forward)" in text
    from gpuprof.memory.diff import diff_report

    rep = diff_report(str(leak_pair[0]), str(leak_pair[1]))
    assert "| `/home/u/proj/train.py:61 (main)` | 24.00 MiB |" in diff_markdown(rep.sections[0])


def _page(snapshot: Path, tmp_path: Path) -> tuple[Path, dict]:
    data = load_snapshot(snapshot)
    _, findings, analyses = analyze_memory(data)
    page = build_page_data(data, analyses, findings)
    out = tmp_path / "memory.html"
    out.write_text(render_html(page), encoding="utf-8")
    return out, page


def test_html_is_self_contained_and_aggregated(oom_snapshot: Path, tmp_path: Path) -> None:
    out, page = _page(oom_snapshot, tmp_path)
    text = out.read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text)  # nothing fetched
    assert "default-src 'none'" in text
    dev = page["devices"][0]
    assert [s["label"] for s in dev["slots"]][:2] == ["/home/u/proj/model.py:30 (forward)",
                                                       "/home/u/proj/model.py:12 (__init__)"]
    assert len(dev["t"]) == len(dev["allocated"]) == len(dev["series"]) <= 1500
    # stacked sites + pre-history band equal the allocated total in every bucket
    assert all(sum(row) == a for row, a in zip(dev["series"], dev["allocated"]))
    assert max(dev["allocated"]) == dev["peak_allocated"]


def test_html_cli_writes_file(oom_snapshot: Path, tmp_path: Path) -> None:
    out = tmp_path / "m.html"
    r = _run("memory", str(oom_snapshot), "--html", str(out), "--format", "json")
    assert r.exit_code == 1 and out.stat().st_size > 10_000


@pytest.mark.slow  # slow pass: a real trace (or job) analysed whole; the README's fast command stays under 300 CPU s on a 2-core VM
@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium package (apt-get install -y chromium)")
def test_html_renders_in_headless_chromium_offline(oom_snapshot: Path, tmp_path: Path) -> None:
    sync_api = pytest.importorskip("playwright.sync_api", reason="needs the playwright Python package")
    out, page = _page(oom_snapshot, tmp_path)
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            ctx = browser.new_context(offline=True, viewport={"width": 1300, "height": 900})
            pg = ctx.new_page()
            errors: list[str] = []
            fetched: list[str] = []
            pg.on("pageerror", lambda e: errors.append(str(e)))
            pg.on("request", lambda r: fetched.append(r.url))
            pg.goto(out.as_uri())
            pg.wait_for_function("+document.body.dataset.rendered >= 1", timeout=10_000)
            assert errors == []
            assert fetched == [out.as_uri()]  # the page itself, nothing else
            series = pg.evaluate("window.gpuprofSeries")
            assert series == [s["label"] for s in page["devices"][0]["slots"]]
            # the canvas is drawn: many non-white pixels, in more than two colours
            stats = pg.evaluate("""() => { const c = document.getElementById('c');
                const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data; let ink = 0; const cols = new Set();
                for (let i = 0; i < d.length; i += 4) { if (d[i] < 250 || d[i+1] < 250 || d[i+2] < 250) { ink++; cols.add(d[i]+','+d[i+1]+','+d[i+2]); } }
                return [ink, cols.size]; }""")
            assert stats[0] > 50_000 and stats[1] > 4
            assert pg.locator("#top tr").count() == 1 + len(page["devices"][0]["top"])
            # hover over the middle of the plot shows a stack; a drag zooms (redraw counter increases)
            box = pg.locator("#c").bounding_box()
            pg.mouse.move(box["x"] + box["width"] * 0.55, box["y"] + box["height"] * 0.85)
            tip = pg.locator("#tip").text_content()
            assert "allocated" in tip and "model.py" in tip
            before = int(pg.evaluate("document.body.dataset.rendered"))
            pg.mouse.down()
            pg.mouse.move(box["x"] + box["width"] * 0.7, box["y"] + 100)
            pg.mouse.up()
            assert int(pg.evaluate("document.body.dataset.rendered")) > before
            shot = tmp_path / "shot.png"
            pg.screenshot(path=str(shot), full_page=True)
            blank = tmp_path / "blank.png"
            # a fresh page: the viewer's policy (trusted types) refuses document.write, which set_content uses
            empty = ctx.new_page()
            empty.set_content("<html><body></body></html>")
            empty.screenshot(path=str(blank), full_page=True)
            assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
            assert shot.stat().st_size > 5 * blank.stat().st_size  # a blank page compresses to almost nothing
        finally:
            browser.close()


def test_terminal_escapes_markup_in_notes_and_sites() -> None:
    from rich.console import Console

    from gpuprof.memory.analysis import MemorySection

    dev = {"device": "cpu", "total_memory": None, "history_events": 0, "time_unit": "us", "time_start": None,
           "num_allocations": 0, "live_blocks": 0,
           "allocated": {"initial": 0, "final": 0, "peak": 0, "peak_at": None},
           "reserved": {"initial": None, "final": None, "peak": None, "peak_at": None},
           "timeline": [], "top_sites": [{"site": "[bold]x[/bold]", "bytes": 1, "blocks": 1, "share": 1.0}],
           "size_classes": [], "fragmentation": {}, "ooms": [],
           "pending_free": {"deferred_frees": 0, "deferred_bytes": 0, "max_bytes_waiting": 0, "max_wait": 0}}
    sec = MemorySection(source="t.json", source_type="trace", devices=[dev], notes=["the [memory] events"])
    console = Console(record=True, width=120, color_system=None)
    memory_terminal(console, sec)
    text = console.export_text()
    assert "the [memory] events" in text and "[bold]x[/bold]" in text

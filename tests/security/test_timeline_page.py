"""The timeline (GP.timeline) of a trace whose kernel, operator and thread names are hostile stays inert.

Names with ``<script>``, ``</script>``, quotes, event-handler attributes, RTL overrides and a 200,000-character
name reach the page only inside its escaped JSON; the lane labels are Text nodes, the hover line is textContent,
the names in the boxes are canvas pixels. Checked statically (the page's data), under the minimal DOM in Node
(what the script builds, with the shim refusing innerHTML and unsafe attributes), and in headless Chromium
offline with the content-security policy on and bypassed (nothing runs, nothing loads, the names read back as
the literal text they are). A saved report whose timeline values do not fit is refused by every reader.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gpuprof.cli import cli
from gpuprof_testing.tracegen import TraceBuilder

from .conftest import HTML_HOSTILE, HUGE_NAME
from .html_pages import page_data

RTL = ["\u202eevil\u202c.py", "\u200f\u05d0\u05d1 rtl \u2067isolate\u2069", "quote\"'`both"]
NAMES = HTML_HOSTILE + RTL + [HUGE_NAME]
THREAD_NAME = "</script><script>window.__gpuprof_pwned=1</script>\u202e thread"
SIDE = 4300
SHIM = Path(__file__).with_name("page_shim.js")
NODE = shutil.which("node")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _hostile_trace(path: Path) -> Path:
    tb = TraceBuilder()
    for _ in range(3):
        with tb.step():
            for i, name in enumerate(NAMES):
                with tb.op(name):
                    tb.kernel(name, us=400 + 20 * i)
            with tb.thread(SIDE, join=True):
                with tb.op(HTML_HOSTILE[2]):
                    tb.kernel("side", us=300)
            tb.sync_item()
    doc = tb.to_dict()
    for e in doc["traceEvents"]:  # the side thread's name, as a stranger's trace could write it
        if e.get("ph") == "M" and e.get("name") == "thread_name" and e.get("tid") == SIDE:
            e["args"]["name"] = THREAD_NAME
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("timeline")
    out = d / "report.html"
    r = CliRunner().invoke(cli, ["analyze", str(_hostile_trace(d / "hostile.pt.trace.json")), "--html", str(out),
                                 "--format", "json", "-o", str(d / "report.json")])
    assert r.exit_code in (0, 1), r.output[-2000:]
    return out


def _timeline(page: Path) -> dict[str, Any]:
    tl: dict[str, Any] = page_data(page)["traces"][0]["timeline"]
    return tl


def test_hostile_names_are_in_the_data_clipped(page: Path) -> None:
    tl = _timeline(page)
    names = set(tl["names"])
    assert set(HTML_HOSTILE + RTL) <= names
    assert HUGE_NAME[:300] + "\u2026" in names and HUGE_NAME not in names  # bounded: a name is at most 300 characters
    assert any(ln["label"] == THREAD_NAME for ln in tl["lanes"])
    raw = page.read_text(encoding="utf-8")
    data = raw.split('<script id="data" type="application/json">', 1)[1].split("</script>", 1)[0]
    assert not set("<>&") & set(data) and data.isascii()  # escaped: no markup and no RTL mark in the page's text
    assert THREAD_NAME not in raw.replace(data, "")


@pytest.mark.skipif(NODE is None, reason="needs node to run the page's script")
def test_page_script_draws_the_timeline_as_text_and_pixels(page: Path) -> None:
    run = subprocess.run([NODE, str(SHIM), str(page)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr[-2000:]  # the shim throws on innerHTML and on*/style/src/href attributes
    got = json.loads(run.stdout)
    tl = _timeline(page)
    labels = [ln["label"] for ln in tl["lanes"]]
    assert got["lanes"] == [x if len(x) <= 80 else x[:80] + f"\u2026 ({len(x) - 80} more characters)" for x in labels]
    assert THREAD_NAME in got["lanes"]  # a Text node holding the literal name
    assert got["canvas"] and got["canvas"][0] >= tl["events_kept"]  # every event row drawn (and the backgrounds)
    codes = {m["code"] for m in tl["markers"]}
    assert codes and {m.split(" ")[0] for m in got["marks"]} == codes


def _visit(browser: Any, page: Path, bypass_csp: bool) -> tuple[Any, Any, dict[str, list[str]]]:
    ctx = browser.new_context(offline=True, bypass_csp=bypass_csp, viewport={"width": 1280, "height": 900})
    pg = ctx.new_page()
    seen: dict[str, list[str]] = {"dialogs": [], "errors": [], "requests": []}
    pg.on("dialog", lambda d: (seen["dialogs"].append(d.message), d.dismiss()))
    pg.on("pageerror", lambda e: seen["errors"].append(str(e)))
    pg.on("request", lambda r: seen["requests"].append(r.url))
    pg.goto(page.as_uri())
    pg.wait_for_function("document.body.dataset.rendered === '1'", timeout=15_000)
    return ctx, pg, seen


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium package (apt-get install -y chromium)")
@pytest.mark.parametrize("bypass_csp", [False, True], ids=["csp", "csp-bypassed"])
def test_timeline_in_chromium_runs_nothing_and_shows_names_as_text(browser: Any, page: Path, bypass_csp: bool) -> None:
    ctx, pg, seen = _visit(browser, page, bypass_csp)
    try:
        tl = _timeline(page)
        pg.locator("#timeline canvas").scroll_into_view_if_needed()
        box = pg.locator("#timeline canvas").bounding_box()
        assert box is not None and box["width"] > 600
        info = pg.locator("#timeline .gp-tl-info")
        texts = set()
        for fx in (0.05, 0.2, 0.35, 0.5, 0.65, 0.8, 0.95):  # hover along every lane, then click (markers go to cards)
            for fy in (0.1, 0.3, 0.5, 0.7, 0.9):
                pg.mouse.move(box["x"] + box["width"] * fx, box["y"] + box["height"] * fy)
                texts.add(info.text_content() or "")
        pg.mouse.click(box["x"] + box["width"] * 0.5, box["y"] + 12)
        pg.mouse.wheel(0, -400)
        for b in pg.locator("#timeline button").all():
            b.click()
        assert pg.evaluate("window.__gpuprof_pwned") is None and seen["dialogs"] == [] and seen["errors"] == []
        assert seen["requests"] == [page.as_uri()]
        labels = pg.locator("#timeline .gp-tl-lane").all_text_contents()
        assert THREAD_NAME in labels and len(labels) == len(tl["lanes"])
        hovered = " ".join(texts)
        assert any(n in hovered for n in HTML_HOSTILE), hovered[:500]  # a hostile name read back as its text
        assert pg.evaluate("document.querySelectorAll('script').length") == 2
        assert pg.evaluate("document.querySelectorAll('img,iframe,object,embed,a,form,base,link').length") == 0
    finally:
        ctx.close()


@pytest.mark.parametrize("where, value, field", [
    (("lanes", 0, "events", 0), [0.0, 1.0, 0, 2, 0], "lanes[0].events[0]"),  # a row one value short
    (("lanes", 0, "events", 0, 3), "<script>", "lanes[0].events[0][3]"),  # a kind that is not an index
    (("lanes", 0, "events", 0, 5), 0, "lanes[0].events[0][5]"),  # a block of no events
    (("lanes", 0, "events", 0, 1), -5.0, "lanes[0].events[0][1]"),  # a negative duration
    (("critical",), [["gpu:0:7", 1.0, 2.0, "kernel", "k"]], "critical[0]"),  # no count
    (("markers", 0, "code"), 7, "markers[0].code"),
])
def test_a_saved_timeline_that_does_not_fit_is_refused(page: Path, tmp_path: Path, where: tuple[Any, ...], value: Any,
                                                       field: str) -> None:
    doc = json.loads((page.parent / "report.json").read_text(encoding="utf-8"))
    target = doc["traces"][0]["timeline"]
    if where == ("critical",):
        target["critical"] = value
    else:
        for k in where[:-1]:
            target = target[k]
        target[where[-1]] = value
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc), encoding="utf-8")
    res = CliRunner().invoke(cli, ["analyze", str(bad)])
    assert res.exit_code == 2, res.output[-500:]
    line = res.output.strip()
    assert "\n" not in line and str(bad) in line and f"traces[0].timeline.{field}" in line
    from gpuprof.errors import InputError
    from gpuprof.tbplugin.data import read_report

    with pytest.raises(InputError, match="malformed report"):
        read_report(bad)

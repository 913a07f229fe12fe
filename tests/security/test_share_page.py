"""The shareable HTML pages (``analyze --html``, ``diff --html``) stay inert with hostile names, and still draw.

Checked three ways: statically (an HTML parser: the fixed skeleton, the policy
allowing only the page's own script and style by hash, the data only inside
the escaped JSON element), by running the page's own script under a minimal
DOM in Node (it renders the tables and the chart, the names arrive as text,
no event-handler or style attribute is ever set, no innerHTML), and in
headless Chromium offline when it is installed (nothing runs, nothing loads).
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
from gpuprof.memory.htmlsafe import csp_hash
from gpuprof_testing.tracegen import TraceBuilder

from .conftest import HTML_HOSTILE, HUGE_NAME, TEXT_HOSTILE
from .html_pages import HOSTILE_FILE_STEM, page_data, parse_page, shown
from .views_dom import check_views

CORPUS = HTML_HOSTILE + TEXT_HOSTILE + [HUGE_NAME]
SHIM = Path(__file__).with_name("page_shim.js")
NODE = shutil.which("node")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _trace(path: Path, us: int) -> Path:
    b = TraceBuilder(device="NVIDIA H100 80GB HBM3", cc=(9, 0))
    for _ in range(3):
        with b.step():
            for i, name in enumerate(CORPUS):
                with b.op(name, input_types=["float"]):
                    b.kernel(name, us=us + 10 * i)
            b.cpu(us=100, name="aten::other")
            b.device_synchronize()  # each step holds its own kernels: steady steps, so the diff's slower rows are change, not noise
    return Path(b.write(path))


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("share")
    before = _trace(d / f"{HOSTILE_FILE_STEM}.before.pt.trace.json", 500)
    after = _trace(d / f"{HOSTILE_FILE_STEM}.after.pt.trace.json", 2000)
    out = {"report": d / "report.html", "diff": d / "diff.html"}
    r = CliRunner().invoke(cli, ["analyze", str(before), "--html", str(out["report"]), "--format", "json"])
    assert r.exit_code in (0, 1), r.output[-2000:]
    r = CliRunner().invoke(cli, ["diff", str(before), str(after), "--html", str(out["diff"]), "--format", "json"])
    assert r.exit_code == 0, r.output[-2000:]
    return out


def _names(data: dict[str, Any]) -> set[str]:
    if data["kind"] == "report":
        return {r["name"] for t in data["traces"] for r in t["views"]["kernels"]}
    return {r["name"] for r in data["diff"]["kernels"]["slower"]}


@pytest.mark.parametrize("kind", ["report", "diff"])
def test_static_skeleton_policy_and_data(pages: dict[str, Path], kind: str) -> None:
    path = pages[kind]
    data = page_data(path)
    assert set(CORPUS) <= _names(data)  # the hostile names really are in the page's data
    parts = parse_page(path)
    assert [t for t, _ in parts.tags] == ["html", "head", "meta", "meta", "title", "style", "body", "h1", "p", "main",
                                           "script", "script"]
    code = [text for attrs, text in parts.scripts if "id" not in attrs]
    assert len(code) == 1 and len(parts.styles) == 1
    meta = next(a for t, a in parts.tags if t == "meta" and a.get("http-equiv"))
    policy = {d.split()[0]: d.split()[1:] for d in (meta["content"] or "").split(";") if d.split()}
    assert policy["default-src"] == ["'none'"] and policy["connect-src"] == ["'none'"]
    assert policy["script-src"] == [csp_hash(code[0])] and policy["style-src"] == [csp_hash(parts.styles[0])]
    raw = path.read_text(encoding="utf-8")
    data_text = raw.split('<script id="data" type="application/json">', 1)[1].split("</script>", 1)[0]
    assert not set("<>&") & set(data_text) and data_text.isascii()
    outside = raw.replace(data_text, "")
    for name in HTML_HOSTILE:
        assert name not in outside
    assert HOSTILE_FILE_STEM not in outside.split("<title>")[0]


@pytest.mark.skipif(NODE is None, reason="needs node to run the page's script")
@pytest.mark.parametrize("kind", ["report", "diff"])
def test_page_script_renders_names_as_text(pages: dict[str, Path], kind: str) -> None:
    run = subprocess.run([NODE, str(SHIM), str(pages[kind])], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr[-2000:]  # the shim throws on innerHTML and on*/style/src/href attributes
    got = json.loads(run.stdout)
    assert got["rendered"] == "1"
    assert int(got["bars"]) == (3 if kind == "report" else 6) and got["rects"] == int(got["bars"])  # one bar a step
    # HTML from createElement, and only these SVG elements (createElementNS, the SVG namespace); the timeline's
    # canvas and its buttons (GP.timeline)
    assert set(got["tags"]) <= {"BODY", "BUTTON", "CANVAS", "DIV", "H2", "H3", "INPUT", "MAIN", "P", "SECTION", "SPAN",
                                "TABLE", "TD", "TH", "TR", "svg", "rect", "line", "text", "title"}
    cells = set(got["cells"])
    assert {shown(n) for n in CORPUS} <= cells  # every hostile kernel name, as the literal text it is
    if kind == "diff":
        assert any(h.startswith("Findings fixed (") for h in got["h3"])
        # every row the diff document holds, in every changed-kernel/operator table (GP.diff, the tab's drawing too)
        d = page_data(pages[kind])["diff"]
        want = {f"{k}-{w}": len(d[k][w]) for k in ("operators", "kernels") for w in ("slower", "faster", "added", "removed") if d[k][w]}
        assert {k: v for k, v in got["drawn"] if k in want} == want and want["kernels-slower"] == len(CORPUS)
    else:  # the shim typed "aten" into every search box: each view table keeps the rows whose names hold it
        views = page_data(pages[kind])["traces"][0]["views"]
        want = {f"view-{v}": sum(1 for r in views[v] if "aten" in (r["name"] + (r.get("input_shapes") or "")).lower())
                for v in ("operators", "kernels") if views[v]}
        assert dict(got["searched"]) == want and 0 < want["view-kernels"] < len(views["kernels"])


@pytest.mark.browser  # headless Chromium
@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium package (apt-get install -y chromium)")
@pytest.mark.parametrize("bypass_csp", [False, True], ids=["csp", "csp-bypassed"])
@pytest.mark.parametrize("kind", ["report", "diff"])
def test_offline_in_chromium(pages: dict[str, Path], kind: str, bypass_csp: bool) -> None:
    sync_api = pytest.importorskip("playwright.sync_api", reason="needs the playwright Python package")
    path = pages[kind]
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"])
        try:
            ctx = b.new_context(offline=True, bypass_csp=bypass_csp)
            pg = ctx.new_page()
            dialogs: list[str] = []
            errors: list[str] = []
            requests: list[str] = []
            pg.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
            pg.on("pageerror", lambda e: errors.append(str(e)))
            pg.on("request", lambda r: requests.append(r.url))
            pg.goto(path.as_uri())
            pg.wait_for_function("document.body.dataset.rendered === '1'", timeout=15_000)
            for th in pg.locator("th").all()[:10]:
                th.click()
            assert pg.evaluate("window.__gpuprof_pwned") is None and dialogs == [] and errors == []
            assert requests == [path.as_uri()]
            assert pg.evaluate("document.scripts.length") == 2
            assert pg.evaluate("document.querySelectorAll('img,image,use,foreignObject,iframe,object,embed,a,form,base,link')"
                               ".length") == 0
            cells = set(pg.locator("td").all_text_contents())
            assert {shown(n) for n in CORPUS} <= cells
            # the step chart draws: one bar a step, the longest reaching most of the plot's height
            heights = pg.evaluate("[...document.querySelectorAll('#steps-chart rect.bar')].map(r => r.getBoundingClientRect().height)")
            assert len(heights) == (3 if kind == "report" else 6) and max(heights) > 100
        finally:
            b.close()


@pytest.mark.slow  # slow pass: a real trace (or job) analysed whole; the README's fast command stays under 300 CPU s on a 2-core VM
@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium package (apt-get install -y chromium)")
def test_views_whole_sortable_and_searchable_in_chromium(pages: dict[str, Path]) -> None:
    """The report page's views: every row, hostile names as text, sorting by a header, the search box."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="needs the playwright Python package")
    views = page_data(pages["report"])["traces"][0]["views"]
    assert len(views["kernels"]) == len(CORPUS)  # every kernel of the trace, none cut
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"])
        try:
            pg = b.new_context(offline=True).new_page()
            errors: list[str] = []
            pg.on("pageerror", lambda e: errors.append(str(e)))
            pg.on("dialog", lambda d: (errors.append(d.message), d.dismiss()))
            pg.goto(pages["report"].as_uri())
            pg.wait_for_function("document.body.dataset.rendered === '1'", timeout=15_000)
            check_views(pg, views, "onfocus")
            assert pg.evaluate("window.__gpuprof_pwned") is None and errors == []
        finally:
            b.close()


def test_tab_and_page_draw_with_one_code(pages: dict[str, Path]) -> None:
    """The --html pages and the TensorBoard tab inline the same drawing code (gpuprof/render/web) before their
    own layout; tables, sorting, search, charts and findings live only there, so the two cannot drift apart."""
    from gpuprof.htmlpage import page as share
    from gpuprof.render import web
    from gpuprof.tbplugin import page as tab

    for kind in ("report", "diff"):
        (code,) = [text for attrs, text in parse_page(pages[kind]).scripts if "id" not in attrs]
        assert code.startswith(web.SCRIPT) and parse_page(pages[kind]).styles[0].startswith(web.STYLE)
    assert web.SCRIPT + tab._TAB_SCRIPT in tab.INDEX_HTML and web.STYLE + tab._TAB_STYLE in tab.INDEX_HTML
    for own in (share._PAGE_SCRIPT, tab._TAB_SCRIPT):  # no second table, sorter, chart, findings or diff renderer
        for marker in ("localeCompare", ".sort(", "createElementNS", "aria-sort", "data-code", "type: \"search\"",
                       # the comparison: before/after rows, better/worse colouring, predicted/measured savings,
                       # the diff document's lists; only GP.diff (report.js) draws them
                       "\"better\"", "\"worse\"", "predicted_saving", "measured_saving", "cost_before", "change_us",
                       ".slower", ".faster", "[\"slower\"", "findings.removed", "\"before\"", ".metrics",
                       "compare-table", "cmpRow", "findingList"):
            assert marker not in own, marker
    # both surfaces hand the diff document to that one function
    assert "GP.diff(" in share._PAGE_SCRIPT and "GP.diff(box, j.compare.diff" in tab._TAB_SCRIPT
    assert share._PAGE_SCRIPT.count("GP.diff(") == 1 and tab._TAB_SCRIPT.count("GP.diff(") == 1

"""The two surfaces of a comparison draw the same rows with the same code, and hostile names stay inert there.

``gpuprof diff --html`` and the TensorBoard tab's "Compare with" section both hand ``gpuprof diff``'s document
to ``GP.diff`` (gpuprof/render/web/report.js). Here both are opened in headless Chromium: the tab served by the
plugin's own routes (a local WSGI server on 127.0.0.1, no TensorBoard needed: the routes are the plugin's, the
page is the one TensorBoard serves), the page from its file, offline. Every table the comparison draws (step
metrics, findings fixed/new/changed, operators and kernels slower/faster/added/removed) must hold the same rows,
cell for cell, on both: on the real V100 samples (num_workers 0 -> 4) and on traces whose names are the hostile
corpus (tests/security/conftest.py), where nothing may run, load or open a dialog.
"""

from __future__ import annotations

import shutil
import threading
from pathlib import Path
from typing import Any
from urllib.parse import quote_plus

import pytest
from click.testing import CliRunner

from gpuprof.cli import cli
from gpuprof_testing.realtraces import v100_samples

from .conftest import HTML_HOSTILE
from .html_pages import HOSTILE_FILE_STEM, page_data, shown
from .test_share_page import CORPUS, _trace

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium package (apt-get install -y chromium)")
pytest.importorskip("tensorboard")  # every test here draws the TensorBoard tab
HOSTILE_RUN = next(n for n in HTML_HOSTILE if "/" not in n and "onfocus" in n)  # a run directory's hostile name

# every table the comparison draws, by id less the surface's prefix: its rows, each as its cells' text
ROWS = """(sel) => Object.fromEntries([...document.querySelectorAll(sel)].map(t =>
  [t.id.replace(/^compare-/, ""), [...t.rows].map(r => [...r.cells].map(c => c.textContent))]))"""


class _Served:
    """The plugin's routes on a local port (wsgiref in a thread), as TensorBoard serves them under data/plugin/gpuprof/."""

    def __init__(self, logdir: Path) -> None:
        from wsgiref.simple_server import WSGIRequestHandler, make_server

        from tensorboard.plugins.base_plugin import TBContext

        from gpuprof.tbplugin.plugin import GpuprofPlugin

        apps = GpuprofPlugin(TBContext(logdir=str(logdir))).get_plugin_apps()

        def app(environ: dict[str, Any], start_response: Any) -> Any:
            route = apps.get(environ["PATH_INFO"])
            if route is None:
                start_response("404 Not Found", [("Content-Type", "text/plain")])
                return [b"no such route"]
            return route(environ, start_response)

        class Quiet(WSGIRequestHandler):
            def log_message(self, *args: Any) -> None:  # the test's output stays the test's
                pass

        self.httpd = make_server("127.0.0.1", 0, app, handler_class=Quiet)
        self.base = f"http://127.0.0.1:{self.httpd.server_port}/"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(10)




class _Watched:
    """A page whose dialogs, script errors and requests are recorded; requests elsewhere than ``origin`` are refused."""

    def __init__(self, browser: Any, origin: str | None) -> None:
        self.ctx = browser.new_context(offline=origin is None, viewport={"width": 1280, "height": 900})
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.ctx.route("**/*", self._route)
        self.origin = origin
        self.page = self.ctx.new_page()
        self.page.on("dialog", lambda d: (self.errors.append("dialog: " + d.message), d.dismiss()))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))

    def _route(self, route: Any) -> None:
        url = route.request.url
        self.requests.append(url)
        if (self.origin and url.startswith(self.origin)) or url.startswith("file:"):
            route.continue_()
        else:
            self.errors.append("request to " + url)
            route.abort()

    def inert(self) -> None:
        pg = self.page
        assert pg.evaluate("window.__gpuprof_pwned") is None and self.errors == []
        # the one element the tab's static skeleton loads: the run-history frame, sandboxed (no script, no origin),
        # from the tab's own route; nothing a trace's names could make
        static = "iframe[sandbox=''][src='history.html']"
        assert pg.evaluate(f"document.querySelectorAll(\"{static}\").length") <= 1
        assert pg.evaluate(f"""() => [...document.querySelectorAll('*')].filter(e => !e.matches("{static}") &&
            [...e.attributes].some(a => a.name.startsWith('on') || a.name === 'style' || a.name === 'href' || a.name === 'src')).length""") == 0
        assert pg.evaluate(f"""[...document.querySelectorAll('img,image,use,foreignObject,iframe,object,embed,a,form,base,link')]
            .filter(e => !e.matches("{static}")).length""") == 0


def _tab_rows(browser: Any, logdir: Path, before: str, after: str) -> tuple[dict[str, list[list[str]]], _Watched, str]:
    served = _Served(logdir)
    w = _Watched(browser, served.base)
    try:
        pg = w.page
        pg.goto(served.base + "index.html")
        pg.wait_for_function("() => +document.body.dataset.rendered >= 1", timeout=60_000)
        if pg.evaluate("document.getElementById('run').value") != after:
            n = int(pg.evaluate("+document.body.dataset.rendered"))
            pg.select_option("#run", after)
            pg.wait_for_function(f"() => +document.body.dataset.rendered > {n}", timeout=60_000)
        pg.select_option("#cmp", before)
        pg.wait_for_function("() => document.getElementById('compare-metrics') !== null", timeout=60_000)
        for th in pg.locator("#compare-body th").all()[:6]:  # sorting clicks change nothing below: the rows are read fresh
            th.click()
        pg.select_option("#cmp", "")
        pg.select_option("#cmp", before)
        pg.wait_for_function("() => document.getElementById('compare-metrics') !== null", timeout=60_000)
        rows = pg.evaluate(ROWS, "#compare-body table[id]")
        sides = pg.locator("#compare-body .gp-sides").text_content() or ""
        assert pg.evaluate("document.querySelectorAll('#compare-body [class~=better], #compare-body [class~=worse]').length") > 0
        w.inert()
        assert {u.split("/")[2] for u in w.requests} == {served.base.split("/")[2]}
        assert any("/compare?" in u for u in w.requests)
        return rows, w, sides
    finally:
        w.ctx.close()
        served.close()


def _page_rows(browser: Any, before: Path, after: Path, out: Path) -> tuple[dict[str, list[list[str]]], dict[str, Any]]:
    r = CliRunner().invoke(cli, ["diff", str(before), str(after), "--html", str(out), "--format", "json", "-j", "1"])
    assert r.exit_code == 0, r.output[-2000:]
    w = _Watched(browser, None)
    try:
        w.page.goto(out.as_uri())
        w.page.wait_for_function("document.body.dataset.rendered === '1'", timeout=30_000)
        rows = w.page.evaluate(ROWS, "#diff table[id]")
        w.inert()
        assert w.requests == [out.as_uri()]
        return rows, page_data(out)["diff"]
    finally:
        w.ctx.close()


def _whole(rows: dict[str, list[list[str]]], d: dict[str, Any]) -> None:
    """Every row the diff document holds is drawn (a header row above them)."""
    for kind in ("operators", "kernels"):
        for which in ("slower", "faster", "added", "removed", "within_noise"):
            assert len(rows.get(f"{kind}-{which}", [[]])) - 1 == len(d[kind][which]), (kind, which)
    for k in ("added", "changed", "unchanged"):
        assert len(rows.get(f"findings-{k}", [[]])) - 1 == len(d["findings"][k]), k
    # gone findings: the confirmed-fixed ones in one table, the others (with why not) in another
    fixed = [r for r in d["findings"]["removed"] if r["fixed"]]
    assert len(rows.get("findings-removed", [[]])) - 1 == len(fixed)
    assert len(rows.get("findings-gone", [[]])) - 1 == len(d["findings"]["removed"]) - len(fixed)


def test_v100_tab_and_diff_page_draw_the_same_rows(browser: Any, tmp_path: Path) -> None:
    root = v100_samples()[0].parent.parent
    tab, _, sides = _tab_rows(browser, root, "resnet50_num_workers_0", "resnet50_num_workers_4")
    page, d = _page_rows(browser, root / "resnet50_num_workers_0", root / "resnet50_num_workers_4", tmp_path / "diff.html")
    assert tab == page
    _whole(page, d)
    assert sides.startswith("before: resnet50_num_workers_0 (2 traces, 12 steps") and "after: resnet50_num_workers_4 (" in sides
    assert [r[0] for r in page["findings-removed"][1:]] == ["GP102 " + d["findings"]["removed"][0]["name"]]
    # the same model and GPU: the kernels only moved within the runs' noise, and are drawn as such
    assert page["kernels-within_noise"][1:] and not d["kernels"]["slower"] and not d["kernels"]["faster"]


def test_hostile_names_same_rows_and_inert(browser: Any, tmp_path: Path) -> None:
    logdir = tmp_path / "logs"
    for run in ("before", HOSTILE_RUN):
        (logdir / run).mkdir(parents=True)
    before = _trace(logdir / "before" / f"{HOSTILE_FILE_STEM}.pt.trace.json", 500)
    after = _trace(logdir / HOSTILE_RUN / f"{HOSTILE_FILE_STEM}.pt.trace.json", 2000)
    tab, w, sides = _tab_rows(browser, logdir, "before", HOSTILE_RUN)
    page, d = _page_rows(browser, before, after, tmp_path / "diff.html")
    assert tab == page
    _whole(page, d)
    names = {r[0] for r in page["kernels-slower"][1:]}
    assert {shown(n) for n in CORPUS} <= names  # every hostile kernel name, as the literal text it is
    assert quote_plus(HOSTILE_RUN) in " ".join(w.requests)  # the hostile run was asked for (URL-encoded), never run
    assert f"after: {HOSTILE_RUN} (1 trace, 3 steps" in sides  # its name drawn as the text it is

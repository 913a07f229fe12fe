"""The memory HTML page from hostile snapshots and traces, opened in headless Chromium offline: nothing runs.

Each page is opened twice: as written (its content-security policy in force)
and with the policy bypassed, which shows that the page's DOM is inert by
construction and not only because the policy blocks what a mistake let in.
A control page built the way the viewer used to build its table (a
single-quoted attribute escaping only ``&<>``) shows that this harness does
catch a break-out.
"""

from __future__ import annotations

import html
import shutil
from pathlib import Path
from typing import Any

import pytest

from .conftest import HTML_HOSTILE, HUGE_NAME, TEXT_HOSTILE
from .html_pages import HOSTILE_FILE_STEM, page_data, shown, snapshot_label, write_hostile_pages

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CORPUS = HTML_HOSTILE + TEXT_HOSTILE + [HUGE_NAME]
BROWSER_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]

pytestmark = pytest.mark.skipif(CHROMIUM is None,
                                reason="needs Debian's chromium package (apt-get install -y chromium)")

# Recorded before any of the page's own code runs: policy violations (none is expected: the page never even
# tries to run an injected script) and the pwned flag the corpus's scripts would set.
_RECORDER = """window.__csp_violations = [];
document.addEventListener('securitypolicyviolation', e => window.__csp_violations.push(e.violatedDirective + ' ' + e.sample));"""




@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_hostile_pages(tmp_path_factory.mktemp("hostile"), CORPUS)


class Visit:
    """One page opened offline, with everything that could show an injection recorded."""

    def __init__(self, browser: Any, path: Path, bypass_csp: bool) -> None:
        self.ctx = browser.new_context(offline=True, bypass_csp=bypass_csp, viewport={"width": 1300, "height": 900})
        self.page = self.ctx.new_page()
        self.dialogs: list[str] = []
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.page.add_init_script(_RECORDER)
        self.page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.goto(path.as_uri())

    def poke(self) -> None:
        """What a reader does: tab through the page (focus handlers), hover the plot and every table row."""
        pg = self.page
        for _ in range(12):
            pg.keyboard.press("Tab")
        box = pg.locator("canvas").first.bounding_box() if pg.locator("canvas").count() else None
        for fx in (0.1, 0.5, 0.9) if box else ():
            for fy in (0.2, 0.6, 0.9):
                pg.mouse.move(box["x"] + box["width"] * fx, box["y"] + box["height"] * fy)
        rows = pg.locator("tr")
        for i in range(min(rows.count(), 8)):
            rows.nth(i).hover()
        pg.wait_for_timeout(200)

    def pwned(self) -> Any:
        return self.page.evaluate("window.__gpuprof_pwned")

    def close(self) -> None:
        self.ctx.close()


@pytest.mark.parametrize("bypass_csp", [False, True], ids=["csp", "csp-bypassed"])
@pytest.mark.parametrize("kind", ["snapshot", "trace"])
def test_hostile_page_runs_nothing_and_still_renders(browser: Any, pages: dict[str, Path], kind: str,
                                                     bypass_csp: bool) -> None:
    path = pages[kind]
    data = page_data(path)
    dev = data["devices"][0]
    v = Visit(browser, path, bypass_csp)
    try:
        pg = v.page
        pg.wait_for_function("+document.body.dataset.rendered >= 1", timeout=15_000)
        v.poke()
        assert v.pwned() is None
        assert v.dialogs == []
        assert v.errors == []
        assert v.requests == [path.as_uri()]  # the page itself, nothing else
        assert pg.evaluate("window.__csp_violations") == []
        # Nothing from the data became an element or a handler.
        assert pg.evaluate("document.scripts.length") == 2
        assert pg.evaluate("document.querySelectorAll('img,svg,iframe,object,embed,a,form,base,link').length") == 0
        assert pg.evaluate("""[...document.querySelectorAll('*')].filter(e =>
            [...e.attributes].some(a => a.name.startsWith('on') || a.name === 'style' && e.tagName !== 'I'
                                   && e.id !== 'tip')).length""") == 0
        # It still draws: the series, ink on the canvas in several colours, one table row per holder.
        assert pg.evaluate("window.gpuprofSeries") == [s["label"] for s in dev["slots"]]
        ink, colours = pg.evaluate("""() => { const c = document.getElementById('c');
            const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data; let ink = 0; const cols = new Set();
            for (let i = 0; i < d.length; i += 4) if (d[i] < 250 || d[i+1] < 250 || d[i+2] < 250) { ink++; cols.add(d[i]+','+d[i+1]+','+d[i+2]); }
            return [ink, cols.size]; }""")
        assert ink > 20_000 and colours > 4
        # The hostile names are shown as the literal text they are.
        cells = pg.locator("#top tr td:first-child").all_text_contents()
        assert cells == [shown(r["site"]) for r in dev["top"]]
        if kind == "snapshot":
            assert cells[: len(CORPUS)] == [shown(snapshot_label(i, n)) for i, n in enumerate(CORPUS)]
        else:
            assert set(HTML_HOSTILE) <= set(cells)
        legend = pg.locator("#legend span").all_text_contents()
        assert legend[:12] == [shown(s["label"]) for s in dev["slots"][:12]]
        assert pg.locator("#title").text_content() == data["title"]
        assert HOSTILE_FILE_STEM in pg.title()
        findings = pg.locator("#findings li").all_text_contents()
        assert findings == [f"{f['code']} {shown(f['message'], 1000)}" for f in data["findings"]]
        titles = [pg.locator("#top tr").nth(1 + i).get_attribute("title") for i in range(len(dev["top"]))]
        assert titles == ["\n".join(shown(f) for f in r["stack"][:16]) for r in dev["top"]]
        # Hovering the bottom band at the end of the history shows the largest site's name and stack.
        box = pg.locator("#c").bounding_box()
        pg.mouse.move(box["x"] + box["width"] * 0.97, box["y"] + box["height"] - 32)
        tip = pg.locator("#tip").text_content()
        assert HTML_HOSTILE[0] in tip and "allocated" in tip
        assert all(shown(f) in tip for f in dev["slots"][0]["stack"][:16])
    finally:
        v.close()


def test_harness_catches_the_old_attribute_break_out(browser: Any, tmp_path: Path) -> None:
    """The viewer used to write ``title='` + esc(stack) + `'`` with esc() covering only & < >: the issue's attack."""
    name = HTML_HOSTILE[0]
    assert "'" in name
    old_esc = name.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    control = tmp_path / "control.html"
    control.write_text(f"<!doctype html><html><body><table><tr title='{old_esc}'><td>{html.escape(name)}</td></tr>"
                       "</table></body></html>", encoding="utf-8")
    v = Visit(browser, control, bypass_csp=False)
    try:
        v.poke()
        v.page.wait_for_function("window.__gpuprof_pwned === 1", timeout=5_000)
        assert v.pwned() == 1
    finally:
        v.close()


def test_trusted_types_refuse_markup_from_strings(browser: Any, pages: dict[str, Path]) -> None:
    """Defence in depth: should a later edit assign a string to innerHTML, the browser refuses it."""
    v = Visit(browser, pages["snapshot"], bypass_csp=False)
    try:
        v.page.wait_for_function("+document.body.dataset.rendered >= 1", timeout=15_000)
        outcome = v.page.evaluate("""() => { try { document.getElementById('sum').innerHTML = '<b>x</b>'; return 'assigned'; }
                                          catch (e) { return e.name; } }""")
        assert outcome == "TypeError"
        assert v.page.locator("#sum b").count() == 0
    finally:
        v.close()

"""The timeline of a real shared trace in headless Chromium: lanes, the critical-path highlight, zoom, pan, hover,
markers that go to their finding cards, within a 1280 px window.

The critical path's segments are made here from the trace's own events (the median step's kernels on its
stream), as the critical-path code will hand them over (``(lane, start_us, end_us, kind, name)``); the page must
outline exactly those. Screenshots go to the temporary folder (``GPUPROF_TIMELINE_SHOTS`` names another), never
into the repository.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

from gpuprof.analysis import analyze
from gpuprof.htmlpage.page import report_page
from gpuprof.trace.load import load_trace
from gpuprof.trace.metrics import compute_metrics
from gpuprof.trace.timelinerows import CriticalRow
from gpuprof.views.timeline import build_timeline, critical_step
from gpuprof_testing.realtraces import v100_samples

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium package (apt-get install -y chromium)")]
ROW, GAP, AXIS = 12, 6, 22  # the drawing's geometry (timeline.js)
SHOTS = Path(os.environ.get("GPUPROF_TIMELINE_SHOTS") or tempfile.gettempdir())


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    path = v100_samples()[0]
    report = analyze(path)
    m = compute_metrics(load_trace(path))
    step = m.steps[critical_step(m) or 0]
    inside = [k for k in m.trace.kernels if step.start <= k.ts < step.end]
    segs: list[CriticalRow] = [(f"gpu:{k.device}:{k.stream}", k.ts, k.ts + k.dur, "kernel", k.name)
                               for k in inside[::max(1, len(inside) // 400)]]  # spread over the step
    assert len(segs) > 50
    tl = build_timeline(m, report.findings, segs)
    assert tl is not None and sum(r[5] for r in tl.critical) == len(segs)  # merged into runs, none cut
    report.traces[0].timeline = tl
    out = tmp_path_factory.mktemp("tl") / "real.html"
    out.write_text(report_page(report), encoding="utf-8")
    return out, json.loads(json.dumps(tl.to_dict()))


def _pixel(pg: Any, x: float, y: float) -> list[int]:
    return list(pg.evaluate("([x, y]) => { const c = document.querySelector('#timeline canvas'); const k = c.width / "
                            "c.getBoundingClientRect().width; return [...c.getContext('2d').getImageData(Math.round(x * k), "
                            "Math.round(y * k), 1, 1).data]; }", [x, y]))


def _view(pg: Any) -> tuple[float, float]:
    a, b = (pg.locator("#timeline").get_attribute("data-view") or "0 0").split()
    return float(a), float(b)


def test_real_trace_timeline_lanes_highlight_zoom_pan_hover_markers(browser: Any,
                                                                      page: tuple[Path, dict[str, Any]]) -> None:
    path, tl = page
    ctx = browser.new_context(offline=True, viewport={"width": 1280, "height": 900})
    pg = ctx.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    try:
        pg.goto(path.as_uri())
        pg.wait_for_function("document.body.dataset.rendered === '1'", timeout=15_000)
        box = pg.locator("#timeline")
        box.scroll_into_view_if_needed()
        # every lane, labelled, and the frame fits the window
        assert pg.locator("#timeline .gp-tl-lane").all_text_contents() == [ln["label"] for ln in tl["lanes"]]
        frame = pg.locator("#timeline .gp-tl-frame").bounding_box()
        assert frame is not None and frame["x"] >= 0 and frame["x"] + frame["width"] <= 1280
        assert int(box.get_attribute("data-drawn") or 0) >= tl["events_kept"] // 2  # the whole span: most rows visible
        box.screenshot(path=str(SHOTS / "gpuprof-timeline-whole.png"))
        # the median step: the critical path (every segment given) outlined in red on its lane
        pg.locator("#timeline button", has_text="median step").click()
        assert int(box.get_attribute("data-critical") or 0) == len(tl["critical"])
        t0, t1 = _view(pg)
        step = tl["steps"][tl["critical_step"]]
        assert t0 < step["start_us"] < step["end_us"] < t1 and (t1 - t0) < 1.1 * (step["end_us"] - step["start_us"])
        cv = pg.locator("#timeline canvas").bounding_box()
        assert cv is not None
        lane = [ln["id"] for ln in tl["lanes"]].index(tl["critical"][0][0])
        top = AXIS + sum(ln["depth"] * ROW + GAP for ln in tl["lanes"][:lane]) + GAP / 2
        seg = max(tl["critical"], key=lambda c: c[2] - c[1])  # the longest: wide enough to hit
        x = (seg[1] + seg[2]) / 2
        px = (x - t0) / (t1 - t0) * cv["width"]
        depth = tl["lanes"][lane]["depth"]
        r, g, b, _ = _pixel(pg, px, top + depth * ROW)  # the red band under the lane's boxes
        assert r > 180 and g < 110 and b < 110, (r, g, b)
        box.screenshot(path=str(SHOTS / "gpuprof-timeline-median-step.png"))
        # hover: the box under the pointer, named
        pg.mouse.move(cv["x"] + px, cv["y"] + top + 2)
        info = pg.locator("#timeline .gp-tl-info").text_content() or ""
        assert "on the critical path: " in info and "kernel" in info and info.endswith("GPU 0 stream 7")
        # wheel zooms in around the pointer; dragging pans
        pg.mouse.wheel(0, -300)
        z0, z1 = _view(pg)
        assert (z1 - z0) < (t1 - t0) and z0 <= x <= z1
        pg.mouse.move(cv["x"] + 600, cv["y"] + 40)
        pg.mouse.down()
        pg.mouse.move(cv["x"] + 400, cv["y"] + 40, steps=4)
        pg.mouse.up()
        p0, p1 = _view(pg)
        assert p0 > z0 and p1 - p0 == pytest.approx(z1 - z0, rel=1e-6)  # moved right in time, same width
        box.screenshot(path=str(SHOTS / "gpuprof-timeline-zoomed.png"))
        # a marker button takes the reader to its finding's card
        first = pg.locator("#timeline .gp-tl-mark").first
        code = (first.text_content() or "").split(" ")[0]
        first.click()
        card = pg.locator(f".finding[data-code={code}]").first
        assert "gp-flash" in (card.get_attribute("class") or "") and card.is_visible()
        assert errors == []
    finally:
        ctx.close()

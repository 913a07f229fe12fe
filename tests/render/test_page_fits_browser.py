"""The ``--html`` page of a real two-trace report in headless Chromium at 1,280 px: it fits, and shows each
distinct finding once with its trace labels (a new user saw twelve unlabelled cards overflowing the window)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from gpuprof.analysis import analyze
from gpuprof.htmlpage.page import report_page
from gpuprof.render.groups import group_findings
from gpuprof_testing.realtraces import v100_samples

pytestmark = [pytest.mark.browser, pytest.mark.skipif(
    (shutil.which("chromium") or shutil.which("chromium-browser")) is None, reason="needs Debian's chromium")]


def test_two_trace_page_fits_1280px_and_labels_its_cards(browser: Any, tmp_path: Path) -> None:
    files = [p for p in v100_samples() if "num_workers_0" in str(p)]
    report = analyze([str(p) for p in files])
    distinct = len(group_findings(report.sorted_findings()))
    page = tmp_path / "report.html"
    page.write_text(report_page(report), encoding="utf-8")
    ctx = browser.new_context(offline=True, viewport={"width": 1280, "height": 900})
    try:
        pg = ctx.new_page()
        pg.goto(page.as_uri())
        pg.wait_for_function("() => document.body.dataset.rendered === '1'", timeout=30_000)
        # nothing pushes the page wider than the window (a wide view table scrolls inside its own box)
        assert pg.evaluate("document.documentElement.scrollWidth") <= 1280
        cards = pg.locator(".finding")
        assert cards.count() == distinct < len(report.findings)
        for i in range(cards.count()):
            assert "traces: #" in cards.nth(i).text_content()
        head = pg.locator("h2", has_text="Findings").text_content()
        assert f"{distinct} distinct of {len(report.findings)} in 2 traces" in head
    finally:
        ctx.close()


def test_the_diff_page_of_two_real_runs_fits_1280px(browser: Any, tmp_path: Path) -> None:
    """`gpuprof diff --html` of two real runs (num_workers 0 -> 4): the comparison, drawn by the same code as the
    TensorBoard tab's "Compare with" section, never widens the page (its findings tables were 1,685 px wide)."""
    from click.testing import CliRunner

    from gpuprof.cli import cli

    before = next(p for p in v100_samples() if "num_workers_0" in str(p))
    after = next(p for p in v100_samples() if "num_workers_4" in str(p))
    page = tmp_path / "diff.html"
    res = CliRunner().invoke(cli, ["diff", str(before), str(after), "--html", str(page)])
    assert res.exit_code in (0, 1), res.output[-2000:]
    ctx = browser.new_context(offline=True, viewport={"width": 1280, "height": 900})
    try:
        pg = ctx.new_page()
        pg.goto(page.as_uri())
        pg.wait_for_function("() => document.body.dataset.rendered === '1'", timeout=30_000)
        assert pg.locator("#diff table").count() >= 3 and pg.locator("#findings-removed").count() == 1
        assert pg.evaluate("document.documentElement.scrollWidth") <= 1280
    finally:
        ctx.close()

"""Reads the views' tables back from a live page (playwright Page or Frame) and drives their sorting and search.

Shared by the headless-Chromium tests of both surfaces that draw them with the same code
(gpuprof/render/web/report.js): the TensorBoard tab (tests/tbplugin/test_browser.py) and the standalone
``--html`` page (tests/security/test_share_page.py).
"""

from __future__ import annotations

from typing import Any

from .html_pages import shown

VIEWS = ("operators", "kernels", "modules", "ranges")


def column(pg: Any, view: str, i: int) -> list[str]:
    """The text of column ``i`` of every body row of a view's table, top to bottom."""
    return list(pg.evaluate(f"""() => [...document.querySelectorAll('#view-{view} tr')].slice(1)
                                  .map(r => r.cells[{i}].textContent)"""))


def check_views(pg: Any, views: dict[str, Any], search: str) -> None:
    """Every row of every view is drawn in the report's order; a numeric header sorts both ways; the box searches.

    ``views``: the trace's ``views`` object as the page's data has it; ``search``: a term that some, not all,
    kernel names hold.
    """
    for v in VIEWS:
        rows = views[v]
        assert pg.locator(f"#view-{v}").count() == (1 if rows else 0), v
        if rows:  # whole: every row the report keeps, the names as the literal text they are
            assert column(pg, v, 0) == [shown(r["name"]) for r in rows], v
    kernels = views["kernels"]
    total = {shown(r["name"]): r["total_us"] for r in kernels}
    heads = pg.locator("#view-kernels th").all_text_contents()
    i = heads.index("total")
    th = pg.locator("#view-kernels th").nth(i)
    th.click()  # a number column sorts largest first, then the other way
    assert th.get_attribute("aria-sort") == "descending"
    down = [total[n] for n in column(pg, "kernels", 0)]
    assert down == sorted(down, reverse=True) and len(down) == len(kernels)
    th.click()
    assert th.get_attribute("aria-sort") == "ascending"
    up = [total[n] for n in column(pg, "kernels", 0)]
    assert up == sorted(up)
    name = pg.locator("#view-kernels th").nth(0)
    name.click()  # a name column sorts A to Z (the browser's collation): the order changes, the rows stay
    assert name.get_attribute("aria-sort") == "ascending" and sorted(column(pg, "kernels", 0)) == sorted(total)
    box = pg.locator("[data-view=kernels] input[type=search]")
    box.fill(search)
    want = sorted(shown(r["name"]) for r in kernels if search.lower() in r["name"].lower())
    got = column(pg, "kernels", 0)
    assert sorted(got) == want and 0 < len(got) < len(kernels)
    assert f"{len(got)} of {len(kernels)} rows match" in (pg.locator("[data-view=kernels] .gp-count").text_content() or "")
    box.fill("")
    assert len(column(pg, "kernels", 0)) == len(kernels)

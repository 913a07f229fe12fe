"""``gpuprof try``'s outputs from hostile names: the variant names, the job's command, a trial's error, the user's
file:line in the lines to change and the findings' "needs a code change" rows all come from the user's side (the
command line, the job's files and output). try.html stays the fixed skeleton with the data as one escaped JSON
document (exact strings in it), the policy allows the page's own script by hash only; the terminal table and
try.md show every name inert. Checked without a browser, from a try document built from given trial results.
Fast: nothing here imports torch."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from gpuprof.run.options import TrialSettings
from gpuprof.trials import measure, render
from gpuprof.trials.runner import Outcome
from gpuprof.trials.variants import Variant

from .conftest import HTML_HOSTILE, HUGE_NAME, TEXT_HOSTILE
from .html_pages import PageParts, shown

CORPUS = HTML_HOSTILE + TEXT_HOSTILE + [HUGE_NAME]
SHIM = Path(__file__).with_name("page_shim.js")
BASE = [10_000.0 + 10 * (i % 5) for i in range(20)]


def _out(times: list[float], sites: list[str], error: str | None = None) -> Outcome:
    result = None if error else {
        "complete": True, "step_times_us": times, "data_wait_us": [6000.0] * len(times), "losses": [1.0, 0.5],
        "host_rss_peak_bytes": 100 << 20, "cuda_peak_bytes": None,
        "applied": {"num_workers": 2, "channels_last": True}, "dataloader_sites": sites,
        "sites": {"model": sites}, "notes": sites[:2]}
    return Outcome(Path("t"), status=0 if not error else 1, result=result, error=error)


def _doc(names: list[str]) -> dict[str, Any]:
    rows: list[tuple[Variant, Outcome]] = []
    for i, name in enumerate(names):
        rows.append((Variant(f"{name}-{i}", TrialSettings(num_workers=2, channels_last=True)),
                     _out([x - 4000 for x in BASE], [f"/u/{name}.py:{i}"])))
    rows.append((Variant(names[0], TrialSettings(num_workers=1)), _out([], [], error=f"the job failed: {names[-1]}")))
    analysis = {"summary": " ".join(names[:3]), "notes": names[:2], "needs_code_change": [
        {"code": "GP203", "message": n, "change": n, "location": f"/u/{n}.py:3", "predicted_saving_us": 1000.0,
         "predicted_what_if_us": None} for n in names]}
    base = [_out(BASE, []), _out([x + 5 for x in BASE], [])]
    return measure.build(["python", *names], base, rows, 3, 20, 2, False, False, analysis=analysis)


def _parts(page: str) -> PageParts:
    parts = PageParts()
    parts.feed(page)
    parts.close()
    return parts


def _data(parts: PageParts) -> dict[str, Any]:
    (text,) = [t for attrs, t in parts.scripts if attrs.get("id") == "data"]
    doc: dict[str, Any] = json.loads(text)
    return doc


def test_the_try_page_is_the_fixed_skeleton_whatever_the_names() -> None:
    plain = _parts(render.html(_doc(["plain", "names", "only"])))
    hostile_page = render.html(_doc(CORPUS))
    hostile = _parts(hostile_page)
    assert [t for t, _ in hostile.tags] == [t for t, _ in plain.tags]  # no element came from the data
    assert hostile.tags == plain.tags  # nor an attribute
    data = _data(hostile)
    assert data["kind"] == "try"
    names = {v["name"] for v in data["try"]["variants"]}
    assert {f"{n}-{i}" for i, n in enumerate(CORPUS)} <= names  # the exact names travel, as data
    assert any(HUGE_NAME in c["change"] for c in data["try"]["needs_code_change"])
    (text,) = [t for attrs, t in hostile.scripts if attrs.get("id") == "data"]
    assert "<" not in text and "\u2028" not in text  # nothing the HTML tokenizer or a JS parser reacts to
    assert "</script><script>" not in hostile_page.split('id="data"', 1)[1].split("</script>", 1)[0]


def test_the_try_page_policy_allows_its_own_script_by_hash_only() -> None:
    parts = _parts(render.html(_doc(CORPUS)))
    (meta,) = [a for t, a in parts.tags if t == "meta" and (a.get("http-equiv") or "").lower()
               == "content-security-policy"]
    policy = {w.split()[0]: w.split()[1:] for w in (meta["content"] or "").split(";") if w.split()}
    assert policy["default-src"] == ["'none'"]
    assert all(s.startswith("'sha256-") for s in policy["script-src"])
    assert all(attrs.get("src") is None for attrs, _ in parts.scripts)


@pytest.mark.parametrize("out", ["table", "markdown"])
def test_the_table_and_try_md_show_every_name_inert(out: str) -> None:
    doc = _doc(CORPUS)
    text = render.table(doc) if out == "table" else render.markdown(doc)
    assert not any(c in text for c in "\x1b\x07\x00\x9b\r\b\u2028\u2029")
    lines = text.splitlines()
    if out == "markdown":  # every table row keeps its 8 cells: a name's | cannot add one
        rows = [ln for ln in lines if ln.startswith("| ") and "pipe" in ln]
        assert rows and all(ln.replace("\\|", "").count("|") == 9 for ln in rows)
    assert "needs a code change" in text.lower()


@pytest.mark.slow  # a Node interpreter runs the page's script
@pytest.mark.skipif(shutil.which("node") is None, reason="needs node to run the page's script")
def test_the_try_page_script_draws_every_name_as_text(tmp_path: Path) -> None:
    page = tmp_path / "try.html"
    page.write_text(render.html(_doc(CORPUS)), encoding="utf-8")
    run = subprocess.run([str(shutil.which("node")), str(SHIM), str(page)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr[-2000:]  # the shim throws on innerHTML and on*/style/src/href attributes
    got = json.loads(run.stdout)
    assert got["rendered"] == "1" and got["strays"] == []
    assert got["h2"][0] == "Variants, ranked" and any(h.startswith("Needs a code change") for h in got["h2"])
    cells = set(got["cells"])
    for i, name in enumerate(HTML_HOSTILE):
        if "\u2028" not in name:  # the table's cells are the terminal's words: a line separator shown as an escape
            assert shown(f"{name}-{i}") in cells
    assert len(got["li"]) == 2 * len(CORPUS)  # a line to change per faster variant, a code-change row per finding
    assert set(got["tags"]) <= {"B", "BODY", "CODE", "DIV", "H2", "LI", "MAIN", "P", "SECTION", "SPAN", "TABLE", "TD",
                                "TH", "TR", "UL"}

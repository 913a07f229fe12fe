"""The memory HTML page is inert for any input, checked without a browser (so it holds in CI without chromium).

Pages are written by ``gpuprof memory --html`` from a snapshot and from a trace
whose frame file names, function names and operator names are the hostile
corpus (attribute break-outs, ``</script>``, ``<!--<script>``, U+2028, a
200,000-character name), under a hostile file name. An HTML parser then
checks that the data cannot have become markup: the element structure is the
fixed skeleton, the JSON element holds none of the characters the tokenizer
reacts to, and the policy allows the page's own script only, by its hash.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuprof.memory import html as page_module
from gpuprof.memory.html import render_html
from gpuprof.memory.htmlsafe import csp_hash, fill_template, script_json, text_for_html

from .conftest import HTML_HOSTILE, HUGE_NAME, TEXT_HOSTILE
from .html_pages import HOSTILE_FILE_STEM, PageParts, page_data, parse_page, snapshot_label, write_hostile_pages

CORPUS = HTML_HOSTILE + TEXT_HOSTILE + [HUGE_NAME]
KINDS = ["snapshot", "trace"]


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_hostile_pages(tmp_path_factory.mktemp("hostile"), CORPUS)


def _policy(parts: PageParts) -> dict[str, list[str]]:
    metas = [a for t, a in parts.tags if t == "meta" and (a.get("http-equiv") or "").lower() == "content-security-policy"]
    assert len(metas) == 1
    out: dict[str, list[str]] = {}
    for directive in (metas[0]["content"] or "").split(";"):
        words = directive.split()
        if words:
            out[words[0].lower()] = words[1:]
    return out


def _empty_page() -> PageParts:
    parts = PageParts()
    parts.feed(render_html({"source": "x.pickle", "source_type": "snapshot", "devices": [], "findings": [], "notes": []}))
    return parts


def test_the_inputs_really_carry_the_hostile_names(pages: dict[str, Path]) -> None:
    """Guards the other tests against testing a page that never saw the corpus."""
    snap = page_data(pages["snapshot"])
    sites = [r["site"] for r in snap["devices"][0]["top"]]
    assert sites[: len(CORPUS)] == [snapshot_label(i, n) for i, n in enumerate(CORPUS)]
    assert any(HUGE_NAME in f["message"] for f in snap["findings"])  # the OOM finding names the hostile site
    trace = page_data(pages["trace"])
    trace_sites = {r["site"] for d in trace["devices"] for r in d["top"]}
    assert set(CORPUS) <= trace_sites  # operator names
    assert {snapshot_label(i, n) for i, n in enumerate(HTML_HOSTILE)} <= trace_sites  # Python frames
    for p in pages.values():
        assert HOSTILE_FILE_STEM in page_data(p)["title"]


@pytest.mark.parametrize("kind", KINDS)
def test_data_cannot_become_markup(pages: dict[str, Path], kind: str) -> None:
    parts = parse_page(pages[kind])
    # Exactly the elements and attributes of the page with no data: nothing in the data opened an element,
    # added an attribute, or closed one early.
    assert parts.tags == _empty_page().tags
    assert not any(k.startswith("on") or k == "style" for _, attrs in parts.tags for k in attrs)
    assert [a.get("type") for a, _ in parts.scripts] == ["application/json", None]
    text = pages[kind].read_text(encoding="utf-8")
    data_text = parts.scripts[0][1]
    assert text.count(data_text) == 1 and data_text.isascii()
    assert not set(data_text) & {"<", ">", "&", "\u2028", "\u2029"}
    assert json.loads(data_text) == page_data(pages[kind])


@pytest.mark.parametrize("kind", KINDS)
def test_policy_allows_only_the_pages_own_script_and_style(pages: dict[str, Path], kind: str) -> None:
    parts = parse_page(pages[kind])
    policy = _policy(parts)
    assert policy["default-src"] == ["'none'"]
    for directive in ("connect-src", "img-src", "object-src", "base-uri", "form-action"):
        assert policy[directive] == ["'none'"], directive
    for directive in ("script-src", "style-src"):
        assert all(re.fullmatch(r"'sha256-[A-Za-z0-9+/]{43}='", s) for s in policy[directive]), policy[directive]
    code = parts.scripts[1][1]
    digest = base64.b64encode(hashlib.sha256(code.encode("utf-8")).digest()).decode()
    assert policy["script-src"] == [f"'sha256-{digest}'"]
    assert len(parts.styles) == 1
    style_digest = base64.b64encode(hashlib.sha256(parts.styles[0].encode("utf-8")).digest()).decode()
    assert policy["style-src"] == [f"'sha256-{style_digest}'"]
    assert policy["require-trusted-types-for"] == ["'script'"]
    # The policy precedes everything it governs.
    names = [t for t, _ in parts.tags]
    assert names.index("meta", 1) < min(names.index("style"), names.index("script"))


@pytest.mark.parametrize("kind", KINDS)
def test_title_is_the_file_name_as_text(pages: dict[str, Path], kind: str) -> None:
    parts = parse_page(pages[kind])
    assert parts.title == page_data(pages[kind])["title"]
    assert parts.title.startswith("gpuprof memory: " + HOSTILE_FILE_STEM)


def test_viewer_script_has_no_markup_sinks() -> None:
    code = page_module._SCRIPT
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "Function(",
                 "setTimeout(\"", "srcdoc", "href", "`"):
        assert sink not in code, sink
    # every setAttribute call goes through el(), whose attribute names are written in this script
    assert code.count("setAttribute(") == 1


@settings(max_examples=200, deadline=None)
@pytest.mark.slow
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
                    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(), kids, max_size=4),
                    max_leaves=20))
def test_script_json_round_trips_and_is_inert(value: object) -> None:
    text = script_json(value)
    assert text.isascii() and not set(text) & {"<", ">", "&"}
    assert json.loads(text) == value


def test_script_json_corpus_and_non_finite_numbers() -> None:
    for name in CORPUS + ["\udcff lone surrogate", "</SCRIPT >", "<!-- x -->", "\x00"]:
        text = script_json({"name": name})
        assert "<" not in text and json.loads(text) == {"name": name}
    assert json.loads(script_json({"t": [1.5, math.nan, math.inf, -math.inf]})) == {"t": [1.5, None, None, None]}


def test_fill_template_is_one_pass() -> None:
    out = fill_template("<title>__TITLE__</title>__DATA__", {"TITLE": "__DATA__", "DATA": "{\"x\":\"__TITLE__\"}"})
    assert out == "<title>__DATA__</title>{\"x\":\"__TITLE__\"}"
    with pytest.raises(ValueError):
        fill_template("__TITLE__", {"TITLE": "a", "DATA": "b"})
    with pytest.raises(ValueError):
        fill_template("__TITLE__ __DATA__", {"TITLE": "a"})


def test_csp_hash_known_value_and_line_endings() -> None:
    assert csp_hash("") == "'sha256-47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU='"  # SHA-256 of nothing
    with pytest.raises(ValueError):
        csp_hash("a\r\nb")  # the browser would hash "a\nb": refuse rather than emit a hash that never matches


def test_undecodable_file_name_still_writes_a_page() -> None:
    """A file name that is not UTF-8 reaches Python as lone surrogates; the page must still encode."""
    text = render_html({"source": "/tmp/\udcffsnap<b>.pickle", "source_type": "snapshot", "devices": [],
                        "findings": [], "notes": []})
    text.encode("utf-8")
    assert "<title>gpuprof memory: ?snap&lt;b&gt;.pickle</title>" in text
    assert text_for_html("a'\"<>&") == "a&#x27;&quot;&lt;&gt;&amp;"

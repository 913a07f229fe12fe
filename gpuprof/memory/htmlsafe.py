"""Building blocks for HTML pages that stay inert whatever data they carry.

Names on gpuprof's pages come from strangers (a colleague's snapshot, a trace
attached to an issue), so a page is built in a way where data can never
become markup or code:

* the data travels as one JSON document inside ``<script type="application/json">``
  in which ``<``, ``>`` and ``&`` are written as ``\\u003c``-style escapes, so
  nothing in it can close the element (``</script>``) or put the HTML parser
  into another state (``<!--<script>``); U+2028/U+2029 and every other
  non-ASCII character are escaped too (``ensure_ascii``), which also keeps
  lone surrogates from a pickle or a command line encodable;
* the page's own script reads it with ``JSON.parse(textContent)`` and builds
  the DOM with ``textContent``/``setAttribute`` only;
* the content-security policy allows exactly that one script and that one
  stylesheet by their SHA-256 (no ``'unsafe-inline'``), nothing else: an
  injected handler or element would not run even if a bug let one in;
* placeholders are filled in one pass, so a substituted value that happens to
  contain another placeholder's name stays text.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import re
from typing import Any, Mapping

from gpuprof.render.jsonout import json_safe

__all__ = ["csp_hash", "page_policy", "page_head", "script_json", "fill_template", "text_for_html"]

# What JSON may hold inside a <script> element: nothing the HTML tokenizer reacts to.
_SCRIPT_DATA_ESCAPES = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026",
                                      "\u2028": "\\u2028", "\u2029": "\\u2029"})


def script_json(obj: Any) -> str:
    """``obj`` as JSON that is safe as the whole content of a ``<script type="application/json">``.

    The result is pure ASCII and contains no ``<``, ``>`` or ``&``; those
    characters can only occur inside JSON strings, where the ``\\uXXXX``
    escape means the same character to ``JSON.parse``.
    """
    try:
        text = json.dumps(obj, ensure_ascii=True, separators=(",", ":"), allow_nan=False)
    except ValueError:  # a NaN or an infinity somewhere in the numbers (JSON.parse rejects them)
        text = json.dumps(json_safe(obj), ensure_ascii=True, separators=(",", ":"), allow_nan=False)
    return text.translate(_SCRIPT_DATA_ESCAPES)


def csp_hash(source: str) -> str:
    """The CSP source expression (``'sha256-...'``) allowing the inline element whose text is ``source``.

    Browsers hash the element's text after the HTML parser has turned CR LF
    into LF, so ``source`` must not contain a CR (checked): then the hash holds
    however the file's line endings are written.
    """
    if "\r" in source:
        raise ValueError("inline script or style text must not contain a carriage return")
    digest = hashlib.sha256(source.encode("utf-8")).digest()
    return "'sha256-" + base64.b64encode(digest).decode("ascii") + "'"


def page_policy(scripts: list[str], styles: list[str], *, connect: str = "'none'", frames: str = "'none'") -> str:
    """A content-security policy for a self-contained page: the given inline scripts and styles, nothing else.

    ``default-src 'none'`` forbids every fetch (scripts, styles, images, fonts,
    connections, frames); ``base-uri``/``form-action`` are not covered by it
    and are closed separately. ``require-trusted-types-for 'script'`` makes
    Chromium refuse any string assigned to ``innerHTML`` and friends, so a
    future edit that builds markup from data fails loudly instead of
    injecting.

    ``connect``/``frames``: the ``connect-src``/``frame-src`` sources, ``'none'``
    unless a page fetches its data from its own server (``'self'``, the
    TensorBoard plugin) or frames its own pages.
    """
    return "; ".join(["default-src 'none'", "script-src " + " ".join(csp_hash(s) for s in scripts),
                      "style-src " + " ".join(csp_hash(s) for s in styles), f"connect-src {connect}",
                      f"frame-src {frames}", "img-src 'none'", "base-uri 'none'", "form-action 'none'",
                      "object-src 'none'", "require-trusted-types-for 'script'", "trusted-types 'none'"])


def page_head(script: str, style: str) -> str:
    """The start of a self-contained page up to its ``<body>``: the policy of :func:`page_policy` first
    (before anything it governs, right after the charset), a ``__TITLE__`` to fill, the inline style."""
    return ("""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content=\"""" + page_policy([script], [style]) + """\">
<title>__TITLE__</title>
<style>""" + style + """</style></head><body>
""")


def text_for_html(text: str) -> str:
    """``text`` escaped for an element's text or a quoted attribute, and encodable as UTF-8.

    Lone surrogates (an undecodable file name on the command line arrives as
    one) become ``?`` instead of failing when the page is written.
    """
    clean = text.encode("utf-8", "replace").decode("utf-8") if not text.isascii() else text
    return html.escape(clean, quote=True)


_PLACEHOLDER = re.compile(r"__([A-Z][A-Z_]*[A-Z])__")


def fill_template(template: str, values: Mapping[str, str]) -> str:
    """Replace every ``__NAME__`` in ``template`` with ``values[NAME]`` in one pass.

    Replacement text is never scanned again, so data that contains
    ``__DATA__`` (or any other placeholder) stays literal. A placeholder
    without a value, or a value without its placeholder, is a programming
    error and raises.
    """
    found = set(_PLACEHOLDER.findall(template))
    if found != set(values):
        raise ValueError(f"template placeholders {sorted(found)} do not match the values {sorted(values)}")
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], template)

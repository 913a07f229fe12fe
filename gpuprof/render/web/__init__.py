"""The one script and stylesheet that draw a report in HTML, shared by every HTML surface.

``report.js`` (a ``GP`` namespace: summary cards, step charts, findings, and
the views as sortable, searchable tables) and ``report.css`` are package
files. The TensorBoard tab (:mod:`gpuprof.tbplugin.page`) and the standalone
page of ``gpuprof analyze/diff --html`` (:mod:`gpuprof.htmlpage.page`) inline
them before their own short scripts, so both draw with the same code; the
pages' content-security policies allow the combined text by hash.
"""

from __future__ import annotations

from importlib import resources

__all__ = ["SCRIPT", "STYLE"]


def _read(name: str) -> str:
    # Normalised to LF: a browser hashes an inline element's text after turning CR LF into LF.
    return resources.files(__name__).joinpath(name).read_text(encoding="utf-8").replace("\r\n", "\n")


SCRIPT = _read("report.js")
STYLE = _read("report.css")

"""The HTML surfaces' markup, as package files: the one script and stylesheet that draw a report, and each page's own.

``report.js`` (a ``GP`` namespace: summary cards, step charts, findings, and
the views as sortable, searchable tables), ``timeline.js`` (``GP.timeline``:
a trace's recorded steps as lanes on a canvas) and ``report.css`` are shared. The
TensorBoard tab (:mod:`gpuprof.tbplugin.page`: ``tab.html``, ``tab.js``,
``tab.css``) and the standalone page of ``gpuprof analyze/diff --html``
(:mod:`gpuprof.htmlpage.page`: ``page.js``, ``page.css``) inline them before
their own short scripts, so both draw with the same code; the pages'
content-security policies allow the combined text by hash. The memory viewer
(:mod:`gpuprof.memory.html`) has its own script and stylesheet here
(``memory.js``, ``memory.css``). The figures both
draw are computed once, in :mod:`gpuprof.render.web.model`.
"""

from __future__ import annotations

from importlib import resources

__all__ = ["SCRIPT", "STYLE", "read"]


def read(name: str) -> str:
    """The package file ``name`` of this folder, as text.

    Normalised to LF: a browser hashes an inline element's text after turning CR LF into LF.
    """
    return resources.files(__name__).joinpath(name).read_text(encoding="utf-8").replace("\r\n", "\n")


# the timeline (GP.timeline) is its own file of the same shared code: report.js defines GP, timeline.js adds to it
SCRIPT = read("report.js") + read("timeline.js")
STYLE = read("report.css")

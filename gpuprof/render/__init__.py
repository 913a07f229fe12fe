"""Renderers: turn a :class:`~gpuprof.report.Report` into text for people or programs.

``render(report, fmt)`` dispatches on the format name. Summaries other than
trace summaries (memory analysis, capture runs) are drawn by section renderers
registered in :mod:`gpuprof.render.sections`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover - annotations only: `gpuprof --help` imports gpuprof.render.safe, not numpy
    from gpuprof.report import Report

__all__ = ["render"]


def render(report: Report, fmt: str, color: bool | None = None) -> str:
    """Render ``report`` as ``terminal`` (rich), ``json`` or ``markdown`` text.

    ``color`` None means: colour when stdout is a terminal.
    """
    if fmt == "json":
        from gpuprof.render.jsonout import render_json

        return render_json(report)
    if fmt == "markdown":
        from gpuprof.render.markdown import render_markdown

        return render_markdown(report)
    if fmt == "terminal":
        from gpuprof.render.terminal import render_terminal

        return render_terminal(report, color=color)
    raise ValueError(f"unknown format {fmt!r}")

"""How a :class:`~gpuprof.report.Report` draws itself as HTML in a notebook, without the report importing a renderer.

The report sits below the renderers (tests/test_layers.py), so its
``_repr_html_`` asks this slot. ``import gpuprof`` fills it with a function
that imports :mod:`gpuprof.render.notebook` on its first call, so neither
``import gpuprof`` nor the command line loads the renderer (nor numpy) for
it; importing :mod:`gpuprof.render.notebook` fills it too. Standard library
only: the package root imports this module.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover - annotations only
    from gpuprof.report import Report

__all__ = ["register_html", "report_html"]

_HTML: list[Callable[[Report], str]] = []


def register_html(render: Callable[[Report], str]) -> None:
    """Draw reports with ``render`` from now on (the last one registered wins)."""
    _HTML[:] = [render]


def report_html(report: Report) -> str | None:
    """``report`` as an HTML fragment, or None (plain text) when no renderer is registered."""
    return _HTML[0](report) if _HTML else None

"""gpuprof: why is my PyTorch training slow, and where did the GPU memory go.

Analysis (``gpuprof.analyze``) needs no torch and no GPU. The capture API
(``gpuprof.profile``, ``gpuprof.profile_step``) imports torch lazily, on
first use. Every public name is imported on first use, so ``import gpuprof``
(and the ``gpuprof`` command, whose ``--help`` imports the package) loads no
numpy, msgspec, rich or torch; ``dir(gpuprof)`` lists them all.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuprof.lazyexports import lazy_exports
from gpuprof.notebookhook import register_html
from gpuprof.version import __version__

if TYPE_CHECKING:  # pragma: no cover
    from gpuprof.analysis import analyze, analyze_trace
    from gpuprof.capture import profile, profile_step
    from gpuprof.capture.result import CaptureResult
    from gpuprof.findings import Finding, Severity
    from gpuprof.report import Report

__all__ = [
    "__version__",
    "analyze",
    "analyze_trace",
    "Finding",
    "Severity",
    "Report",
    "CaptureResult",
    "profile",
    "profile_step",
]

# name -> the module (under gpuprof) that defines it. Lazy so that `gpuprof analyze` never imports torch
# (capture does) and the command line starts without the analysis machinery.
_LAZY = {
    "analyze": "analysis",
    "analyze_trace": "analysis",
    "Finding": "findings",
    "Severity": "findings",
    "Report": "report",
    "profile": "capture",
    "profile_step": "capture",
    "CaptureResult": "capture.result",  # torch-free: a result can be read where torch is absent
}


def _report_html(report: Report) -> str:
    """A Report drawn as HTML in a notebook; the renderer (and ``html``) imported on first use, not by the CLI."""
    from gpuprof.render.notebook import report_html

    return report_html(report)


register_html(_report_html)

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals(), __all__)

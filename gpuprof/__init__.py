"""gpuprof: why is my PyTorch training slow, and where did the GPU memory go.

Analysis (``gpuprof.analyze``) needs no torch and no GPU. The capture API
(``gpuprof.profile``, ``gpuprof.profile_step``) imports torch lazily, on
first use, so ``import gpuprof`` stays cheap and torch-free.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpuprof.version import __version__

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

from gpuprof.findings import Finding, Severity
from gpuprof.report import Report, register_html


def _report_html(report: Report) -> str:
    """A Report drawn as HTML in a notebook; the renderer (and ``html``) imported on first use, not by the CLI."""
    from gpuprof.render.notebook import report_html

    return report_html(report)


register_html(_report_html)

if TYPE_CHECKING:  # pragma: no cover
    from gpuprof.analysis import analyze, analyze_trace
    from gpuprof.capture import profile, profile_step
    from gpuprof.capture.result import CaptureResult

_LAZY = {
    "analyze": "gpuprof.analysis",
    "analyze_trace": "gpuprof.analysis",
    "profile": "gpuprof.capture",
    "profile_step": "gpuprof.capture",
    "CaptureResult": "gpuprof.capture.result",  # torch-free: a result can be read where torch is absent
}


def __getattr__(name: str) -> Any:
    # Lazy so that `gpuprof analyze` never imports torch (capture does).
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'gpuprof' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)

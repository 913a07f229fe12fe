"""Capture: profile a PyTorch training loop and diagnose it as it runs.

::

    import gpuprof

    with gpuprof.profile("logs") as prof:          # context manager
        for batch in loader:
            train_step(batch)
            prof.step()

    @gpuprof.profile_step("logs")                 # or a decorator: each call is a step
    def train_step(batch): ...

See ``docs/capture.md`` for the files written, the defaults and the runtime
checks (GP6xx). This package imports torch; ``import gpuprof`` does not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuprof.lazyexports import lazy_exports

if TYPE_CHECKING:  # pragma: no cover
    from gpuprof.capture.api import StepProfiler, profile, profile_step
    from gpuprof.capture.config import CaptureConfig, CheckOptions, Schedule
    from gpuprof.capture.guard import GpuprofWarning
    from gpuprof.capture.placement import DeviceMismatchError
    from gpuprof.capture.result import CaptureResult, RecordedTrace, WindowReport
    from gpuprof.capture.run import TraceFile
    from gpuprof.capture.session import Profiler

__all__ = [
    "profile",
    "profile_step",
    "Profiler",
    "StepProfiler",
    "Schedule",
    "CheckOptions",
    "CaptureConfig",
    "TraceFile",
    "CaptureResult",
    "RecordedTrace",
    "WindowReport",
    "GpuprofWarning",
    "DeviceMismatchError",
]

# Each name from the module that defines it, on first use: importing this package (as `gpuprof.capture.X`
# for any X does) must not load the whole capture machinery (sessions, checks, torch) with it. The runtime
# checks' codes live beside the registry (gpuprof.runtimecodes), which never imports capture.
_LAZY = {
    "profile": "api", "profile_step": "api", "StepProfiler": "api",
    "CaptureConfig": "config", "CheckOptions": "config", "Schedule": "config",
    "GpuprofWarning": "guard",
    "DeviceMismatchError": "placement",
    "CaptureResult": "result", "RecordedTrace": "result", "WindowReport": "result",
    "Profiler": "session", "TraceFile": "run",
}


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals(), __all__)

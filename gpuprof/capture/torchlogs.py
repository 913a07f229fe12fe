"""Keep torch's own profiler chatter out of the user's log while gpuprof's profiler runs.

Two lines landed in the user's stderr on every capture, neither from the user's code:

- ``USDT:... SyncActivityProfilerHandler.cpp:52] profiler_start`` (and ``profiler_stop``):
  kineto, the profiler library inside torch, logs each start and stop at its
  ``USDT`` level, above ``ERROR``, so only ``KINETO_LOG_LEVEL=6`` silences
  it. Kineto reads that variable once, when its first profiler starts in the
  process; :func:`hush` sets it just before gpuprof's first start when the user
  has not set it (a value of theirs is kept), and :func:`unhush` takes it out of
  the environment again, so child processes do not inherit it. The price:
  kineto's own error lines are off too; gpuprof notices a profiler that fails
  (no trace, CUPTI missing) and says so itself.
- ``[W... CPUAllocator.cpp:245] Memory block of unknown size was allocated before
  the profiling started``: c10's ``LOG(WARNING)`` (not a Python warning), printed
  when a CPU block allocated before ``profile_memory=True`` began is freed while
  it runs, which is every capture. c10 reads its threshold from the global
  ``FLAGS_caffe2_log_level`` in ``libc10``, which no Python API sets; while
  gpuprof's profiler runs it is raised from ``WARNING`` (torch's default) to
  ``ERROR`` through ctypes, and put back when the profiler stops. A threshold
  the user chose (``TORCH_CPP_LOG_LEVEL``) is left alone.

The user's own warnings are untouched: Python warnings and ``TORCH_WARN``
(which torch turns into Python warnings) do not go through either switch.
Everything here is best effort: where the library or its symbol is missing
(macOS, Windows, another torch build) nothing changes.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading

__all__ = ["hush", "unhush"]

KINETO_QUIET = "6"  # kineto's levels: VERBOSE 0, INFO 1, WARNING 2, STAGE 3, ERROR 4, USDT 5
C10_WARNING, C10_ERROR = 1, 2  # c10's: INFO 0, WARNING 1, ERROR 2, FATAL 3

_lock = threading.Lock()
_state: dict[str, bool] = {"kineto_env": False, "c10": False}


def _c10_level() -> ctypes.c_int | None:
    """``FLAGS_caffe2_log_level`` of the loaded ``libc10.so``, or None where it cannot be reached."""
    torch = sys.modules.get("torch")
    where = getattr(torch, "__file__", None)
    if not isinstance(where, str) or not sys.platform.startswith("linux"):
        return None
    path = os.path.join(os.path.dirname(where), "lib", "libc10.so")
    try:
        # already loaded by torch: dlopen hands back the same library, nothing new is loaded
        return ctypes.c_int.in_dll(ctypes.CDLL(path), "FLAGS_caffe2_log_level")
    except (OSError, ValueError):
        return None


def hush() -> None:
    """Before gpuprof's torch profiler starts: kineto's start/stop lines and c10's allocator
    warning off, unless the user set those levels. Idempotent."""
    with _lock:
        if "KINETO_LOG_LEVEL" not in os.environ:
            os.environ["KINETO_LOG_LEVEL"] = KINETO_QUIET
            _state["kineto_env"] = True
        if not _state["c10"]:
            level = _c10_level()
            if level is not None and level.value == C10_WARNING:
                level.value = C10_ERROR
                _state["c10"] = True


def unhush() -> None:
    """After gpuprof's torch profiler stopped: c10's threshold back to ``WARNING`` (unless someone
    changed it meanwhile) and the kineto variable out of the environment. Idempotent."""
    with _lock:
        if _state["kineto_env"] and os.environ.get("KINETO_LOG_LEVEL") == KINETO_QUIET:
            del os.environ["KINETO_LOG_LEVEL"]
        _state["kineto_env"] = False
        if _state["c10"]:
            level = _c10_level()
            if level is not None and level.value == C10_ERROR:
                level.value = C10_WARNING
            _state["c10"] = False

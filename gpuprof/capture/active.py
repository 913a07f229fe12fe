"""One profiler at a time: which capture owns this process, and is anyone else profiling.

PyTorch's profiler (Kineto) is one per process. A second one started while
another runs takes the first one's session away: the first one's
``export_chrome_trace`` then reads freed state and the process segfaults, at
once or at exit (issue 8). Lightning, Hugging Face and many training loops
run their own profiler, so this is a common case, not a corner one.

So a gpuprof capture *claims* the process before it starts (one claim per
process, taken under a lock), and before each torch profiler it starts it
asks :func:`other_profiler` whether someone else's profiler is running. When
either says no, gpuprof records nothing and says so in one warning; it never
touches the other profiler.

The claim belongs to the process that took it: after ``fork`` (DataLoader
workers, ``multiprocessing``) the child forgets it, and the child's copy of
the capture is marked inherited so it never writes or stops anything of the
parent's. At interpreter exit a capture that was started and never stopped is
stopped here, so the torch profiler is never left running into shutdown.
"""

from __future__ import annotations

import atexit
import os
import threading
from typing import Any, Protocol

__all__ = ["claim", "release", "owner", "other_profiler"]


class _Capture(Protocol):
    def stop(self) -> Any: ...

    def forget_after_fork(self) -> None: ...


_lock = threading.Lock()
_owner: _Capture | None = None
_owner_pid = 0


def owner() -> _Capture | None:
    """The capture that holds this process's claim, if any."""
    return _owner if _owner_pid == os.getpid() else None


def claim(capture: _Capture) -> str | None:
    """Take this process for ``capture``; return None, or (one line) why another profiler has it."""
    global _owner, _owner_pid
    with _lock:
        held = owner()
        if held is capture:
            return None
        if held is not None:
            return "another gpuprof capture is already running in this process (nested or on another thread)"
        why = other_profiler()
        if why is not None:
            return why
        _owner, _owner_pid = capture, os.getpid()
        return None


def release(capture: _Capture) -> None:
    """Give the claim back (only its holder can)."""
    global _owner
    with _lock:
        if _owner is capture:
            _owner = None


def other_profiler() -> str | None:
    """Why no torch profiler may start now: a profiler someone else started is running; else None.

    Call it only while gpuprof's own torch profiler is not running (it would
    find that one). Two signals, because neither covers every case: torch's
    Python flag is process-wide and set by ``torch.profiler.profile`` and
    ``torch.autograd.profiler.profile``; the C++ state also sees profilers
    started without the Python wrappers (legacy, ITT/NVTX, Kineto via
    ``_enable_profiler``), but only on the calling thread.
    """
    import torch

    autograd_profiler = getattr(torch.autograd, "profiler", None)
    if getattr(autograd_profiler, "_is_profiler_enabled", False):
        return "a torch profiler is already running (torch.profiler.profile or torch.autograd.profiler.profile)"
    c_autograd = getattr(torch._C, "_autograd", None)
    enabled = getattr(c_autograd, "_profiler_enabled", None)
    if enabled is not None and enabled():
        kind = getattr(c_autograd, "_profiler_type", None)
        name = str(kind()).rsplit(".", 1)[-1] if kind is not None else "unknown"
        return f"a PyTorch profiler ({name}) is already running on this thread"
    return None


def _forget_in_child() -> None:
    # runs in the child right after fork: the parent's capture is not the child's; a
    # lock another parent thread held at the fork would stay locked here forever
    global _owner, _lock
    _lock = threading.Lock()
    held, _owner = _owner, None
    if held is not None:
        held.forget_after_fork()


def _stop_at_exit() -> None:
    held = owner()
    if held is not None:
        held.stop()  # Profiler.stop guards its own parts and always releases the claim


os.register_at_fork(after_in_child=_forget_in_child)
atexit.register(_stop_at_exit)

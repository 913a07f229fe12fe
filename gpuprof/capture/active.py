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

Someone else's profiler can also start *after* gpuprof's, inside its
recorded window (a callback, a library, the user's own code). PyTorch cannot
run both: the second takes the first one's session, and exporting either
then crashes the process. While gpuprof's torch profiler runs, :func:`watch`
therefore wraps the three places every Python-level torch profiler goes
through to start (``_prepare_profiler`` for Kineto, ``_run_on_profiler_start``
for Kineto/ITT/NVTX, ``_enable_profiler_legacy``) so that gpuprof first
stops its own profiler (:func:`watch`'s ``give_way``) and the other one then
starts as if gpuprof had not been there. gpuprof's own calls into torch's
profiler run under :func:`own_call` and pass straight through.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any, Protocol

__all__ = ["claim", "release", "owner", "other_profiler", "watch", "unwatch", "own_call"]


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


# (module, attribute) of torch's profiler-start functions that watch() wraps
_START_POINTS = (
    ("torch.autograd.profiler", "_prepare_profiler"),
    ("torch.autograd.profiler", "_run_on_profiler_start"),
    ("torch.autograd.profiler_legacy", "_enable_profiler_legacy"),
)
_calls = threading.local()  # .ours: this thread is inside gpuprof's own call into torch's profiler
_give_way: Callable[[], None] | None = None


@contextlib.contextmanager
def own_call() -> Iterator[None]:
    """Mark gpuprof's own calls into torch's profiler, which the start-point wrappers let through."""
    before = getattr(_calls, "ours", False)
    _calls.ours = True
    try:
        yield
    finally:
        _calls.ours = before


def watch(give_way: Callable[[], None]) -> None:
    """Call ``give_way`` (it must not raise) before any other torch profiler starts, until :func:`unwatch`.

    The wrappers stay in torch's modules once installed (someone may have
    wrapped them again on top of ours); with nothing watched they only pass
    the call through.
    """
    global _give_way
    import importlib

    _give_way = give_way
    for module_name, attr in _START_POINTS:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        original = getattr(module, attr, None)
        if original is None or getattr(original, "__gpuprof_original__", None) is not None:
            continue  # absent in this torch, or already wrapped
        setattr(module, attr, _wrap_start(original))


def unwatch() -> None:
    """Stop watching for other profilers (gpuprof's own profiler has stopped)."""
    global _give_way
    _give_way = None


def _wrap_start(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def starting_a_profiler(*args: Any, **kwargs: Any) -> Any:
        give_way = _give_way
        if give_way is not None and not getattr(_calls, "ours", False):
            give_way()
        return original(*args, **kwargs)

    starting_a_profiler.__gpuprof_original__ = original  # type: ignore[attr-defined]
    return starting_a_profiler


def _forget_in_child() -> None:
    # runs in the child right after fork: the parent's capture is not the child's; a
    # lock another parent thread held at the fork would stay locked here forever
    global _owner, _lock, _give_way
    _lock = threading.Lock()
    _give_way = None
    held, _owner = _owner, None
    if held is not None:
        held.forget_after_fork()


def _stop_at_exit() -> None:
    held = owner()
    if held is not None:
        from gpuprof.capture.exitstatus import keeping_interrupt_status

        with keeping_interrupt_status():  # Ctrl-C's exit status (130) survives the stop's own Python
            held.stop()  # Profiler.stop guards its own parts and always releases the claim


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
    os.register_at_fork(after_in_child=_forget_in_child)
atexit.register(_stop_at_exit)

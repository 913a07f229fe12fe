"""Never break training: gpuprof's own failures become one warning each.

Every piece of gpuprof that runs inside the user's loop (the profiler, the
trace export, the TensorBoard writer, the memory recorder, the checks) runs
through :meth:`Guard.run`. An ``Exception`` raised there is turned into one
:class:`GpuprofWarning` naming the part, the error and what is lost; the part
is then switched off so the warning is not repeated every step. Nothing is
silently swallowed: the warning always says what failed.
``KeyboardInterrupt``/``SystemExit`` are not ``Exception`` and pass through.

Exceptions come from user code, so their ``__str__`` is user code too: it is
only ever called through :func:`safe_text`, which cannot raise.
"""

from __future__ import annotations

import sys
import warnings
from types import FrameType
from typing import Any, Callable, TypeVar

from gpuprof.render.safe import visible

__all__ = ["DeferredGuard", "GpuprofWarning", "Guard", "safe_text", "user_stacklevel"]

T = TypeVar("T")


class GpuprofWarning(RuntimeWarning):
    """A part of gpuprof failed or is unavailable; training goes on without it."""


def safe_text(obj: object, limit: int = 300) -> str:
    """``str(obj)`` on one line, control characters shown as escapes, at most ``limit`` characters; never raises.

    A user's exception may have a ``__str__`` that raises (or returns a non-str);
    calling it unguarded on gpuprof's error path would replace the user's
    exception with that error and leave the profiler running.
    """
    try:
        text = str(obj)  # str() itself raises TypeError when __str__ returns a non-str
    except Exception as err:  # noqa: BLE001 - the text is diagnostic only; say that it failed
        text = f"<{_type_name(obj)}: str() failed with {_type_name(err)}>"
    text = visible(" ".join(text.split()))  # warnings reach a terminal: no escape sequence acts there
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return text


def _type_name(obj: object) -> str:
    try:
        # type.__name__ read through type itself, so a metaclass property cannot run
        name = type.__dict__["__name__"].__get__(type(obj))
    except Exception:  # noqa: BLE001 - a class without a readable name still gets a label
        name = "object"
    return name if isinstance(name, str) else "object"


def user_stacklevel() -> int:
    """The ``stacklevel`` that points a warning at the user's line (:func:`gpuprof.frames.is_user_file`),
    past gpuprof's capture, context managers and torch's profiler (gpuprof warns from inside it when
    another profiler starts).

    Counted for a ``warnings.warn`` called by the function that calls this one.
    """
    from gpuprof.frames import is_user_file

    level = 1
    frame: FrameType | None = sys._getframe(1)  # the function that calls warnings.warn: stacklevel 1
    while frame is not None:
        if is_user_file(frame.f_code.co_filename):
            return level
        frame = frame.f_back
        level += 1
    return 1


class Guard:
    """Runs gpuprof's parts, turning their failures into one warning each."""

    def __init__(self) -> None:
        self.failed: dict[str, str] = {}  # part -> one-line reason
        self.notes: list[str] = []
        self.said: set[str] = set()  # keys of warn_once messages already given
        self.warned: list[str] = []  # every warning given, in order (the capture result's ``warnings``)

    def ok(self, part: str) -> bool:
        return part not in self.failed

    def run(self, part: str, consequence: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T | None:
        """Call ``fn``; on an ``Exception`` warn once, mark ``part`` failed and return None."""
        if part in self.failed:
            return None
        try:
            return fn(*args, **kwargs)
        except Exception as err:  # noqa: BLE001 - reported as a warning, never silent
            self.fail(part, consequence, err)
            return None

    def fail(self, part: str, consequence: str, err: BaseException | str) -> None:
        """Record a failure of ``part`` and warn once."""
        if part in self.failed:
            return
        reason = safe_text(err if isinstance(err, str) else f"{_type_name(err)}: {safe_text(err, 10_000)}")
        self.failed[part] = reason
        self._warn(f"gpuprof: {part} failed ({reason}); {consequence}. Training continues.")

    def disable(self, part: str, reason: str, message: str) -> None:
        """Switch ``part`` off for a reason that is no failure (e.g. another profiler runs); warn ``message`` once."""
        if part in self.failed:
            return
        self.failed[part] = safe_text(reason)
        self._warn(message)

    def warn_once(self, key: str, message: str) -> None:
        """Warn ``message`` (a full sentence) the first time ``key`` is seen, never again."""
        if key in self.said:
            return
        self.said.add(key)
        self._warn(message)

    def _warn(self, message: str) -> None:
        self.warned.append(message)
        warnings.warn(message, GpuprofWarning, stacklevel=user_stacklevel())

    def all_failed(self) -> dict[str, str]:
        """Every part failed so far, for the report's ``failures``."""
        return dict(self.failed)

    def note(self, text: str) -> None:
        """A one-line note (a feature unavailable here), kept for the report."""
        if text not in self.notes:
            self.notes.append(text)


class DeferredGuard(Guard):
    """A :class:`Guard` for gpuprof's background report thread: failures are kept, not warned.

    ``warnings.warn`` from a background thread points at no line of the user's
    and races with ``warnings.catch_warnings`` on the training thread, so the
    failures are recorded here and :meth:`replay` hands them to the session's
    guard on the driving thread (at its next ``step()`` or at ``stop()``),
    where each becomes the usual one warning. A part the session's guard
    already marked failed is skipped here too.
    """

    def __init__(self, parent: Guard) -> None:
        super().__init__()
        self._parent = parent
        self.notes = list(parent.notes)
        self.deferred: list[tuple[str, str, BaseException | str]] = []

    def ok(self, part: str) -> bool:
        return part not in self.failed and self._parent.ok(part)

    def run(self, part: str, consequence: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T | None:
        if not self.ok(part):
            return None
        try:
            return fn(*args, **kwargs)
        except Exception as err:  # noqa: BLE001 - kept and replayed as a warning on the driving thread
            self.fail(part, consequence, err)
            return None

    def fail(self, part: str, consequence: str, err: BaseException | str) -> None:
        if not self.ok(part):
            return
        self.failed[part] = safe_text(err if isinstance(err, str) else f"{_type_name(err)}: {safe_text(err, 10_000)}")
        self.deferred.append((part, consequence, err))

    def all_failed(self) -> dict[str, str]:
        """The parent's failures and this thread's, for the report's ``failures``."""
        return {**self._parent.failed, **self.failed}

    def replay(self) -> None:
        """Warn about each kept failure through the parent guard (call on the driving thread)."""
        kept, self.deferred = self.deferred, []
        for part, consequence, err in kept:
            self._parent.fail(part, consequence, err)

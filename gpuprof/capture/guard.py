"""Never break training: gpuprof's own failures become one warning each.

Every piece of gpuprof that runs inside the user's loop (the profiler, the
trace export, the TensorBoard writer, the memory recorder, the checks) runs
through :meth:`Guard.run`. An ``Exception`` raised there is turned into one
:class:`GpuprofWarning` naming the part, the error and what is lost; the part
is then switched off so the warning is not repeated every step. Nothing is
silently swallowed: the warning always says what failed.
``KeyboardInterrupt``/``SystemExit`` are not ``Exception`` and pass through.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, TypeVar

__all__ = ["GpuprofWarning", "Guard"]

T = TypeVar("T")


class GpuprofWarning(RuntimeWarning):
    """A part of gpuprof failed or is unavailable; training goes on without it."""


class Guard:
    """Runs gpuprof's parts, turning their failures into one warning each."""

    def __init__(self) -> None:
        self.failed: dict[str, str] = {}  # part -> one-line reason
        self.notes: list[str] = []

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
        reason = err if isinstance(err, str) else f"{type(err).__name__}: {err}"
        reason = " ".join(str(reason).split())
        if len(reason) > 300:
            reason = reason[:297] + "..."
        self.failed[part] = reason
        warnings.warn(
            f"gpuprof: {part} failed ({reason}); {consequence}. Training continues.",
            GpuprofWarning,
            stacklevel=4,
        )

    def note(self, text: str) -> None:
        """A one-line note (a feature unavailable here), kept for the report."""
        if text not in self.notes:
            self.notes.append(text)

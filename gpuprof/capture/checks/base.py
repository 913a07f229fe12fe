"""The ``Monitor`` protocol every runtime check follows, and ``Live``, the session state they read.

A monitor is one runtime check (or one runtime measurement) wired into the
session at a few fixed points; the session calls every monitor in its list
at each point, each call guarded under the monitor's ``part`` name, so a
failing check is one warning and the others (and the training) go on:

* :meth:`~Monitor.install` when the capture starts (hooks that cost nothing
  per step, or only during step 0); :meth:`~Monitor.uninstall` when it stops;
* :meth:`~Monitor.first_step` after the first step;
* :meth:`~Monitor.step` after every step, only for monitors with
  ``per_step = True`` (keep it to a few microseconds);
* :meth:`~Monitor.recording` when the torch profiler enters or leaves the
  recorded steps (``span`` names the trace being written, on leaving);
  :meth:`~Monitor.recorded_step` after each recorded step;
* :meth:`~Monitor.findings` when a report is made (driving thread: it may
  touch torch), only when ``checks`` is on.

:class:`MonitorBase` gives every point a no-op, so a check implements the
points it needs. Adding a check: one module in this package (a folder when the check has modules of its own)
and one line in ``monitors()`` (``gpuprof/capture/checks/__init__.py``).
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, NoReturn, Protocol, TextIO, TypeVar, overload

from gpuprof.findings import Finding, SourceLocation

if TYPE_CHECKING:  # pragma: no cover - annotations only
    from gpuprof.capture.config import CaptureConfig
    from gpuprof.capture.guard import Guard
    from gpuprof.capture.paths import RankInfo, RunPaths

__all__ = ["Live", "Monitor", "MonitorBase", "cuda_used"]


class Monitor(Protocol):
    part: str  # the guard's name for the check: its warnings and the report's ``failures`` say it
    consequence: str  # what is lost when it fails ("no device-placement findings")
    per_step: bool  # step() is called after every step

    def install(self, live: Live) -> None: ...

    def first_step(self, live: Live) -> None: ...

    def step(self, live: Live) -> None: ...

    def recording(self, live: Live, on: bool, span: int | None) -> None: ...

    def recorded_step(self, live: Live) -> None: ...

    def uninstall(self, live: Live) -> None: ...

    def findings(self, live: Live) -> list[Finding]: ...


class MonitorBase:
    """No-op implementations of every :class:`Monitor` point."""

    part = ""
    consequence = ""
    per_step = False

    def install(self, live: Live) -> None:
        return None

    def first_step(self, live: Live) -> None:
        return None

    def step(self, live: Live) -> None:
        return None

    def recording(self, live: Live, on: bool, span: int | None) -> None:
        return None

    def recorded_step(self, live: Live) -> None:
        return None

    def uninstall(self, live: Live) -> None:
        return None

    def findings(self, live: Live) -> list[Finding]:
        return []


M = TypeVar("M")


@dataclass
class Live:
    """The live session's state, as the monitors read it (the driving thread changes it every step)."""

    config: CaptureConfig
    guard: Guard
    ranks: RankInfo
    cuda: bool = False
    paths: RunPaths | None = None
    location: SourceLocation | None = None  # the user's loop (for findings without a better place)
    stream: TextIO = field(default_factory=lambda: sys.stderr)  # where notices are printed
    step_num: int = 0  # steps completed so far
    recorded_steps: int = 0  # steps the torch profiler recorded
    # per step, as machine doubles (8 bytes, not a float object and a list slot): kept for every step of the job
    step_s: array[float] = field(default_factory=lambda: array("d"))  # per step: its time
    fetch_s: array[float] = field(default_factory=lambda: array("d"))  # per step: time waiting for DataLoaders
    # steps gpuprof slowed (a profiler alive, a window's report being made, the steps just after): not the job's
    own_steps: array[int] = field(default_factory=lambda: array("l"))
    monitor_own_until: int = -1  # a monitor's own work (the host-memory census) makes the steps up to this one gpuprof's
    step_signatures: list[object] = field(default_factory=list)  # the first steps' argument shapes
    findings: list[Finding] = field(default_factory=list)  # found outside the monitors (device errors, OOM)
    monitors: list[Monitor] = field(default_factory=list)

    def find(self, kind: type[M]) -> M | None:
        """The session's monitor of this class, if it runs one."""
        return next((m for m in self.monitors if isinstance(m, kind)), None)


V = TypeVar("V")


class _HoldsLive(Protocol):
    live: Live


class LiveField(Generic[V]):
    """A read-only attribute of the session that reads its :class:`Live` (``Profiler.step_num``)."""

    def __init__(self, read: Callable[[Live], V], doc: str | None = None) -> None:
        self.read = read
        self.name = ""
        self.__doc__ = doc

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> LiveField[V]: ...
    @overload
    def __get__(self, obj: _HoldsLive, owner: type | None = None) -> V: ...

    def __get__(self, obj: _HoldsLive | None, owner: type | None = None) -> LiveField[V] | V:
        return self if obj is None else self.read(obj.live)

    def __set__(self, obj: _HoldsLive, value: NoReturn) -> None:  # mypy refuses an assignment too
        raise AttributeError(f"{self.name} is read-only (the session's live state)")


def cuda_used() -> bool:
    """CUDA holds memory of this process now (the loop trains on the GPU)."""
    import torch

    return bool(torch.cuda.is_initialized() and torch.cuda.memory_allocated() > 0)  # type: ignore[no-untyped-call]

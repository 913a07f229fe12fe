"""One test's capture: ``gpuprof run``'s optimizer-step clock, hooked in for the test body only.

The clock (:class:`gpuprof.run.clock.OptimizerClock`) is the one ``gpuprof
run`` uses: one step per step of the first optimizer that steps, the capture
starting when that first step ends. Here it is registered as a global
optimizer step post-hook when the test body starts and removed when it ends,
so a test that runs a plain training loop needs no gpuprof line, and nothing
outside the test body is counted. torch is imported here, when a marked test
runs, never when the plugin loads.

Every failure of gpuprof's own is one :class:`GpuprofWarning` and the test
runs on unprofiled; the test's own exceptions are never touched here.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover - annotations only
    from gpuprof.capture.config import CaptureConfig
    from gpuprof.capture.result import CaptureResult
    from gpuprof.pytest_plugin.marker import Limits
    from gpuprof.run.clock import OptimizerClock

__all__ = ["TestCapture", "run_name", "warn"]

WAIT_STEPS = 2  # steps left out before the recorded window (the first steps warm the caches up)
WARMUP_STEPS = 1  # the torch profiler runs, its events dropped (its own start-up cost stays out)
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
MAX_NAME = 120


def warn(text: str) -> None:
    """gpuprof's own trouble: one warning, never a failed test."""
    from gpuprof.capture.guard import GpuprofWarning

    warnings.warn(f"gpuprof: {text}", GpuprofWarning, stacklevel=2)


def run_name(nodeid: str, logdir: Path) -> str:
    """A run directory name for a test: its node id made safe (no ``/``, no ``..``, bounded), new under ``logdir``.

    A name already taken there (a rerun with ``--gpuprof-dir``) gets ``-2``, ``-3``... so runs never mix.
    """
    base = _UNSAFE.sub("_", nodeid.replace("::", "__")).strip("._-")[:MAX_NAME] or "test"
    name, n = base, 1
    while (logdir / name).exists():
        n += 1
        name = f"{base}-{n}"
    return name


def needed_steps(limits: "Limits") -> int:
    """Optimizer steps a test must run for its window to be recorded (the clock starts after the first)."""
    return 1 + WAIT_STEPS + WARMUP_STEPS + limits.steps


class TestCapture:
    """Profile the optimizer steps taken between :meth:`start` and :meth:`finish` (see the module docstring)."""

    __test__ = False  # not a test class, whatever pytest's collection thinks of the name

    def __init__(self, logdir: Path, run: str, limits: "Limits") -> None:
        self.logdir = logdir
        self.run = run
        self.limits = limits
        self.clock: OptimizerClock | None = None
        self.result: CaptureResult | None = None
        self._handle: Any = None
        self._done = False

    @property
    def run_dir(self) -> Path:
        return self.logdir / self.run

    def config(self) -> "CaptureConfig":
        from gpuprof.capture.config import CaptureConfig, Schedule

        return CaptureConfig(
            logdir=str(self.logdir), run=self.run,
            schedule=Schedule(wait=WAIT_STEPS, warmup=WARMUP_STEPS, active=self.limits.steps),
            select=self.limits.select, ignore=self.limits.ignore,
            # a test is short: no TensorBoard events, no summary on stderr (the failure message says it), no
            # further windows, no trigger registration, no hang watchdog (pytest-timeout's job)
            tensorboard=False, print_report=False, max_auto_windows=0, trigger=False, hang_timeout=0)

    def start(self) -> bool:
        """Hook the optimizer clock in; False (one warning said) when gpuprof cannot."""
        try:
            config = self.config()
            from gpuprof.capture.checks.loader import dataloader
            from gpuprof.capture.session import Profiler
            from gpuprof.run.clock import OptimizerClock
            from gpuprof.run.options import RunOptions
            from gpuprof.torchdep import import_torch

            import_torch()  # the one line naming what to install, without torch
            from torch.optim.optimizer import register_optimizer_step_post_hook

            dataloader.prepare()  # the loop's DataLoader iterator is made before the first step
            self.clock = clock = OptimizerClock(RunOptions(logdir=str(self.logdir), run=self.run),
                                                make=lambda: Profiler(config))
            self._handle = register_optimizer_step_post_hook(clock.on_optimizer_step)
            return True
        except Exception as err:  # noqa: BLE001 - gpuprof's own failure: one warning, the test runs unprofiled
            warn(f"cannot profile this test ({type(err).__name__}: {_text(err)}); it runs unprofiled")
            self._done = True
            return False

    def failed(self, exc: BaseException) -> None:
        """The test body raised: let the capture record what the error tells (a device mismatch). Never raises."""
        clock = self.clock
        if clock is not None:
            clock.handle_error(exc)

    def finish(self) -> "CaptureResult | None":
        """Unhook the clock and end the capture (idempotent); the result, None when nothing was recorded."""
        if self._done:
            return self.result
        self._done = True
        try:
            if self._handle is not None:
                self._handle.remove()
            clock = self.clock
            if clock is not None:
                self.result = clock.finish()
                if clock.off == "failed":
                    warn("the optimizer step clock failed during this test (said above); its figures are partial")
        except Exception as err:  # noqa: BLE001 - gpuprof's own failure: one warning
            warn(f"ending the capture failed ({type(err).__name__}: {_text(err)})")
        return self.result

    @property
    def optimizer_steps(self) -> int:
        return self.clock.steps if self.clock is not None else 0

    @property
    def clock_running(self) -> bool:
        """The clock counted every optimizer step of the body (it neither stood down nor failed)."""
        return self.clock is not None and self.clock.off is None

    @property
    def stood_down(self) -> str | None:
        """Why the clock recorded nothing on purpose (the test runs its own gpuprof capture), else None."""
        clock = self.clock
        return clock.off if clock is not None and clock.off not in (None, "failed") else None


def _text(err: BaseException) -> str:
    from gpuprof.capture.guard import safe_text

    return safe_text(err)

"""The step clock of ``gpuprof run``: where a step ends in a script nobody edited.

Three sources, the first that applies wins (docs/run.md, "The step clock"):

1. **A framework's trainer.** Lightning's and Hugging Face's ``Trainer`` get
   gpuprof's callback added when they are built (unless the user added one):
   one step per optimizer step, their DataLoaders and ranks as the callbacks
   know them (:mod:`gpuprof.integrations`). The optimizer clock then stands
   down for good in that process.
2. **``--step-function module:function``**: each call of that function is one
   step, as with ``gpuprof.profile_step``.
3. **The optimizer**: a global ``Optimizer.step`` post-hook. Only the first
   optimizer that steps counts (a GAN's second optimizer, Accelerate's wrapper
   around the real one, are not extra steps), and Accelerate's
   ``AcceleratedOptimizer`` does not step the real optimizer while it
   accumulates gradients, so a step is an optimizer step, not a micro-batch.
   The capture starts at the end of the first optimizer step (nothing is
   known about the process before it: torchrun's agent and DataLoader workers
   never get that far and record nothing) and ends at exit, or before
   ``torch.distributed.destroy_process_group()`` so the cross-rank report can
   still be gathered.

The clock stands down whenever a gpuprof capture the user started
(``gpuprof.profile``, ``profile_step``, a callback they added) owns the
process. Every failure of the clock's own is one line on stderr and the clock
stops; the training goes on.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import sys
import threading
import weakref
from typing import TYPE_CHECKING, Any, Callable

from gpuprof.run.options import RunOptions, Scalar

if TYPE_CHECKING:  # pragma: no cover - annotations only
    from gpuprof.capture.config import CaptureConfig
    from gpuprof.capture.result import CaptureResult
    from gpuprof.capture.session import Profiler

__all__ = ["OptimizerClock", "say", "capture_config", "framework_options"]


def say(text: str) -> None:
    """One line on stderr (never raises: a closed stderr is not the user's problem), inert: a name in it (an
    error's text, a function's) shows its control characters and line breaks as escapes, as the findings do."""
    with contextlib.suppress(Exception):  # nowhere left to say it
        from gpuprof.render.safe import visible

        sys.stderr.write(f"gpuprof run: {visible(text)}\n")
        sys.stderr.flush()


def _is_lead() -> bool:
    """The process that prints the summary: a single process, or rank 0 of a job."""
    from gpuprof.capture.paths import rank_info

    rank = rank_info().rank
    return rank is None or rank == 0


def capture_config(opts: RunOptions) -> "CaptureConfig":
    """The capture's configuration: the options ``gpuprof run`` passed that this gpuprof's capture has."""
    from gpuprof.capture.config import CaptureConfig

    known = {f.name for f in dataclasses.fields(CaptureConfig)}
    extra = {k: v for k, v in opts.capture.given().items() if k in known and k not in ("logdir", "run")}
    # without --verbose every process writes its summary to its own gpuprof.log (gpuprof.run.runlog); with it,
    # rank 0 (or the single process) prints it on stderr
    prints = _is_lead() if opts.verbose else True
    return CaptureConfig(logdir=opts.logdir, run=opts.run, print_report=prints, **extra)  # type: ignore[arg-type]


def framework_options(opts: RunOptions) -> dict[str, Scalar]:
    """The options a framework callback (``gpuprof.profile``'s arguments) takes, of those passed."""
    import inspect

    from gpuprof.capture.api import profile

    params = set(inspect.signature(profile).parameters)
    return {k: v for k, v in opts.capture.given().items() if k in params and k not in ("logdir", "run", "print_report")}


class OptimizerClock:
    """One capture per process, stepped by the first optimizer that steps (see the module docstring)."""

    def __init__(self, opts: RunOptions, make: Callable[[], "Profiler"] | None = None) -> None:
        self.opts = opts
        self._make = make or (lambda: _new_profiler(opts))
        self.profiler: Profiler | None = None
        self.result: CaptureResult | None = None
        self.off: str | None = None  # why the clock stands down (None: it runs)
        self.steps = 0  # optimizer steps counted (the first one starts the capture)
        self._first: weakref.ref[Any] | None = None
        self._lock = threading.Lock()
        self._finished = False

    def stand_down(self, why: str) -> None:
        """Count no more steps in this process (a framework's callback or the user's capture drives it)."""
        if self.off is None:
            self.off = why

    def on_optimizer_step(self, optimizer: Any, args: Any = None, kwargs: Any = None) -> None:
        """The global ``Optimizer.step`` post-hook. Never raises."""
        if self.off is not None or self._finished:
            return
        try:
            self._step(optimizer)
        except Exception as err:  # noqa: BLE001 - one line, the clock stops, training goes on
            self.off = "failed"
            say(f"the optimizer step clock failed ({type(err).__name__}: {_text(err)}); this process records "
                "nothing more. Training continues.")
            self._stop_quietly()

    def _step(self, optimizer: Any) -> None:
        first = self._first() if self._first is not None else None
        if first is None:  # the first optimizer to step (or the first one was freed: its successor)
            self._first = weakref.ref(optimizer)
        elif first is not optimizer:
            return  # another optimizer of the same iteration
        self.steps += 1
        prof = self.profiler
        if prof is None:
            from gpuprof.capture import active

            held = active.owner()
            if held is not None:  # the user's own gpuprof capture drives this process
                self.stand_down("the script runs its own gpuprof capture")
                return
            with self._lock:
                prof = self.profiler = self._make()
            atexit.register(self.finish)
            prof.start()
            prof.note(f"gpuprof run: one step per step of the first optimizer to step ({type(optimizer).__name__}); "
                      "the clock starts when its first step ends")
            return
        prof.step()

    def finish(self) -> "CaptureResult | None":
        """Stop the capture (at exit, or before the process group is destroyed); idempotent. Never raises."""
        with self._lock:
            if self._finished:
                return self.result
            self._finished = True
            prof = self.profiler
        if prof is None:
            return None
        try:
            atexit.unregister(self.finish)
            self.result = prof.stop()
        except Exception as err:  # noqa: BLE001 - Profiler.stop guards its parts; this is the last resort
            say(f"ending the capture failed ({type(err).__name__}: {_text(err)}); the report may be missing.")
        return self.result

    def handle_error(self, exc: BaseException) -> None:
        """An uncaught exception is ending the process: record what it tells (device mismatch...). Never raises.

        Before the first optimizer step no capture runs yet: when the error is one the capture explains (a
        device or dtype mismatch; the modules in its traceback split across devices), a capture is started
        now, as ``gpuprof.profile_step`` has one in its step 0, given the modules and inputs the traceback holds
        (what the step-0 placement check would have seen: no hook runs before the first step, so the user's
        traceback is the one Python prints without gpuprof), told the error and ended: its report and summary
        (after the user's traceback) carry the decorator's codes (GP610-GP614).
        """
        prof = self.profiler
        if prof is None:
            if not self._finished and self.off is None and self.steps == 0:
                try:
                    self._explain_early(exc)
                except Exception as err:  # noqa: BLE001 - one line; the user's exception and exit code stand
                    say(f"explaining the error failed ({type(err).__name__}: {_text(err)})")
            return
        if self._finished:
            return
        with contextlib.suppress(Exception):  # Profiler.handle_error never raises an Exception; belt and braces
            prof.handle_error(exc)

    def _explain_early(self, exc: BaseException) -> None:
        from gpuprof.capture import active
        from gpuprof.capture.dtypes import is_dtype_error
        from gpuprof.capture.placement import is_device_error, placement_from_traceback

        if active.owner() is not None:
            return  # the user's own capture owns the process (it explains what it saw)
        seen = placement_from_traceback(exc)
        if not (is_device_error(exc) or is_dtype_error(exc) or seen.mismatches or seen.findings()):
            return  # nothing the capture would say: no run directory for an error gpuprof cannot explain
        with self._lock:
            if self.profiler is not None or self._finished:
                return
            prof = self.profiler = self._make()
        prof.start()
        prof.placement.adopt(seen)
        prof.note("gpuprof run: the script raised before its first optimizer step; the modules in its traceback "
                  "were checked as gpuprof.profile_step checks step 0")
        prof.handle_error(exc)  # GP613/GP614 recorded; the user's exception was raised and printed unchanged
        self.finish()

    def _stop_quietly(self) -> None:
        prof, self.profiler = self.profiler, None
        self._finished = True
        if prof is not None:
            with contextlib.suppress(Exception):  # already said once
                prof.stop()


def _new_profiler(opts: RunOptions) -> "Profiler":
    from gpuprof.capture.session import Profiler

    prof = Profiler(capture_config(opts))
    if not opts.verbose:  # the capture's messages go to <out dir>/gpuprof.log, not between the job's lines
        from typing import TextIO, cast

        from gpuprof.run.runlog import RunLog

        prof.stream = cast(TextIO, RunLog(lambda: prof.out_dir))
    return prof


def _text(err: BaseException) -> str:
    from gpuprof.capture.guard import safe_text

    return safe_text(err)


def step_function_wrapper(fn: Callable[..., Any], opts: RunOptions) -> Any:
    """``fn`` wrapped so that each call is one step (``gpuprof.profile_step``'s wrapper, on our config)."""
    from gpuprof.capture.api import StepProfiler, _prepare_dataloaders

    _prepare_dataloaders()
    return StepProfiler(fn, lambda: _new_profiler(opts))


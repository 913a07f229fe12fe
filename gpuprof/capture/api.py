"""``gpuprof.profile`` (context manager) and ``gpuprof.profile_step`` (decorator)."""

from __future__ import annotations

import atexit
import functools
import os
import threading
import warnings
from typing import Any, Callable, Mapping, Sequence, TypeVar, cast, overload

from gpuprof.capture.config import DEFAULT_LOGDIR, CaptureConfig, CheckOptions, Schedule
from gpuprof.capture.guard import GpuprofWarning, safe_text, user_stacklevel
from gpuprof.capture.result import CaptureResult
from gpuprof.capture.session import Profiler
from gpuprof.report import Report

__all__ = ["profile", "profile_step", "StepProfiler"]

F = TypeVar("F", bound=Callable[..., Any])


def profile(
    logdir: str | os.PathLike[str] = DEFAULT_LOGDIR,
    *,
    run: str | None = None,
    schedule: Schedule | Callable[[int], Any] | None = None,
    activities: Sequence[Any] | None = None,
    record_shapes: bool = True,
    with_stack: bool = True,
    profile_memory: bool = True,
    with_flops: bool = False,
    with_modules: bool = False,
    memory_history: bool = True,
    oom_observer: bool = True,
    oom_forensics: bool = True,
    sync_debug: bool = True,
    checks: bool = True,
    select: Sequence[str] = (),
    ignore: Sequence[str] = (),
    tensorboard: bool = True,
    analyze: bool = True,
    print_report: bool = True,
    models: Sequence[Any] = (),
    flush_every: int = 500,
    options: CheckOptions | Mapping[str, Any] | None = None,
    watch: bool = True,
    hang_timeout: float | None = None,
    max_auto_windows: int = 2,
    trigger: bool = True,
    to: Sequence[str] | str = (),
) -> Profiler:
    """Profile a training loop: ``with gpuprof.profile(logdir) as prof:`` and ``prof.step()`` per iteration.

    Writes ``<logdir>/<run>/`` (see ``docs/capture.md``): Chrome traces of the
    steps the ``schedule`` records, TensorBoard events (per-step scalars and
    the findings), CUDA memory snapshots, ``report.json`` and ``report.md``,
    and prints a short report at the end. ``schedule`` is a :class:`Schedule`
    or a ``torch.profiler.schedule(...)`` callable (default: ``Schedule()``,
    steps 7-11 recorded). ``activities=None`` means CPU, plus CUDA when
    available. ``models`` are checked for device placement before the first
    step. ``options`` sets thresholds: ``{"GP640.leak_min_steps": 12}`` (any
    runtime check's or trace rule's option, see ``gpuprof explain CODE``) or a
    :class:`CheckOptions`; an unknown one is a ValueError here, before training.
    ``watch`` watches the whole job (docs/run.md, "The watch"): its phases and
    per-step series in report.json's ``job``, the CPU of the trainer and its
    DataLoader workers sampled off the training thread (NVML on a GPU).
    Further windows are recorded when the steady state breaks (at most
    ``max_auto_windows``) and on ``gpuprof trigger PID`` (``trigger``); a hang
    watchdog writes ``hang.md`` after ``hang_timeout`` seconds without a step
    (None: max(300 s, 20 x the median step); 0: off). See docs/run.md.
    ``to`` sends the end-of-run report to experiment trackers (``("wandb",)``, ``("mlflow",)``, both):
    the findings table, the figures per step window and the files (docs/trackers.md).
    A failure inside gpuprof is one warning; training goes on.
    """
    config = CaptureConfig(
        logdir=os.fspath(logdir), run=run, schedule=schedule if schedule is not None else Schedule(),
        activities=activities, record_shapes=record_shapes, with_stack=with_stack,
        profile_memory=profile_memory, with_flops=with_flops, with_modules=with_modules,
        memory_history=memory_history, oom_observer=oom_observer, oom_forensics=oom_forensics,
        sync_debug=sync_debug, checks=checks,
        select=tuple(select), ignore=tuple(ignore), tensorboard=tensorboard, analyze=analyze,
        print_report=print_report, models=tuple(models), flush_every=flush_every, watch=watch,
        # a mapping is parsed into CheckOptions by CaptureConfig.__post_init__ (an error there is a ValueError)
        options=cast(CheckOptions, options or CheckOptions()),
        hang_timeout=hang_timeout, max_auto_windows=max_auto_windows, trigger=trigger,
        to=(to,) if isinstance(to, str) else tuple(to),
    )
    return Profiler(config)


class StepProfiler:
    """A train-step function wrapped by :func:`profile_step`.

    Every call is one step: the call runs, then the schedule advances. The
    capture starts at the first call and finishes at interpreter exit, at
    :meth:`finish`, or when a call raises (the trace so far is written, the
    exception propagates, the same object; later calls run unprofiled).

    One thread drives the capture: the one that made the first call. Calls
    from other threads, and calls the function makes to itself (recursion),
    run the function unprofiled; the other-thread case is said once. The
    torch profiler is per process and must be stepped and stopped on the
    thread that started it, so concurrent steps would corrupt it.
    """

    def __init__(self, fn: Callable[..., Any], make: Callable[[], Profiler]) -> None:
        functools.update_wrapper(self, fn)
        self._fn = fn
        self._make = make
        self._lock = threading.Lock()
        self.profiler: Profiler | None = None
        self.report: Report | None = None
        self.result: CaptureResult | None = None  # what finish() returns
        self._done = False
        self._driver: int | None = None  # thread ident of the first caller
        self._depth = 0  # the driver's calls in progress (only the driver thread changes it)

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        # used as a method decorator: bind like a function
        if obj is None:
            return self
        return functools.partial(self.__call__, obj)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        prof = self.profiler
        if prof is None:
            if self._done:
                return self._fn(*args, **kwargs)
            prof = self._start(args, kwargs)
            if prof is None:  # gpuprof could not start: the call runs all the same
                return self._fn(*args, **kwargs)
        if threading.get_ident() != self._driver:
            prof._from_other_thread(f"{_name(self._fn)}()")
            return self._fn(*args, **kwargs)
        if self._depth:  # the step calling itself: one step, not several
            return self._fn(*args, **kwargs)
        if len(prof.step_signatures) < prof.config.options.stable_shape_batches:
            prof.note_signature(_args_signature(args, kwargs))
        self._depth += 1
        try:
            out = self._fn(*args, **kwargs)
        except BaseException as exc:
            replacement = None
            try:
                replacement = prof.handle_error(exc)  # never raises an Exception
            finally:
                self._depth -= 1
                self.finish()  # the profiler is stopped whatever handle_error did
            if replacement is not None:
                raise replacement from exc
            raise  # the user's exception, the same object
        self._depth -= 1
        prof.step()
        return out

    def _start(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Profiler | None:
        with self._lock:
            if self.profiler is not None or self._done:
                return self.profiler  # another thread started it (or it finished meanwhile)
            try:
                prof = self._make()
                import torch.nn

                prof.watch(*[a for a in list(args) + list(kwargs.values()) if isinstance(a, torch.nn.Module)])
            except Exception as err:  # noqa: BLE001 - reported; training goes on unprofiled
                self._done = True
                warnings.warn(f"gpuprof: capture setup failed ({type(err).__name__}: {safe_text(err)}); "
                              "gpuprof records nothing in this run. Training continues.", GpuprofWarning,
                              stacklevel=user_stacklevel())
                return None
            self._driver = threading.get_ident()
            prof.start()  # records nothing, with one warning, when another profiler runs
            prof.note_signature(_args_signature(args, kwargs))
            self.profiler = prof
            atexit.register(self._finish_at_exit)
            return prof

    def _finish_at_exit(self) -> None:
        from gpuprof.capture.exitstatus import keeping_interrupt_status

        with keeping_interrupt_status():  # Ctrl-C's exit status (130) survives the stop's own Python
            self.finish()

    def finish(self) -> CaptureResult | None:
        """End the capture now (also runs at exit); returns the :class:`CaptureResult` (None when no call
        started one). :attr:`report` then holds the merged report it was made from."""
        with self._lock:
            prof, self.profiler = self.profiler, None
            self._done = True
        if prof is None:
            return self.result
        try:
            atexit.unregister(self._finish_at_exit)
        finally:
            self.result = prof.stop()
            self.report = prof.report
        return self.result


def _prepare_dataloaders() -> None:
    """Patch the DataLoader now: the loop's loader is iterated before the first call starts the capture."""
    from gpuprof.capture.checks.loader import dataloader as dlmod

    try:
        dlmod.prepare()
    except Exception as err:  # noqa: BLE001 - reported; the capture still works, without those batches
        warnings.warn(f"gpuprof: DataLoader monitor setup failed ({type(err).__name__}: {safe_text(err)}); "
                      "a DataLoader iterated before the first step is not seen. Training continues.",
                      GpuprofWarning, stacklevel=user_stacklevel())


def _name(fn: Callable[..., Any]) -> str:
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    return name if isinstance(name, str) else "the step function"


def _args_signature(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    from gpuprof.capture.checks.loader.dataloader import batch_signature

    return (batch_signature(list(args)), batch_signature(dict(kwargs)))


@overload
def profile_step(fn: F, /) -> F: ...


@overload
def profile_step(logdir: str | os.PathLike[str] = DEFAULT_LOGDIR, /, **kwargs: Any) -> Callable[[F], F]: ...


def profile_step(fn_or_logdir: Any = None, /, **kwargs: Any) -> Any:
    """Decorate a train-step function: each call is one profiled step, no ``step()`` to remember.

    ``@gpuprof.profile_step``, or ``@gpuprof.profile_step(logdir, schedule=..., ...)`` with the
    arguments of :func:`profile`. The wrapper has ``.finish()`` (the capture also finishes at
    interpreter exit; it returns the :class:`CaptureResult`, also kept in ``.result``, with the
    merged report in ``.report``) and ``.profiler`` while it runs.
    """
    if callable(fn_or_logdir):
        fn: Callable[..., Any] | None = fn_or_logdir
        logdir = kwargs.pop("logdir", DEFAULT_LOGDIR)
    else:
        fn = None
        if fn_or_logdir is not None and "logdir" in kwargs:
            raise TypeError("profile_step() got logdir twice")
        logdir = fn_or_logdir if fn_or_logdir is not None else kwargs.pop("logdir", DEFAULT_LOGDIR)
    profile(logdir, **kwargs)  # validate the arguments now, not at the first call

    def wrap(f: Callable[..., Any]) -> Any:
        _prepare_dataloaders()
        return StepProfiler(f, lambda: profile(logdir, **kwargs))

    return wrap(fn) if fn is not None else wrap

"""The framework-neutral part of gpuprof's training callbacks: one capture driven from a trainer's hooks.

A :class:`CaptureDriver` owns one ``gpuprof.profile(...)`` capture per
training run and is fed by a framework callback (Lightning,
``transformers``): :meth:`begin` when training starts, :meth:`step` once per
optimizer step, :meth:`micro_batch` for each batch that did not end one,
:meth:`end` when training ends, :meth:`failed` when it ends by an exception.
It uses only the capture's public API (``gpuprof.profile``, the
``Profiler``'s ``start``/``step``/``stop``/``handle_error`` and its
``place``/``watch_loader``/``note``).

A callback must never break training: every failure of gpuprof's own is one
:class:`~gpuprof.capture.GpuprofWarning`, after which the driver stops its
capture (the torch profiler is never left running) and does nothing more in
that run. The user's exceptions are never caught here: the framework re-raises
them unchanged.
"""

from __future__ import annotations

import inspect
import linecache
import os
import re
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Sequence, TextIO, TypeVar

from gpuprof.capture import CaptureResult, GpuprofWarning, Profiler
from gpuprof.capture.api import profile
from gpuprof.capture.config import DEFAULT_LOGDIR
from gpuprof.capture.guard import safe_text, user_stacklevel
from gpuprof.findings import SourceLocation
from gpuprof.frames import is_user_file, user_frame

__all__ = ["CaptureDriver", "DriverViews", "JobPlace", "LoaderInfo", "built_at", "method_location", "unwrap_loader"]

T = TypeVar("T")


@dataclass(frozen=True)
class JobPlace:
    """Where this process sits in the job, as the trainer says (not torchrun's variables)."""

    rank: int
    world_size: int
    local_rank: int | None = None
    local_world_size: int | None = None


@dataclass(frozen=True)
class LoaderInfo:
    """A DataLoader the framework built, and the user's line that configured it."""

    loader: Any  # a torch DataLoader (wrappers are unwrapped by :func:`unwrap_loader`)
    location: SourceLocation | None
    label: str | None = None


def unwrap_loader(loader: Any) -> Any:
    """The torch DataLoader a framework wrapper iterates (accelerate's ``DataLoaderShard``/``Dispatcher``
    keep it in ``base_dataloader`` and call its ``__iter__``)."""
    seen = 0
    while seen < 8 and getattr(loader, "base_dataloader", None) is not None:
        loader = loader.base_dataloader
        seen += 1
    return loader


def method_location(obj: Any, name: str, marker: str = "DataLoader(") -> SourceLocation | None:
    """The user's line in ``obj``'s own ``name`` method: the first line holding ``marker``, else the ``def``.

    None when the method is not the user's (inherited from the framework, or not found)."""
    fn = getattr(type(obj), name, None)
    code = getattr(fn, "__code__", None)
    if code is None or not is_user_file(code.co_filename):
        return None
    try:
        lines, first = inspect.getsourcelines(fn)  # type: ignore[arg-type]  # a function: checked by __code__
    except (OSError, TypeError):
        return SourceLocation(code.co_filename, code.co_firstlineno, name)
    for i, text in enumerate(lines):
        if marker in text:
            return SourceLocation(code.co_filename, first + i, name)
    return SourceLocation(code.co_filename, code.co_firstlineno, name)


def caller_location() -> SourceLocation | None:
    """The innermost user frame now (``trainer.fit(...)`` / ``trainer.train()`` from inside a hook)."""
    f = user_frame(2)
    return SourceLocation(f.f_code.co_filename, f.f_lineno, f.f_code.co_name) if f is not None else None


_MAX_LINES_BACK = 400  # lines above the call looked at for the loader's construction


def built_at(loaders: Sequence[Any], marker: str = "DataLoader(") -> list[SourceLocation | None]:
    """Where each of ``loaders`` was built, when the user handed them to the framework's call in the
    innermost user frame now (``trainer.fit(model, train_dataloaders=loader)``): the line above the call,
    in the same function, that assigns the variable holding that loader from a ``DataLoader(`` call
    (``loader = DataLoader(...)``), or the call's own line when it builds one inline; else the call's
    line. The frame's variables tell which name holds which loader (by identity)."""
    f = user_frame(2)
    if f is None:
        return [None] * len(loaders)
    here = SourceLocation(f.f_code.co_filename, f.f_lineno, f.f_code.co_name)
    lines = linecache.getlines(f.f_code.co_filename, f.f_globals)
    first = max(f.f_code.co_firstlineno, f.f_lineno - _MAX_LINES_BACK)
    call_text = lines[f.f_lineno - 1] if 0 < f.f_lineno <= len(lines) else ""
    out: list[SourceLocation | None] = []
    for loader in loaders:
        names = [n for n, v in list(f.f_locals.items()) if v is loader]
        found = None
        for ln in range(f.f_lineno - 1, first - 1, -1):  # the nearest assignment above the call
            text = lines[ln - 1] if 0 < ln <= len(lines) else ""
            if marker in text and any(re.match(rf"\s*{re.escape(n)}\s*(?::[^=]+)?=[^=]", text) for n in names):
                found = SourceLocation(here.file, ln, here.function)
                break
        out.append(found or here if marker not in call_text else here)
    return out


class CaptureDriver:
    """One capture per training run, driven by a framework's hooks (see the module docstring)."""

    def __init__(self, framework: str, logdir: str | os.PathLike[str] = DEFAULT_LOGDIR, *,
                 run: str | None = None, print_report: bool = True, **options: Any) -> None:
        self.framework = framework
        self.logdir = os.fspath(logdir)
        self.run = run
        self.print_report = print_report
        self.options = options
        # the arguments are checked now, before training, like gpuprof.profile checks them (ValueError/TypeError)
        profile(self.logdir, run=run, print_report=print_report, **options)
        self.profiler: Profiler | None = None
        self.result: CaptureResult | None = None  # the last run's result (after end())
        self.steps = 0  # optimizer steps marked in this run
        self.micro_batches = 0  # batches seen in this run (every micro-batch of every step)
        self._broken = False  # a failure of gpuprof's own in this run: do nothing more until the next
        # where each run's capture writes its messages (None: stderr, rank 0's only); `gpuprof run` gives a log
        # file per process (gpuprof.run.runlog), so the summary never lands between the job's lines
        self.make_stream: Callable[[Profiler], TextIO] | None = None

    # ------------------------------------------------------------------ lifecycle

    @property
    def active(self) -> bool:
        return self.profiler is not None and not self._broken

    def begin(self, place: JobPlace | None, *, run: str | None = None, models: Sequence[Any] = (),
              loaders: Sequence[LoaderInfo] = (), notes: Sequence[str] = ()) -> None:
        """Start the run's capture (a capture still open from an earlier run is stopped first)."""
        if self.profiler is not None:
            self._guarded("ending the previous run", self._stop)
        self._broken = False
        self.steps = self.micro_batches = 0
        self.result = None
        self._guarded("capture setup", self._begin, place, run, models, loaders, notes)

    def _begin(self, place: JobPlace | None, run: str | None, models: Sequence[Any],
               loaders: Sequence[LoaderInfo], notes: Sequence[str]) -> None:
        # one summary per job on stderr: rank 0's; each process's into its own log when it has one
        prints = self.print_report and (place is None or place.rank == 0 or self.make_stream is not None)
        prof = profile(self.logdir, run=self.run or run, print_report=prints, **self.options)
        if self.make_stream is not None:
            prof.stream = self.make_stream(prof)
        if place is not None:
            prof.place(place.rank, place.world_size, local_rank=place.local_rank,
                       local_world_size=place.local_world_size)
        if models:
            prof.watch(*models)
        for info in loaders:
            prof.watch_loader(unwrap_loader(info.loader), info.location, info.label)
        for text in notes:
            prof.note(text)
        self.profiler = prof
        prof.start()  # records nothing, with one warning, while another profiler runs

    def prepare_loaders(self) -> None:
        """Before the framework creates its DataLoader iterators (they may exist before training starts):
        patch the DataLoader class now so each new iterator carries its loader (see
        ``gpuprof.capture.checks.loader.dataloader.prepare``), and the capture files its batches under that loader."""
        from gpuprof.capture.checks.loader import dataloader

        self._guarded("DataLoader monitor", dataloader.prepare)

    def watch_loaders(self, loaders: Sequence[LoaderInfo]) -> None:
        """Loaders (re)built during the run (Lightning reloads them per epoch when asked to)."""
        prof = self.profiler
        if prof is None or self._broken:
            return
        for info in loaders:
            self._guarded("DataLoader monitor", prof.watch_loader, unwrap_loader(info.loader), info.location,
                          info.label)

    def step(self) -> None:
        """One optimizer step ended (its micro-batches included)."""
        prof = self.profiler
        if prof is None or self._broken:
            return
        self.steps += 1
        self.micro_batches += 1
        self._guarded("profiler step", prof.step)

    def evaluating(self) -> None:
        """An evaluation runs now, before the next optimizer step: the job's timeline marks that step ``eval``."""
        prof = self.profiler
        if prof is None or self._broken:
            return
        self._guarded("job timeline", prof.mark_eval)

    def micro_batch(self) -> None:
        """A batch ended that did not end an optimizer step (gradient accumulation)."""
        self.micro_batches += 1

    def end(self, notes: Sequence[str] = ()) -> CaptureResult | None:
        """Training ended: stop the capture, write and print the report; returns the result."""
        prof = self.profiler
        if prof is None:
            return self.result
        for text in notes:
            self._guarded("report notes", prof.note, text)
        self._guarded("capture end", self._stop)
        return self.result

    def failed(self, exc: BaseException) -> None:
        """Training is ending by ``exc`` (the framework re-raises it unchanged): keep what was recorded.

        A replacement error gpuprof would raise in its own loop (a device mismatch
        explained, GP613) is not raised here: the framework owns the exception;
        the explanation is in the report's findings."""
        prof = self.profiler
        if prof is None:
            return
        if not self._broken:
            self._guarded("error report", prof.handle_error, exc)
        self._guarded("capture end", self._stop)

    def stand_aside(self, why: str, place: JobPlace | None) -> None:
        """Record nothing in this run, and say why once (another profiler is configured)."""
        if self.profiler is not None:
            self._guarded("ending the previous run", self._stop)
        message = f"gpuprof: {why}; gpuprof records nothing in this run, so as not to disturb it. Training continues."
        _warn(message)
        self.result = CaptureResult(rank=place.rank if place is not None and place.world_size > 1 else None,
                                    warnings=(message,), inactive=why)

    def _stop(self) -> None:
        prof, self.profiler = self.profiler, None
        if prof is not None:
            self.result = prof.stop()

    # ------------------------------------------------------------------ never break training

    def _guarded(self, part: str, fn: Callable[..., T], *args: Any) -> T | None:
        try:
            return fn(*args)
        except Exception as err:  # noqa: BLE001 - one warning; the training goes on
            self._fail(part, err)
            return None

    def _fail(self, part: str, err: Exception) -> None:
        first = not self._broken
        self._broken = True
        if first:
            _warn(f"gpuprof: the {self.framework} callback failed in {part} ({type(err).__name__}: "
                  f"{safe_text(err)}); gpuprof records nothing more in this run. Training continues.")
        prof, self.profiler = self.profiler, None
        if prof is not None:  # never leave a torch profiler running: stop() keeps what was recorded
            try:
                with warnings.catch_warnings():  # its own follow-on warnings (no steps marked...): one is said
                    warnings.simplefilter("ignore", GpuprofWarning)
                    self.result = prof.stop()
            except Exception as again:  # noqa: BLE001 - already warned above; the training goes on
                self.result = CaptureResult(warnings=(safe_text(again),))


class DriverViews:
    """What a framework's callback shows of its :class:`CaptureDriver` (one definition for Lightning and transformers)."""

    _driver: CaptureDriver

    @property
    def result(self) -> CaptureResult | None:
        """The last training run's :class:`~gpuprof.CaptureResult` (None before one ended)."""
        return self._driver.result

    @property
    def driver(self) -> CaptureDriver:
        """The capture driver (``gpuprof run`` sets its ``make_stream``: messages to each process's log file)."""
        return self._driver

    @property
    def micro_batches(self) -> int:
        """Batches seen in the current (or last) run: every micro-batch (forward/backward) of every optimizer step."""
        return self._driver.micro_batches


def _warn(message: str) -> None:
    warnings.warn(message, GpuprofWarning, stacklevel=user_stacklevel())

"""The capture session: what ``gpuprof.profile(...)`` returns.

The session keeps the step clock and the rules of who may drive it; the rest
lives beside it: the torch profiler's cycle (:mod:`gpuprof.capture.window`),
the runtime checks (:mod:`gpuprof.capture.checks`, one ``Monitor`` each),
the TensorBoard scalars (:mod:`gpuprof.capture.scalars`) and the end of a
window or of the run (:mod:`gpuprof.capture.end`), which works from the
frozen :class:`~gpuprof.capture.run.RunFacts` the session builds and never
touches the session itself.

Everything gpuprof does inside the loop goes through a :class:`Guard`: a
failure is one warning and the loop goes on. The user's exceptions pass
through as the very same object (the trace recorded so far is written first;
their ``__str__`` is never called unguarded), except PyTorch's device-mismatch
error, re-raised as a :class:`~gpuprof.capture.placement.DeviceMismatchError`
that names the module, tensor, shape and device, with the original chained
(when building it fails, the original passes through).

A capture must never crash or alter the training (issue 8), so:

* it claims the process first (:mod:`gpuprof.capture.active`): while another
  gpuprof capture or someone else's profiler runs, it records nothing and says
  so in one warning;
* it has one driver, the thread that started it: ``step()`` from another
  thread does nothing (said once), because the torch profiler must be stepped
  and stopped on the thread that started it;
* the torch profiler is always stopped: on any failure of gpuprof's own code,
  in :meth:`Profiler.stop` whatever else fails, and at interpreter exit;
* no thread of gpuprof's outlives :meth:`Profiler.stop` (the report and the
  TensorBoard threads are daemons, joined there), so a notebook kernel is
  never left waiting.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from pathlib import Path
from time import perf_counter
from types import TracebackType
from typing import TYPE_CHECKING, Literal, TextIO, TypeVar

from gpuprof.capture import active
from gpuprof.capture.checks import Live, LoaderCheck, MemoryCheck, Monitor, PlacementCheck, monitors
from gpuprof.capture.checks.base import LiveField
from gpuprof.capture.checks.errors import inspect_error
from gpuprof.capture.config import CaptureConfig, Schedule
from gpuprof.capture.end.background import WindowReporter
from gpuprof.capture.end.publish import Outputs, final_report, in_notebook, make_result
from gpuprof.capture.end.text import no_steps_text
from gpuprof.capture.facts import run_facts, runtime_findings
from gpuprof.capture.guard import Guard
from gpuprof.capture.job.control import OWN_AFTER_STEPS, JobControl, defer_window_report
from gpuprof.capture.paths import RankInfo, RunPaths, rank_info
from gpuprof.capture.result import CaptureResult
from gpuprof.capture.run import RunFacts, TraceFile
from gpuprof.capture.scalars import ScalarWriter, step_rows
from gpuprof.capture.seams import FrameworkSeams
from gpuprof.capture.window import TraceWindow
from gpuprof.findings import Finding, SourceLocation
from gpuprof.frames import user_frame
from gpuprof.report import Report
from gpuprof.torchdep import import_torch

if TYPE_CHECKING:  # pragma: no cover - annotations only
    from gpuprof.capture.checks.loader.dataloader import LoaderMonitor
    from gpuprof.capture.placement import PlacementMonitor

__all__ = ["Profiler"]

_M = TypeVar("_M")

class Profiler(FrameworkSeams):
    """A capture around a training loop. Use ``with gpuprof.profile(...) as prof:`` and call
    :meth:`step` once per iteration; or :meth:`start`/:meth:`stop` explicitly.

    :meth:`stop` (or the end of the ``with`` block) returns a plain
    :class:`~gpuprof.capture.result.CaptureResult`, also kept in :attr:`result`;
    :attr:`report` holds the merged :class:`~gpuprof.report.Report` it was made from.
    """

    def __init__(self, config: CaptureConfig) -> None:
        import_torch()  # fail here, with one line naming what to install, when torch is missing

        self.config = config
        self.guard = Guard()
        self.live = Live(config=config, guard=self.guard, ranks=rank_info())
        self.live.monitors = monitors(config, self._on_fetch)
        self._per_step: list[Monitor] = [m for m in self.live.monitors if m.per_step]
        self.window = TraceWindow(self.live, self, lambda: self._driver)
        self.job = JobControl(config, self.live, self.guard, self.window)  # windows, trigger, hang watchdog
        self.outputs = Outputs()
        self._reporter = WindowReporter(self.guard)
        self.report: Report | None = None
        self.result: CaptureResult | None = None  # what stop() returns
        self.started = False
        self.finished = False
        self.inactive: str | None = None  # why this capture records nothing (another profiler runs)
        self._driver: int | None = None  # the thread that started the capture; only it steps
        self._fetch_acc = 0.0
        self._t_last = 0.0
        self._first_step_pending = True
        self._own_work = False  # step() is starting a profiler or exporting a trace (not the job's time)
        self._own_until = -1  # the steps up to this one are marked as gpuprof's own work (live.own_steps)
        # under `gpuprof run` a window's report waits for the end of the job (docs/run.md, "The watch")
        self._defer_window_report = defer_window_report()
        self.stream = sys.stderr  # where the summary and the OOM notice are printed

    # ------------------------------------------------------------------ public API

    @property
    def run_dir(self) -> Path | None:
        """``<logdir>/<run>``: traces (and, for one process, everything else)."""
        return self.paths.run_dir if self.paths else None

    @property
    def out_dir(self) -> Path | None:
        """Where this rank's TensorBoard events and reports go."""
        return self.paths.out_dir if self.paths else None

    def request_window(self, steps: int = 5, reason: str = "trigger") -> bool:
        """Record ``steps`` more steps from the next step boundary into a trace of their own (any thread).

        The driving thread opens the window at its next :meth:`step`: one
        warm-up step, then ``steps`` recorded, after any window already
        planned; it is analysed with the others and listed in report.json's
        ``job.windows`` with this ``reason`` (``trigger`` or ``anomaly``).
        False when the capture is not running or a request is pending already;
        ValueError for a bad ``steps`` or ``reason``.
        """
        return self.job.request_window(steps, reason, self.started and not self.finished)

    def watch(self, *modules: object) -> "Profiler":
        """Check these modules' placement now (and name their submodules in findings)."""
        self._check(PlacementCheck).watch(modules)
        return self

    def __enter__(self) -> "Profiler":
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> Literal[False]:
        replacement = None
        try:
            if exc is not None:
                replacement = self.handle_error(exc)
        finally:
            self.stop()  # the profiler is stopped whatever happened above
        if replacement is not None:
            raise replacement from exc
        return False  # the user's exception (if any) propagates: the same object

    def start(self) -> "Profiler":
        """Start the session (idempotent). When another gpuprof capture or someone else's profiler is running,
        the session records nothing (one :class:`GpuprofWarning` says why) and :meth:`step`/:meth:`stop` do
        nothing: a second profiler would corrupt the first one's trace and can crash the process."""
        if self.started:
            return self
        self.started = True
        self._driver = threading.get_ident()
        f = user_frame()  # the innermost frame of the user's code that started the capture
        self.live.location = SourceLocation(f.f_code.co_filename, f.f_lineno, f.f_code.co_name) if f else None
        why = self.guard.run("capture setup", "gpuprof records nothing in this run", active.claim, self)
        if why is not None or not self.guard.ok("capture setup"):
            self.finished = True  # step() and stop() now do nothing
            self.inactive = why or self.guard.failed["capture setup"]
            if why is not None:
                self.guard.warn_once("inactive", f"gpuprof: {why}; this capture records nothing, so as not to "
                                                 "disturb it. Training continues.")
            self.result = CaptureResult(rank=self.ranks.rank, warnings=tuple(self.guard.warned),
                                        inactive=self.inactive)
            return self
        try:
            self.guard.run("capture setup", "gpuprof records nothing in this run", self._setup)
        except BaseException:  # KeyboardInterrupt during setup: undo the hooks, stop, re-raise
            self._shut_down()
            self.finished = True
            raise
        self._t_last = perf_counter()
        return self

    def step(self) -> None:
        """Mark the end of one training iteration (call it once per iteration)."""
        t = perf_counter()
        if not self.started or self.finished:
            return
        if threading.get_ident() != self._driver:
            self._from_other_thread("step()")
            return
        live, window = self.live, self.window
        if window.asked_to_give_way:
            window.step_aside_if_asked()  # on the driving thread now: stop gpuprof's profiler properly
        live.step_s.append(t - self._t_last)
        live.fetch_s.append(self._fetch_acc)
        self._fetch_acc = 0.0
        live.step_num += 1
        if window.alive or self._reporter.busy:
            self._own_until = live.step_num + OWN_AFTER_STEPS
        if live.step_num <= max(self._own_until, live.monitor_own_until):
            live.own_steps.append(live.step_num - 1)
        for m in self._per_step:
            try:
                m.step(live)
            except Exception as err:  # noqa: BLE001 - this check stops; the others and the loop go on
                self._per_step = [p for p in self._per_step if p is not m]
                self.guard.fail(m.part, m.consequence, err)
        if self.job.windows is not None:
            self.job.step(t, window.alive, self._reporter.busy or live.step_num <= live.monitor_own_until)
        nxt = window.schedule(live.step_num)
        if window.wants_step(nxt) or self._first_step_pending:
            self._own_work = True  # the hang watchdog does not count this time
            try:
                if self._first_step_pending:
                    self._first_step_pending = False
                    self._each(lambda m: m.first_step(live))
                self.guard.run("profiler", "no trace is recorded", window.advance_or_drop, nxt)
                if window.closed_for_good:
                    window.closed_for_good = False
                    self.guard.run("window report", "the report is written when the run ends instead",
                                   self._start_window_report)
            finally:
                self._own_work = False
        elif self._reporter.ready:
            self._reporter.collect()
        elif self.scalars is not None and live.step_num - self.scalars.flushed >= self.config.flush_every:
            self.guard.run("TensorBoard writer", "no further TensorBoard scalars", self._flush_scalars)
        self._t_last = perf_counter()

    def stop(self) -> CaptureResult | None:
        """End the session: flush the trace, run the checks and the analysis, write and print the report.

        Returns the :class:`~gpuprof.capture.result.CaptureResult` (also in
        :attr:`result`; for a capture that stood aside, one saying why in
        ``inactive``). Idempotent (a second call returns the same object);
        None before :meth:`start`. The torch profiler is stopped, gpuprof's
        hooks removed and its threads joined even when something here fails.
        """
        if not self.started or self.finished:
            return self.result
        self.finished = True
        self.window.stopping = True
        facts: RunFacts | None = None
        try:
            self._shut_down()
            self._reporter.collect()  # waits for a report thread still running
            batches = self.loaders.batches
            if not self.live.step_s and batches:
                self.guard.warn_once("no steps", f"gpuprof: {no_steps_text(batches)}.")
            facts = self.guard.run("report", "no report is written", self.facts, True)
            if facts is not None:
                self.guard.run("TensorBoard writer", "no further TensorBoard scalars", self._flush_scalars)
                self.report = self.guard.run("report", "no report is written", final_report, facts, self.outputs,
                                             self.guard, self.window.leak_statements)
        finally:
            if self.scalars is not None:  # no TensorBoard thread outlives the capture
                self.scalars.finish(self.guard)
        if facts is not None:
            self.result = self.guard.run("capture result", "stop() returns a result without the report",
                                         make_result, facts, self.outputs, self.report, tuple(self.guard.warned),
                                         self.inactive)
        if self.result is None:
            self.result = CaptureResult(rank=self.ranks.rank, steps=len(self.live.step_s),
                                        warnings=tuple(self.guard.warned))
        return self.result

    def handle_error(self, exc: BaseException) -> BaseException | None:
        """Record what an exception from the user's step tells; return a replacement to raise, if any.

        Never raises (an ``Exception`` of gpuprof's own is one warning) and
        never calls the exception's ``__str__`` unguarded: the caller re-raises
        the user's exception, the same object, whatever happens here.
        """
        if not self.started or self.finished:
            return None  # an inactive or finished capture leaves the user's error alone
        made = self.guard.run("error report", "the exception is raised unchanged", inspect_error, self.live, exc)
        return made

    def forget_after_fork(self) -> None:
        """In a fork child: this copy must never step, stop or write anything of the parent's."""
        self.finished = True

    @property
    def tracing(self) -> bool:
        """True while a torch profiler is alive (the schedule's warm-up or recorded steps)."""
        return self.window.alive

    @property
    def report_started(self) -> bool:
        """True once the report of the schedule's last recorded window has begun (in the background)."""
        return self._reporter.started

    def wait_for_report(self, timeout: float | None = None) -> bool:
        """Wait for the background report of the recorded window; True when none is being written now (its
        warnings are still said on the driving thread, at its next :meth:`step` or at :meth:`stop`)."""
        return self._reporter.wait(timeout)

    def note_signature(self, sig: object) -> None:
        """The shapes of one step's arguments (``profile_step``), for the cudnn.benchmark check."""
        if len(self.live.step_signatures) < self.config.options.stable_shape_batches:
            self.live.step_signatures.append(sig)

    # ------------------------------------------------------------------ the session's state, read-only

    ranks = LiveField[RankInfo](lambda live: live.ranks)  # each reads the live state (gpuprof.capture.checks.Live)
    paths = LiveField[RunPaths | None](lambda live: live.paths)
    cuda = LiveField[bool](lambda live: live.cuda)
    step_num = LiveField[int](lambda live: live.step_num, "Steps completed so far.")
    step_s = LiveField[list[float]](lambda live: live.step_s.tolist(),
                                    "Each step's time, in seconds (a copy: the session keeps them as machine doubles).")
    step_signatures = LiveField[list[object]](lambda live: live.step_signatures)
    findings = LiveField[list[Finding]](lambda live: live.findings,
                                        "Runtime findings raised outside the checks so far (device mismatch, OOM).")

    @property
    def traces(self) -> list[TraceFile]:
        """The traces written so far."""
        return self.window.traces

    @property
    def loaders(self) -> LoaderMonitor:
        return self._check(LoaderCheck).monitor

    @property
    def placement(self) -> PlacementMonitor:
        return self._check(PlacementCheck).monitor

    @property
    def stream(self) -> TextIO:
        """Where the summary is printed (``sys.stderr`` when the capture started)."""
        return self.outputs.stream

    @stream.setter
    def stream(self, value: TextIO) -> None:
        self.outputs.stream = self.live.stream = value

    @property
    def scalars(self) -> ScalarWriter | None:
        """The run's TensorBoard event file (None without TensorBoard)."""
        return self.outputs.scalars

    @property
    def window_report(self) -> Report | None:
        """The report written when the schedule's last recorded window closed, once written."""
        return self._reporter.report

    # ------------------------------------------------------------------ the frozen run object

    def runtime_findings(self) -> list[Finding]:
        """All GP6xx findings of the run so far (driving thread)."""
        return runtime_findings(self.live)

    def facts(self, final: bool = False) -> RunFacts:
        """Copy what the report needs from the live session (driving thread: may touch torch)."""
        return run_facts(self.live, self.window.traces, tensorboard=self.scalars is not None,
                         leak_lines=self.window.leak_statements if final else None, previous=self.outputs.trace_results)

    # ------------------------------------------------------------------ internals

    def _check(self, kind: type[_M]) -> _M:
        found = self.live.find(kind)
        assert found is not None, kind  # monitors() makes one of each
        return found

    def _each(self, call: Callable[[Monitor], None]) -> None:
        """``call`` (one of the :class:`Monitor` points) on every monitor, each guarded under its own name."""
        for m in self.live.monitors:
            self.guard.run(m.part, m.consequence, call, m)

    # WindowHooks: the torch profiler enters/leaves the recorded steps
    def recording(self, on: bool, span: int | None) -> None:
        live = self.live
        self._each(lambda m: m.recording(live, on, span))

    def recorded_step(self) -> None:
        live = self.live
        self._each(lambda m: m.recorded_step(live))

    def _from_other_thread(self, what: str) -> None:
        me = threading.current_thread().name
        driver = next((t.name for t in threading.enumerate() if t.ident == self._driver), "a finished thread")
        self.guard.warn_once("other thread", f"gpuprof: {what} was called from thread {me!r}, but the capture is "
                                             f"driven by thread {driver!r}, which started it; calls from other "
                                             "threads are not profiled (one driver per capture). Training "
                                             "continues.")

    def _shut_down(self) -> None:
        """Stop the torch profiler, remove the hooks, give the process claim back: each even if another fails."""
        try:
            self.job.stop()
            self.window.close()
        finally:
            try:
                for m in self.live.monitors:  # each one, even after it failed: its hooks must go
                    try:
                        m.uninstall(self.live)
                    except Exception as err:  # noqa: BLE001 - one warning (none if it failed before)
                        self.guard.fail(m.part, "none", err)
            finally:
                active.release(self)

    def _setup(self) -> None:
        import torch

        cfg, live = self.config, self.live
        live.cuda = bool(torch.cuda.is_available())
        window = self.window
        sched = cfg.schedule
        # the torch form of the schedule, which the window plan wraps to record the windows asked for later
        window.schedule = sched.to_torch() if isinstance(sched, Schedule) else sched
        self.guard.run("recorded windows", "only the schedule's windows are recorded", self.job.plan)
        if cfg.activities is not None:
            activities = list(cfg.activities)
        else:
            from torch.profiler import ProfilerActivity

            activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if live.cuda else [])
        paths = RunPaths.make(cfg.logdir, cfg.run, live.ranks)
        try:
            paths.create()
            live.paths = paths
        except OSError as err:
            self.guard.fail("log directory", f"nothing is written to {cfg.logdir} (traces, TensorBoard, report)",
                            f"cannot write to {paths.out_dir}: {err.strerror or err}")
        self.outputs.print_once = in_notebook()
        self._each(lambda m: m.install(live))
        if cfg.tensorboard and live.paths is not None:
            self.guard.run("TensorBoard writer", "no TensorBoard event files (pip install 'tensorboard>=2.21')",
                           self._open_writer)
        if live.paths is not None:
            if not self._defer_window_report:  # deferred (gpuprof run): the end imports what it uses, not step 1
                from gpuprof.capture.end.analyse import preload  # the report thread's imports (~60 ms once)

                self.guard.run("window report", "the report is written when the run ends instead", preload)
            if cfg.trigger and self.job.windows is not None:
                self.guard.run("trigger", "gpuprof trigger cannot reach this run", self.job.register)
            if cfg.hang_timeout != 0:
                self.guard.run("hang watchdog", "no hang report in this run", self.job.start_watchdog,
                               lambda: self._t_last, lambda: self._own_work, self._driver)
        window.begin(window.schedule, activities)

    def _open_writer(self) -> None:
        assert self.paths is not None
        self.outputs.scalars = ScalarWriter.open(self.paths.out_dir, self.paths.worker)

    def _on_fetch(self, seconds: float) -> None:
        self._fetch_acc += seconds

    def _start_window_report(self) -> None:
        """The recorded window closed for good: copy the facts here, analyse and publish on a background thread."""
        if self.paths is None:
            return
        traces = self.window.traces
        again = bool(traces) and traces[-1].window is not None  # a window after the default one: report it too
        if (self._reporter.started and not again) or self._defer_window_report:
            return
        self._reporter.start(self.facts(), self.outputs, again=again)

    def _flush_scalars(self) -> None:
        """Hand the steps since the last flush to the TensorBoard thread."""
        from gpuprof.capture.checks.watch import samples_of

        w, live = self.scalars, self.live
        if w is not None:
            w.flush(self.guard, len(live.step_s),
                    step_rows(live.step_s, live.fetch_s, self.loaders.seen, self._check(MemoryCheck).sampler,
                              samples_of(live)))

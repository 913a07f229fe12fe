"""The capture session: what ``gpuprof.profile(...)`` returns.

The torch profiler is only alive around the steps the schedule traces: while
the schedule says "not yet", ``step()`` takes a clock reading and a memory
sample and returns, so steps outside the active window cost about a
microsecond. When the schedule moves to warm-up or recording, a
``torch.profiler.profile`` is started for that cycle and torn down after it.

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
  in :meth:`Profiler.stop` whatever else fails, and at interpreter exit.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from time import perf_counter
from types import FrameType, TracebackType
from typing import Any, Callable, Literal

from gpuprof.atomic import atomic_path
from gpuprof.capture import active, torchlogs
from gpuprof.capture import dataloader as dlmod
from gpuprof.capture.config import CaptureConfig, Schedule
from gpuprof.capture.guard import Guard, safe_text
from gpuprof.capture.memory import HistoryRecorder, MemorySampler, OOMObserver, growth_finding, oom_finding
from gpuprof.capture.paths import RankInfo, RunPaths, rank_info
from gpuprof.capture.placement import PlacementMonitor, enrich_device_error, is_device_error
from gpuprof.capture.result import CaptureResult
from gpuprof.capture.syncs import SyncLocator
from gpuprof.findings import Finding, SourceLocation, filter_findings
from gpuprof.report import Report
from gpuprof.torchdep import import_torch

__all__ = ["Profiler", "TraceFile"]


class TraceFile:
    """One trace written by the session, with the global steps it recorded."""

    def __init__(self, path: Path, first_step: int, last_step: int, snapshot: Path | None) -> None:
        self.path = path  # its ProfilerStep#N are the loop's step numbers
        self.first_step = first_step
        self.last_step = last_step
        self.snapshot = snapshot

    def __repr__(self) -> str:
        return f"TraceFile({str(self.path)!r}, steps {self.first_step}-{self.last_step})"


class Profiler:
    """A capture around a training loop. Use ``with gpuprof.profile(...) as prof:`` and call
    :meth:`step` once per iteration; or :meth:`start`/:meth:`stop` explicitly.

    :meth:`stop` (or the end of the ``with`` block) returns a plain
    :class:`~gpuprof.capture.result.CaptureResult`, also kept in :attr:`result`;
    :attr:`report` holds the merged :class:`~gpuprof.report.Report` it was made from.
    """

    def __init__(self, config: CaptureConfig) -> None:
        import_torch()  # fail here, with one line naming what to install, when torch is missing
        from torch.profiler import ProfilerAction, ProfilerActivity

        self.config = config
        self._PA = ProfilerAction
        self._NONE = ProfilerAction.NONE
        self._RECORDING = (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)
        self._ProfilerActivity = ProfilerActivity
        self.guard = Guard()
        self.ranks: RankInfo = rank_info()
        self.paths: RunPaths | None = None
        self.report: Report | None = None
        self.result: CaptureResult | None = None  # what stop() returns
        self._published: list[Any] = []  # result.WindowReport of each report written (window, then final)
        self.traces: list[TraceFile] = []
        self.findings: list[Finding] = []  # runtime findings raised so far
        self.step_num = 0  # index of the current step (steps completed so far)
        self.started = False
        self.finished = False
        self.inactive: str | None = None  # why this capture records nothing (another profiler runs)
        self.inherited = False  # this is a fork child's copy: the parent's files and profiler are not ours
        self._driver: int | None = None  # the thread that started the capture; only it steps
        self.cuda = False
        self.location: SourceLocation | None = None  # the user's loop (for findings without a better place)
        # per-step samples (index = step)
        self.step_s: list[float] = []
        self.fetch_s: list[float] = []
        self._fetch_acc = 0.0
        self._t_last = 0.0
        self._flushed = 0
        self._tp: Any = None  # the live torch.profiler.profile
        # the driver steps the torch profiler; give_way may stop it from another thread
        self._tp_lock = threading.RLock()
        self._asked_to_give_way: threading.Event | None = None  # set by another thread's profiler start
        self._tp_first_record: int | None = None
        self._action: Any = None
        self._span: int | None = None
        self._schedule: Callable[[int], Any] = _noop_schedule
        self._first_step_pending = True
        self._anomaly_steps = 0
        self._anomaly_checked = 0
        self._recorded_steps = 0
        # read by the end-of-capture report (gpuprof.capture.summary), hence public:
        self.step_signatures: list[Any] = []  # shapes of the first steps' arguments (profile_step)
        self.settings: Any = None  # capture.settings.TorchSettings read after the first step
        self.writer: Any = None  # render.tensorboard.TensorBoardWriter: the run's one event file
        self._flush_thread: Any = None
        self._flush_error: Exception | None = None
        # the report written when the schedule's last recorded window closes (background thread)
        self.window_report: Report | None = None
        self._window_closed = False  # set in on_trace_ready; step() then starts the report thread
        self._report_thread: threading.Thread | None = None
        self._report_guard: Any = None  # its DeferredGuard, replayed on the driving thread
        self._report_ready = False  # the thread is done: step() collects its warnings
        self._trace_results: Any = None  # summary.TraceResults, reused by the final report
        self._printed_findings: Any = None  # (step, findings) of the summary printed last
        self.memory: MemorySampler | None = None
        self.history: HistoryRecorder | None = None
        self.oom: OOMObserver | None = None
        self.syncs: SyncLocator | None = None
        self.loaders = dlmod.LoaderMonitor(self._on_fetch, max_signatures=config.options.stable_shape_batches)
        self.placement = PlacementMonitor(config.options.placement_max_modules)
        self.compiled: Any = None  # compiled.CompileMonitor while torch.compile diagnostics run
        self.amp: Any = None  # amp.AmpWarningWatcher
        self._activities: list[Any] = []
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

    def watch(self, *modules: Any) -> "Profiler":
        """Check these modules' placement now (and name their submodules in findings)."""
        self.placement.watch(modules)
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
        """Start the session (idempotent).

        When another gpuprof capture or someone else's profiler is running,
        the session records nothing (one :class:`GpuprofWarning` says why) and
        :meth:`step`/:meth:`stop` do nothing: a second profiler would corrupt
        the first one's trace and can crash the process.
        """
        if self.started:
            return self
        self.started = True
        self._driver = threading.get_ident()
        self.location = _caller_location()
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
        if self._asked_to_give_way is not None:
            self._give_way()  # on the driving thread now: stop gpuprof's profiler properly
        self.step_s.append(t - self._t_last)
        self.fetch_s.append(self._fetch_acc)
        self._fetch_acc = 0.0
        mem = self.memory
        if mem is not None:
            try:
                mem.sample()
            except Exception as err:  # noqa: BLE001
                self.memory = None
                self.guard.fail("memory sampling", "no per-step memory numbers", err)
        self.step_num += 1
        comp = self.compiled
        if comp is not None and comp.compiled_since_drain:
            self.guard.run("torch.compile diagnostics", "no torch.compile findings", comp.drain)
        nxt = self._schedule(self.step_num)
        if nxt is not self._NONE or self._tp is not None or self._first_step_pending:
            self.guard.run("profiler", "no trace is recorded", self._advance_or_drop, nxt)
            if self._window_closed:
                self._window_closed = False
                self.guard.run("window report", "the report is written when the run ends instead",
                               self._start_window_report)
        elif self._report_ready:
            self._collect_window_report()
        elif self.step_num - self._flushed >= self.config.flush_every:
            self.guard.run("TensorBoard writer", "no further TensorBoard scalars", self._flush_scalars)
        self._t_last = perf_counter()

    def stop(self) -> CaptureResult | None:
        """End the session: flush the trace, run the checks and the analysis, write and print the report.

        Returns the :class:`~gpuprof.capture.result.CaptureResult` (also in
        :attr:`result`; for a capture that stood aside, one saying why in
        ``inactive``). Idempotent (a second call returns the same object);
        None before :meth:`start`. The torch profiler is stopped and
        gpuprof's hooks removed even when something here fails.
        """
        if not self.started or self.finished:
            return self.result
        self.finished = True
        self._shut_down()
        self._collect_window_report()  # waits for a report thread still running
        if not self.step_s and self.loaders.batches:
            from gpuprof.capture.summary import no_steps_text

            self.guard.warn_once("no steps", f"gpuprof: {no_steps_text(self.loaders.batches)}.")
        from gpuprof.capture.summary import finish

        self.report = self.guard.run("report", "no report is written", finish, self)
        from gpuprof.capture.summary import make_result

        self.result = self.guard.run("capture result", "stop() returns a result without the report",
                                     make_result, self, self.report)
        if self.result is None:
            self.result = CaptureResult(rank=self.ranks.rank, steps=len(self.step_s),
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
        made = self.guard.run("error report", "the exception is raised unchanged", self._inspect_error, exc)
        return made

    def forget_after_fork(self) -> None:
        """In a fork child: this copy must never step, stop or write anything of the parent's."""
        self.inherited = True
        self.finished = True

    # ------------------------------------------------------------------ internals

    def _inspect_error(self, exc: BaseException) -> BaseException | None:
        if is_device_error(exc):
            made = self.guard.run("device-mismatch report", "the original error is raised unchanged",
                                  enrich_device_error, exc, self.placement.roots())
            if made is not None:
                err, finding = made
                self.findings.append(finding)
                return err
            return None
        if type(exc).__name__ == "OutOfMemoryError" or "CUDA out of memory" in safe_text(exc, 200):
            self.guard.run("out-of-memory report", "no out-of-memory snapshot", self._on_oom, exc)
        return None

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
            self._close_profiler()
        finally:
            try:
                self._teardown_hooks()
            finally:
                active.release(self)

    def _setup(self) -> None:
        import torch

        cfg = self.config
        self.cuda = bool(torch.cuda.is_available())
        sched = cfg.schedule
        self._schedule = sched.to_torch() if isinstance(sched, Schedule) else sched
        self._action = self._schedule(0)
        if cfg.activities is not None:
            self._activities = list(cfg.activities)
        else:
            self._activities = [self._ProfilerActivity.CPU]
            if self.cuda:
                self._activities.append(self._ProfilerActivity.CUDA)
        paths = RunPaths.make(cfg.logdir, cfg.run, self.ranks)
        try:
            paths.create()
            self.paths = paths
        except OSError as err:
            self.guard.fail("log directory", f"nothing is written to {cfg.logdir} (traces, TensorBoard, report)",
                            f"cannot write to {paths.out_dir}: {err.strerror or err}")
        # hooks that cost nothing per step, or only during step 0
        if cfg.checks:
            self.placement.watch(cfg.models)
            self.guard.run("placement check", "no device-placement findings", self.placement.install)
        self.guard.run("DataLoader monitor", "no data-loading numbers", dlmod.install, self.loaders)
        if cfg.checks:
            from gpuprof.capture.compiled import CompileMonitor

            self.compiled = CompileMonitor(lambda: self.step_num)
            self.guard.run("torch.compile diagnostics", "no torch.compile findings", self.compiled.install)
            from gpuprof.capture.amp import AmpWarningWatcher

            self.amp = AmpWarningWatcher()
            self.guard.run("mixed-precision check", "no mixed-precision findings", self.amp.install)
        self.memory = self.guard.run("memory sampling", "no per-step memory numbers", MemorySampler, self.cuda)
        if self.memory is not None and not self.memory.available:
            # not Linux (macOS, Windows): the RSS only fed TensorBoard and the report; the CPU growth check reads the trace
            self.guard.note("no /proc/self/statm on this system: the process's resident memory (RSS) is not sampled")
            self.memory = None
        if not self.cuda:
            self.guard.note("no CUDA: memory history snapshots, the out-of-memory observer and the host-sync "
                            "locator are off; memory growth is checked on the recorded steps only")
        else:
            if cfg.memory_history and self.paths is not None:
                self.history = HistoryRecorder(cfg.memory_history_max_entries)
            if cfg.sync_debug and cfg.checks:
                self.syncs = SyncLocator()
            if cfg.oom_observer and self.paths is not None:
                paths_ = self.paths
                obs = OOMObserver(paths_.oom_files, self.stream)
                if self.guard.run("out-of-memory observer", "no snapshot at an OOM", obs.attach):
                    self.oom = obs
                else:
                    self.oom = obs  # still usable from the exception path
                    self.guard.note("this torch has no out-of-memory observer: the OOM snapshot is dumped when "
                                    "the error leaves the step")
        if cfg.tensorboard and self.paths is not None:
            self.guard.run("TensorBoard writer", "no TensorBoard event files (pip install 'tensorboard>=2.21')",
                           self._open_writer)
        if self.paths is not None:
            # the report thread's imports, done now (~60 ms once, before the first timed step): importing on
            # that thread would stall the window's end, or leave a half-done import to DataLoader workers forked then
            from gpuprof.capture import summary

            self.guard.run("window report", "the report is written when the run ends instead", summary.preload)
        if self._action is not self._NONE:
            self._start_profiler(0)
            if self._action in self._RECORDING:
                self._enter_recording()

    def _open_writer(self) -> None:
        from gpuprof.render.tensorboard import TensorBoardWriter

        assert self.paths is not None
        self.writer = TensorBoardWriter(self.paths.out_dir, filename_suffix=f".{self.paths.worker}")

    def _on_fetch(self, seconds: float) -> None:
        self._fetch_acc += seconds

    def _advance_or_drop(self, nxt: Any) -> None:
        with self._tp_lock:
            try:
                self._advance(nxt)
            except BaseException:
                # a torch profiler left half-advanced and never stopped crashes the process at exit
                tp, self._tp = self._tp, None
                if tp is not None:
                    active.unwatch()
                    _quiet_stop(tp)
                raise

    def _advance(self, nxt: Any) -> None:
        """Slow path of step(): the first step's checks and profiler state changes."""
        if self._first_step_pending:
            self._first_step_pending = False
            self.guard.run("placement check", "no device-placement findings", self._after_first_step)
        prev = self._action
        self._action = nxt
        recording_prev = prev in self._RECORDING
        recording_next = nxt in self._RECORDING
        if recording_prev:
            self._recorded_steps += 1
            self._check_anomaly()
        if self._tp is None:
            if nxt is not self._NONE:
                self._start_profiler(self.step_num)
                if recording_next:
                    self._enter_recording()
            return
        if prev is self._PA.RECORD_AND_SAVE:
            self._leave_recording()
        with active.own_call():
            self._tp.step()  # may export the trace (on_trace_ready)
        if recording_next and not recording_prev or (prev is self._PA.RECORD_AND_SAVE and recording_next):
            self._enter_recording()
        if nxt is self._NONE:
            self._drop_profiler()

    def _start_profiler(self, at_step: int) -> None:
        if not self.guard.ok("profiler") or self.paths is None:
            return
        other = active.other_profiler()  # someone started a profiler since the capture began
        if other is not None:
            self.guard.disable("profiler", other, f"gpuprof: {other}; gpuprof records no trace in this run, so "
                                                  "as not to disturb it. Training continues.")
            return
        import torch.profiler as tprof

        sched = self._schedule
        cfg = self.config

        def make(activities: list[Any]) -> Any:
            tp = tprof.profile(
                activities=activities,
                schedule=sched,
                on_trace_ready=self._on_trace_ready,
                record_shapes=cfg.record_shapes,
                profile_memory=cfg.profile_memory,
                with_stack=cfg.with_stack,
                with_flops=cfg.with_flops,
                with_modules=cfg.with_modules,
            )
            # The profiler is created late (at the first warm-up step), but its step
            # numbers (ProfilerStep#N in the trace) and schedule must be the loop's.
            action = sched(at_step)
            tp.step_num = at_step
            tp.current_action = action
            if hasattr(tp, "_prev_schedule_action"):
                tp._prev_schedule_action = action
            return tp

        torchlogs.hush()  # torch's "USDT: profiler_start" and CPUAllocator lines off while ours runs
        tp = make(self._activities)
        try:
            with active.own_call():
                tp.start()
        except BaseException as err:
            _quiet_stop(tp)  # a half-started profiler must not stay enabled
            cuda_act = self._ProfilerActivity.CUDA
            if not isinstance(err, Exception) or cuda_act not in self._activities:
                raise
            # CUPTI missing or broken: try the CPU alone
            self._activities = [a for a in self._activities if a != cuda_act]
            self.guard.fail("CUDA activity tracing (CUPTI)", "traces hold CPU activity only", err)
            torchlogs.hush()  # _quiet_stop turned it off
            tp = make(self._activities)
            try:
                with active.own_call():
                    tp.start()
            except BaseException:
                _quiet_stop(tp)
                raise
        self._tp = tp
        active.watch(self._give_way)

    def _give_way(self) -> None:
        """Someone else's torch profiler is starting while gpuprof's runs: stop gpuprof's first.

        PyTorch runs one profiler at a time; a second one started on top of
        the first takes its session, and exporting either then crashes the
        process. gpuprof steps aside: it keeps the trace recorded so far,
        stops its profiler, records no more traces in this run and says so
        once. Never raises: it runs inside the other profiler's start.

        torch can stop and export a profiler only on the thread that started
        it. So when the other profiler starts on another thread, that thread
        waits (at most ``GIVE_WAY_WAIT_S``) for the driving thread's next
        ``step()``, which stops gpuprof's profiler there. If the driver does
        not come (it waits for that very thread), gpuprof's profiler is
        stopped from the other thread: its current trace is lost, and PyTorch
        may still fail at exit with two profilers on two threads.
        """
        try:
            if threading.get_ident() != self._driver:
                self._wait_for_driver()
                return
            with self._tp_lock:
                asked, self._asked_to_give_way = self._asked_to_give_way, None
                try:
                    if self._tp is None:
                        return
                    at = self.step_num
                    self._close_profiler()
                finally:
                    if asked is not None:
                        asked.set()
            self.guard.disable(
                "profiler", "another torch profiler started",
                f"gpuprof: another torch profiler started at step {at} while gpuprof's was running; PyTorch "
                "runs one profiler at a time, so gpuprof stopped its own there (the steps recorded so far are "
                "kept) and records no more traces in this run. Training continues.")
        except Exception as err:  # noqa: BLE001 - reported; the other profiler must still start
            self.guard.fail("profiler", "no more traces in this run", err)

    def _wait_for_driver(self) -> None:
        with self._tp_lock:
            if self._tp is None:
                return
            asked = self._asked_to_give_way = self._asked_to_give_way or threading.Event()
        if asked.wait(GIVE_WAY_WAIT_S):
            return
        with self._tp_lock:
            self._asked_to_give_way = None
            if self._tp is None:
                return
            at = self.step_num
            self.guard.said.add("foreign stop")  # one warning for this, below
            self._close_profiler()
        self.guard.disable(
            "profiler", "another torch profiler started",
            f"gpuprof: another torch profiler started on thread {threading.current_thread().name!r} at step {at} "
            "while gpuprof's was running, and the thread that drives gpuprof did not step within "
            f"{GIVE_WAY_WAIT_S:g} s; gpuprof stopped its profiler from this thread, so its current trace is lost, "
            "and PyTorch may still crash at exit with profilers started on two threads. Training continues.")

    def _enter_recording(self) -> None:
        self._tp_first_record = self.step_num
        if self.history is not None and not self.history.recording:
            self.guard.run("memory history", "no memory snapshot beside the trace", self.history.start)
        if self.syncs is not None and not self.syncs.installed:
            self.guard.run("host-sync locator", "no host-sync findings", self.syncs.install)

    def _leave_recording(self) -> None:
        self._span = time.time_ns()
        if self.syncs is not None and self.syncs.installed:
            self.guard.run("host-sync locator", "no host-sync findings", self.syncs.uninstall)
        if self.history is not None and self.history.recording and self.paths is not None:
            path = self.paths.snapshot_file(self._span)
            self.guard.run("memory history", "no memory snapshot beside the trace", self.history.dump, path)

    def _on_trace_ready(self, tp: Any) -> None:
        """torch calls this at the end of a recorded cycle: export ``<worker>.<span>.pt.trace.json.gz``."""
        if self.paths is None:
            return
        span = self._span or time.time_ns()
        self._span = None
        path = self.paths.trace_file(span)
        first = self._tp_first_record if self._tp_first_record is not None else self.step_num
        snap = self.paths.snapshot_file(span)

        def export() -> None:
            # torch gzips by the suffix, so the temporary name keeps it
            with atomic_path(path, suffix=".pt.trace.json.gz") as tmp:
                tp.export_chrome_trace(str(tmp))
            self.traces.append(TraceFile(path, first, self.step_num - 1 if self.step_num > first else first,
                                         snap if snap.exists() else None))
            if not self.finished:  # step() starts the report once the profiler is dropped
                self._window_closed = bool(self.guard.run(
                    "window report", "the report is written when the run ends instead", self._no_more_recording))

        self.guard.run("trace export", "this trace is lost", export)

    def _no_more_recording(self) -> bool:
        """True when the schedule records no further cycle after the one just exported."""
        sched = self.config.schedule
        if isinstance(sched, Schedule):
            return sched.repeat > 0 and len(self.traces) >= sched.repeat
        # a torch.profiler.schedule callable: look ahead (a cycle repeated forever finds its next window soon)
        fn = self._schedule
        return not any(fn(s) in self._RECORDING for s in range(self.step_num, self.step_num + LOOKAHEAD_STEPS))

    def _start_window_report(self) -> None:
        """The recorded window closed for good: analyse and write the report now, on a background thread.

        Runs on the driving thread right after the last trace is exported. The
        live state is copied here (cheap: the runtime checks, the step times);
        the thread then reads the trace files only, never torch nor the loop's
        state, writes report.json/report.md and the TensorBoard text and prints
        the summary. Its failures are kept and warned about here, once each,
        at a later ``step()`` or at ``stop()``, which waits for the thread.
        """
        if self._report_thread is not None or self.paths is None:
            return
        from gpuprof.capture import summary
        from gpuprof.capture.guard import DeferredGuard

        facts = summary.run_facts(self)
        guard = DeferredGuard(self.guard)
        self._report_guard = guard
        t = threading.Thread(target=self._window_report, args=(facts, guard), name="gpuprof-report", daemon=True)
        self._report_thread = t
        t.start()

    def _window_report(self, facts: Any, guard: Any) -> None:
        """Body of the report thread (see :meth:`_start_window_report`)."""
        from gpuprof.capture import summary

        try:
            res = summary.trace_results(facts, guard)
            self._trace_results = res
            report = summary.assemble(facts, res, guard)
            report.notes.append(f"written when the recorded window closed at step {facts.steps}, while the run "
                                "goes on; rewritten with the whole run when it ends")
            summary.publish(self, facts, report, guard, final=False)
            self.window_report = report
        except Exception as err:  # noqa: BLE001 - kept; warned about on the driving thread
            guard.fail("window report", "the report is written when the run ends instead", err)
        finally:
            self._report_ready = True

    def _collect_window_report(self) -> None:
        """Wait for the report thread (if any) and warn about its failures, once each."""
        t = self._report_thread
        if t is None:
            return
        if t is not threading.current_thread():
            t.join(REPORT_WAIT_S)
            if t.is_alive():  # blocked (e.g. printing to a stderr nobody reads): never hold the run's end
                self.guard.warn_once("window report stuck", f"gpuprof: the report of the recorded window was "
                                     f"still being written after {REPORT_WAIT_S:g} s; the run's end does not "
                                     "wait for it. Training continues.")
        self._report_ready = False
        guard, self._report_guard = self._report_guard, None
        if guard is not None:
            guard.replay()

    def _drop_profiler(self) -> None:
        tp, self._tp = self._tp, None
        if tp is not None:
            active.unwatch()
            tp.__exit__(None, None, None)
            torchlogs.unhush()

    def _close_profiler(self) -> None:
        """At the end of the run: write what the current cycle recorded so far, and stop the profiler.

        Runs even after the "profiler" part failed: a torch profiler left
        running crashes the process at exit. On a thread other than the one
        that started it (``stop()`` from another thread, or at exit after the
        driving thread ended), torch can stop the profiler but not export its
        trace (the export crashes the process), so the current cycle is lost
        and one warning says so.
        """
        with self._tp_lock:
            tp, self._tp = self._tp, None
            if tp is None:
                return
            active.unwatch()
            if threading.get_ident() != self._driver:
                tp.on_trace_ready = None
                if self._action in self._RECORDING:
                    self._span = None
                    self.guard.warn_once(
                        "foreign stop",
                        f"gpuprof: the capture was stopped on thread {threading.current_thread().name!r}, not on "
                        "the thread that drives it; PyTorch can export a trace only on the thread that started "
                        f"the profiler, so the steps recorded since step {self._tp_first_record} are lost. Call "
                        "stop()/finish() on the driving thread. Training continues.")
            self._stop_profiler(tp)

    def _stop_profiler(self, tp: Any) -> None:
        try:
            if self._action in self._RECORDING and self.guard.ok("profiler") and tp.on_trace_ready is not None:
                self.guard.run("profiler", "the last trace may be missing", self._leave_recording)
            else:
                self._span = None
        finally:
            try:
                tp.__exit__(None, None, None)  # exports via on_trace_ready when it was recording
            except Exception as err:  # noqa: BLE001 - reported; the profiler is dropped either way
                self.guard.fail("profiler", "the last trace may be missing", err)
                _quiet_stop(tp)
            torchlogs.unhush()

    def _teardown_hooks(self) -> None:
        self.guard.run("placement check", "none", self.placement.uninstall)
        if self.compiled is not None:
            self.guard.run("torch.compile diagnostics", "none", self.compiled.uninstall)
        if self.amp is not None:
            self.guard.run("mixed-precision check", "none", self.amp.uninstall)
        self.guard.run("DataLoader monitor", "none", dlmod.uninstall, self.loaders)
        if self.syncs is not None and self.syncs.installed:
            self.guard.run("host-sync locator", "none", self.syncs.uninstall)
        if self.history is not None and self.history.recording:
            self.guard.run("memory history", "none", self.history.stop)
        if self.oom is not None:
            self.oom.active = False
        if self.memory is not None:
            self.guard.run("memory sampling", "none", self.memory.close)

    def _after_first_step(self) -> None:
        self.placement.uninstall()
        if self.compiled is not None and not self.compiled.installed:  # torch._dynamo was imported in step 0
            self.guard.run("torch.compile diagnostics", "no torch.compile findings", self.compiled.install)
        self._check_anomaly()
        from gpuprof.capture.settings import read_settings

        self.settings = read_settings()

    def _check_anomaly(self) -> None:
        import torch

        self._anomaly_checked += 1
        if torch.is_anomaly_enabled():
            self._anomaly_steps += 1

    def _on_oom(self, exc: BaseException) -> None:
        text = safe_text(exc, 2000)
        if self.oom is None:
            self.findings.append(oom_finding([], text))
            return
        if not self.oom.dumped and self.paths is not None:
            self.oom.dump(extra={"exception": text})
        self.findings.append(oom_finding(list(self.oom.dumped), text))

    def note_signature(self, sig: Any) -> None:
        if len(self.step_signatures) < self.config.options.stable_shape_batches:
            self.step_signatures.append(sig)

    def _flush_scalars(self, wait: bool = False) -> None:
        """Write the buffered per-step scalars to TensorBoard.

        Inside the loop the writing (protobuf encoding, ~25 µs a step) runs on a
        background thread, so the training thread only hands over a range of
        steps; ``wait=True`` (at the end of the run) writes and joins.
        """
        w = self.writer
        end = len(self.step_s)
        self._join_flush()
        if w is None or not self.guard.ok("TensorBoard writer"):
            self._flushed = end
            return
        start, self._flushed = self._flushed, end
        if wait:
            self._write_scalars(w, start, end)
            return
        import threading

        t = threading.Thread(target=self._write_scalars_guarded, args=(w, start, end),
                             name="gpuprof-tensorboard", daemon=True)
        self._flush_thread = t
        t.start()

    def _join_flush(self) -> None:
        t = getattr(self, "_flush_thread", None)
        if t is not None:
            t.join()
            self._flush_thread = None
        err = getattr(self, "_flush_error", None)
        if err is not None:
            self._flush_error = None
            self.guard.fail("TensorBoard writer", "no further TensorBoard scalars", err)

    def _write_scalars_guarded(self, w: Any, start: int, end: int) -> None:
        try:
            self._write_scalars(w, start, end)
        except Exception as err:  # noqa: BLE001 - reported by the training thread at the next flush
            self._flush_error = err

    def _write_scalars(self, w: Any, start: int, end: int) -> None:
        mem = self.memory
        loaders = self.loaders.seen
        rss = mem.rss_by_step() if mem is not None and not mem.cuda else {}
        for i in range(start, end):
            st = self.step_s[i]
            vals: dict[str, float] = {"step_time_ms": st * 1000.0}
            share = dlmod.data_loading_share(self.fetch_s[i], st) if loaders else None
            if share is not None:
                vals["data_loading_share"] = share
            if mem is not None:
                if mem.cuda and i < len(mem.allocated):
                    vals["memory_allocated_mib"] = mem.allocated[i] / 2**20
                    vals["memory_reserved_mib"] = mem.reserved[i] / 2**20
                    vals["memory_peak_mib"] = mem.peak[i] / 2**20
                elif i in rss:
                    vals["host_rss_mib"] = rss[i] / 2**20
            w.add_step(i, vals)
        w.flush()

    # ------------------------------------------------------------------ results used by summary

    def runtime_findings(self) -> list[Finding]:
        """All GP6xx findings of the run (after :meth:`stop`)."""
        from gpuprof.capture.settings import anomaly_finding

        cfg = self.config
        out = list(self.findings)
        if cfg.checks:
            out += self.guard.run("placement check", "no device-placement findings", self.placement.findings) or []
            total = sum(self.step_s)
            lw = self.ranks.local_world_size or 1
            out += dlmod.dataloader_findings(
                list(self.loaders.records.values()), total_step_s=total, num_steps=len(self.step_s),
                on_cuda=self.cuda and _cuda_used(), cores=dlmod.available_cores(), local_world_size=lw,
                options=cfg.options,
            )
            out += self.guard.run("distributed check", "no GP710/GP711 findings", _dist_findings,
                                  list(self.loaders.records.values()), self.cuda and _cuda_used()) or []
            if self.syncs is not None:
                self.syncs.steps = self._recorded_steps
                out += self.syncs.findings(cfg.options)
            comp = self.compiled
            if comp is not None:
                for err in comp.errors[:1]:
                    self.guard.fail("torch.compile diagnostics", "torch.compile findings may be incomplete", err)
                from gpuprof.capture.compiled import compile_findings

                out += self.guard.run("torch.compile diagnostics", "no torch.compile findings", compile_findings,
                                      comp, total, len(self.step_s), cfg.options.compile_min_share) or []
            if self.amp is not None:
                for err in self.amp.errors[:1]:
                    self.guard.fail("mixed-precision check", "mixed-precision findings may be incomplete", err)
                out += self.guard.run("mixed-precision check", "no mixed-precision findings", self.amp.findings) or []
            a = anomaly_finding(self._anomaly_steps, self._anomaly_checked)
            if a:
                out.append(a)
            if self.memory is not None and self.memory.cuda:
                g = growth_finding(self.memory.allocated, "cuda", cfg.options, self.location)
                if g:
                    out.append(g)
        return filter_findings(out, cfg.select, cfg.ignore)


def _noop_schedule(step: int) -> Any:
    from torch.profiler import ProfilerAction

    return ProfilerAction.NONE


LOOKAHEAD_STEPS = 10_000  # steps of a schedule callable searched for another recorded window
REPORT_WAIT_S = 60.0  # how long the end of the run waits for the window report's thread
GIVE_WAY_WAIT_S = 10.0  # how long another thread's profiler start waits for gpuprof's driver to step


def _quiet_stop(tp: Any) -> None:
    try:
        tp.__exit__(None, None, None)
    except Exception:  # noqa: BLE001 - the profiler that failed to start may fail to stop; it is dropped
        return
    finally:
        torchlogs.unhush()


def _dist_findings(records: list[Any], on_cuda: bool) -> list[Any]:
    from gpuprof.capture import distcheck

    group = distcheck.process_group()
    if group is None:
        return []
    return distcheck.distributed_findings(records, group[0], group[1], on_cuda)


def _cuda_used() -> bool:
    import torch

    return bool(torch.cuda.is_initialized() and torch.cuda.memory_allocated() > 0)  # type: ignore[no-untyped-call]


def _caller_location() -> SourceLocation | None:
    """The innermost user frame (:func:`gpuprof.frames.is_user_file`) of the code that started the capture."""
    from gpuprof.frames import is_user_file

    f: FrameType | None = sys._getframe(1)
    while f is not None:
        if is_user_file(f.f_code.co_filename):
            return SourceLocation(f.f_code.co_filename, f.f_lineno, f.f_code.co_name)
        f = f.f_back
    return None

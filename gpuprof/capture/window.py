"""The torch.profiler cycle: a profiler alive only around the steps the schedule warms up and records.

While the schedule says "not yet", no torch profiler exists (a step costs a
clock reading). When it moves to warm-up or recording, a
``torch.profiler.profile`` is started for that cycle, stepped with the loop,
exports ``<worker>.<span>.pt.trace.json.gz`` when the cycle's recording
ends, and is torn down after it. Only the driving thread steps it (torch
can export a trace only on the thread that started the profiler); another
profiler starting meanwhile makes it give way (:meth:`TraceWindow.give_way`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from gpuprof.atomic import atomic_path
from gpuprof.capture import active, torchlogs
from gpuprof.capture.config import Schedule
from gpuprof.capture.run import TraceFile

if TYPE_CHECKING:  # pragma: no cover - annotations only
    from torch.profiler import ProfilerAction, ProfilerActivity, profile

    from gpuprof.capture.checks.base import Live
    from gpuprof.capture.job.windows import PlannedWindow
    from gpuprof.capture.leaklines import StatementSite

__all__ = ["TraceWindow", "LOOKAHEAD_STEPS", "GIVE_WAY_WAIT_S"]

LOOKAHEAD_STEPS = 10_000  # steps of a schedule callable searched for another recorded window
GZIP_LEVEL = 1  # a trace's compression: 8.4 MB of JSON in 19 ms of CPU, 18% larger than level 6's 43 ms (torch's: 9)
GIVE_WAY_WAIT_S = 10.0  # how long another thread's profiler start waits for gpuprof's driver to step


class WindowHooks(Protocol):
    """What the window tells the session: the recorded steps begin/end, one more step was recorded."""

    def recording(self, on: bool, span: int | None) -> None: ...

    def recorded_step(self) -> None: ...


def export_gzipped(tp: profile, path: Path) -> None:
    """The trace of ``tp`` into ``path``, gzipped: torch's C++ writer makes the JSON beside it (a private temporary
    file), compressed here in 1 MiB blocks at level ``GZIP_LEVEL``. Torch's own ``*.gz`` export copies the JSON
    into gzip line by line at level 9: measured 0.66 s of CPU for a 9 MB trace (5 steps of a Python-heavy loop)
    against 0.10 s this way, on the training thread (bench/bench_run_job.py)."""
    import gzip
    import os
    import shutil
    import tempfile

    fd, name = tempfile.mkstemp(suffix=".json", prefix=".gpuprof-export.", dir=path.parent)
    os.close(fd)
    try:
        tp.export_chrome_trace(name)
        with open(name, "rb") as src, gzip.open(path, "wb", compresslevel=GZIP_LEVEL) as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    finally:
        try:
            os.unlink(name)
        except OSError:
            pass


class TraceWindow:
    """The torch profiler of one capture, created and dropped with the schedule's cycles."""

    def __init__(self, live: Live, hooks: WindowHooks, driver: Callable[[], int | None]) -> None:
        from torch.profiler import ProfilerAction

        self.live = live
        self._hooks = hooks
        self._driver = driver  # the thread that drives the capture (only it steps and exports)
        self._PA = ProfilerAction
        self._RECORDING = (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)
        self.traces: list[TraceFile] = []
        self.schedule: Callable[[int], ProfilerAction] = _noop_schedule  # records nothing until begin()
        self.activities: list[ProfilerActivity] = []
        self.stopping = False  # the run is ending: an export no longer starts the window report
        self.closed_for_good = False  # the last recorded window was exported (the window report may start)
        self._tp: profile | None = None  # the live torch.profiler.profile
        self._lock = threading.RLock()  # the driver steps the profiler; give_way may stop it from another thread
        self._asked_to_give_way: threading.Event | None = None  # set by another thread's profiler start
        self._first_record: int | None = None
        self._action: ProfilerAction = ProfilerAction.NONE
        self._span: int | None = None
        self._leak_results: object | None = None  # the last window's torch results, for leak_statements()
        # which planned window (after the default one) a trace's first recorded step belongs to
        self.window_at: Callable[[int], PlannedWindow | None] = lambda first: None

    @property
    def alive(self) -> bool:
        return self._tp is not None

    @property
    def asked_to_give_way(self) -> bool:
        return self._asked_to_give_way is not None

    def wants_step(self, nxt: ProfilerAction) -> bool:
        """The next step changes the profiler's state (else step() stays on its fast path)."""
        return nxt is not self._PA.NONE or self._tp is not None

    def begin(self, schedule: Callable[[int], ProfilerAction], activities: list[ProfilerActivity]) -> None:
        """At the capture's start, with what it records (``activities``) and when (``schedule``, torch's
        form): the schedule may warm up or record from step 0."""
        self.schedule = schedule
        self.activities = activities
        self._action = self.schedule(0)
        if self._action is not self._PA.NONE:
            self._start_profiler(0)
            if self._action in self._RECORDING:
                self._enter_recording()

    def advance_or_drop(self, nxt: ProfilerAction) -> None:
        with self._lock:
            try:
                self._advance(nxt)
            except BaseException:
                # a torch profiler left half-advanced and never stopped crashes the process at exit
                tp, self._tp = self._tp, None
                if tp is not None:
                    active.unwatch()
                    _quiet_stop(tp)
                raise

    def _advance(self, nxt: ProfilerAction) -> None:
        prev = self._action
        self._action = nxt
        recording_prev = prev in self._RECORDING
        recording_next = nxt in self._RECORDING
        if recording_prev:
            self.live.recorded_steps += 1
            self._hooks.recorded_step()
        if self._tp is None:
            if nxt is not self._PA.NONE:
                self._start_profiler(self.live.step_num)
                if recording_next:
                    self._enter_recording()
            return
        if prev is self._PA.RECORD_AND_SAVE:
            self._leave_recording()
        with active.own_call():
            self._tp.step()  # may export the trace (on_trace_ready)
        if recording_next and not recording_prev or (prev is self._PA.RECORD_AND_SAVE and recording_next):
            self._enter_recording()
        if nxt is self._PA.NONE:
            self._drop_profiler()

    def _start_profiler(self, at_step: int) -> None:
        live = self.live
        if not live.guard.ok("profiler") or live.paths is None:
            return
        other = active.other_profiler()  # someone started a profiler since the capture began
        if other is not None:
            live.guard.disable("profiler", other, f"gpuprof: {other}; gpuprof records no trace in this run, so "
                                                  "as not to disturb it. Training continues.")
            return
        import torch.profiler as tprof

        sched = self.schedule
        cfg = live.config

        def make(activities: list[ProfilerActivity]) -> profile:
            tp = tprof.profile(
                activities=activities, schedule=sched, on_trace_ready=self._on_trace_ready,
                record_shapes=cfg.record_shapes, profile_memory=cfg.profile_memory, with_stack=cfg.with_stack,
                with_flops=cfg.with_flops, with_modules=cfg.with_modules,
            )
            # The profiler is created late (at the first warm-up step), but its step
            # numbers (ProfilerStep#N in the trace) and schedule must be the loop's.
            action = sched(at_step)
            tp.step_num = at_step
            # torch types these as its four actions; sched() returns one of them
            setattr(tp, "current_action", action)  # noqa: B010
            if hasattr(tp, "_prev_schedule_action"):
                setattr(tp, "_prev_schedule_action", action)  # noqa: B010
            return tp

        torchlogs.hush()  # torch's "USDT: profiler_start" and CPUAllocator lines off while ours runs
        tp = make(self.activities)
        try:
            with active.own_call():
                tp.start()
        except BaseException as err:
            _quiet_stop(tp)  # a half-started profiler must not stay enabled
            cuda_act = tprof.ProfilerActivity.CUDA
            if not isinstance(err, Exception) or cuda_act not in self.activities:
                raise
            # CUPTI missing or broken: try the CPU alone
            self.activities = [a for a in self.activities if a != cuda_act]
            live.guard.fail("CUDA activity tracing (CUPTI)", "traces hold CPU activity only", err)
            torchlogs.hush()  # _quiet_stop turned it off
            tp = make(self.activities)
            try:
                with active.own_call():
                    tp.start()
            except BaseException:
                _quiet_stop(tp)
                raise
        self._tp = tp
        active.watch(self.give_way)

    def step_aside_if_asked(self) -> None:
        """On the driving thread: another thread's profiler start waits for gpuprof's to stop."""
        if self._asked_to_give_way is not None:
            self.give_way()

    def give_way(self) -> None:
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
        guard = self.live.guard
        try:
            if threading.get_ident() != self._driver():
                self._wait_for_driver()
                return
            with self._lock:
                asked, self._asked_to_give_way = self._asked_to_give_way, None
                try:
                    if self._tp is None:
                        return
                    at = self.live.step_num
                    self.close()
                finally:
                    if asked is not None:
                        asked.set()
            guard.disable(
                "profiler", "another torch profiler started",
                f"gpuprof: another torch profiler started at step {at} while gpuprof's was running; PyTorch "
                "runs one profiler at a time, so gpuprof stopped its own there (the steps recorded so far are "
                "kept) and records no more traces in this run. Training continues.")
        except Exception as err:  # noqa: BLE001 - reported; the other profiler must still start
            guard.fail("profiler", "no more traces in this run", err)

    def _wait_for_driver(self) -> None:
        with self._lock:
            if self._tp is None:
                return
            asked = self._asked_to_give_way = self._asked_to_give_way or threading.Event()
        if asked.wait(GIVE_WAY_WAIT_S):
            return
        with self._lock:
            self._asked_to_give_way = None
            if not self.alive:  # the driver stopped it meanwhile
                return
            at = self.live.step_num
            self.live.guard.said.add("foreign stop")  # one warning for this, below
            self.close()
        self.live.guard.disable(
            "profiler", "another torch profiler started",
            f"gpuprof: another torch profiler started on thread {threading.current_thread().name!r} at step {at} "
            "while gpuprof's was running, and the thread that drives gpuprof did not step within "
            f"{GIVE_WAY_WAIT_S:g} s; gpuprof stopped its profiler from this thread, so its current trace is lost, "
            "and PyTorch may still crash at exit with profilers started on two threads. Training continues.")

    def _enter_recording(self) -> None:
        self._first_record = self.live.step_num
        self._hooks.recording(True, None)

    def _leave_recording(self) -> None:
        self._span = time.time_ns()
        self._hooks.recording(False, self._span)

    def _on_trace_ready(self, tp: profile) -> None:
        """torch calls this at the end of a recorded cycle: export ``<worker>.<span>.pt.trace.json.gz``."""
        live = self.live
        paths = live.paths
        if paths is None:
            return
        span = self._span or time.time_ns()
        self._span = None
        path = paths.trace_file(span)
        first = self._first_record if self._first_record is not None else live.step_num
        snap = paths.snapshot_file(span)

        def export() -> None:
            if live.config.print_report:  # the step that closes a window waits for torch's export: say so first
                from gpuprof.render.safe import visible

                last_step = live.step_num - 1 if live.step_num > first else first
                try:  # a closed or broken stream costs the line, never the trace
                    print(f"gpuprof: recorded steps {first}-{last_step}; torch is writing their trace to {visible(path.name)} "
                          "(this step waits until it is written)", file=live.stream, flush=True)
                except (OSError, ValueError):
                    pass
            with atomic_path(path, suffix=".pt.trace.json.gz") as tmp:
                export_gzipped(tp, tmp)
            last = live.step_num - 1 if live.step_num > first else first
            self.traces.append(TraceFile(path, first, last, snap if snap.exists() else None, self.window_at(first)))
            self._hold_for_leak_lines(tp)
            if not self.stopping:  # step() starts the report once the profiler is dropped
                self.closed_for_good = bool(live.guard.run(
                    "window report", "the report is written when the run ends instead", self._no_more_recording))

        live.guard.run("trace export", "this trace is lost", export)

    def _hold_for_leak_lines(self, tp: profile) -> None:
        """Keep the window's in-memory results (the last window's only) for :meth:`leak_statements`: the walk
        that finds GP640's statement costs about twice the export, so it waits for the end of the run."""
        cfg = self.live.config
        if cfg.checks and cfg.profile_memory and cfg.with_stack and tp.profiler is not None:
            self._leak_results = getattr(tp.profiler, "kineto_results", None)

    def leak_statements(self, wanted: bool) -> tuple[StatementSite, ...]:
        """The user statements whose allocations outlived the last recorded window (``wanted``: a memory growth
        was found; else nothing is walked); the held results are released either way."""
        results, self._leak_results = self._leak_results, None
        if results is None or not wanted:
            return ()
        from gpuprof.capture.leaklines import statement_sites

        return statement_sites(results)

    def _no_more_recording(self) -> bool:
        """True when the schedule records no further cycle after the one just exported."""
        sched = self.live.config.schedule
        if isinstance(sched, Schedule):  # the configured cycles (windows asked for later are not counted)
            return sched.repeat > 0 and sum(t.window is None for t in self.traces) >= sched.repeat
        # a torch.profiler.schedule callable: look ahead (a cycle repeated forever finds its next window soon)
        fn, now = self.schedule, self.live.step_num
        return not any(fn(s) in self._RECORDING for s in range(now, now + LOOKAHEAD_STEPS))

    def _drop_profiler(self) -> None:
        tp, self._tp = self._tp, None
        if tp is not None:
            active.unwatch()
            _exit(tp)

    def close(self) -> None:
        """At the end of the run: write what the current cycle recorded so far, and stop the profiler.

        Runs even after the "profiler" part failed: a torch profiler left
        running crashes the process at exit. On a thread other than the one
        that started it (``stop()`` from another thread, or at exit after the
        driving thread ended), torch can stop the profiler but not export its
        trace (the export crashes the process), so the current cycle is lost
        and one warning says so.
        """
        with self._lock:
            tp, self._tp = self._tp, None
            if tp is None:
                return
            active.unwatch()
            if threading.get_ident() != self._driver():
                tp.on_trace_ready = None
                if self._action in self._RECORDING:
                    self._span = None
                    self.live.guard.warn_once(
                        "foreign stop",
                        f"gpuprof: the capture was stopped on thread {threading.current_thread().name!r}, not on "
                        "the thread that drives it; PyTorch can export a trace only on the thread that started "
                        f"the profiler, so the steps recorded since step {self._first_record} are lost. Call "
                        "stop()/finish() on the driving thread. Training continues.")
            self._stop_profiler(tp)

    def _stop_profiler(self, tp: profile) -> None:
        guard = self.live.guard
        try:
            if self._action in self._RECORDING and guard.ok("profiler") and tp.on_trace_ready is not None:
                guard.run("profiler", "the last trace may be missing", self._leave_recording)
            else:
                self._span = None
        finally:
            try:
                _exit(tp)  # exports via on_trace_ready when it was recording
            except Exception as err:  # noqa: BLE001 - reported; the profiler is dropped either way
                guard.fail("profiler", "the last trace may be missing", err)
                _quiet_stop(tp)


def _noop_schedule(step: int) -> ProfilerAction:
    from torch.profiler import ProfilerAction

    return ProfilerAction.NONE


class _Exits(Protocol):
    def __exit__(self, exc_type: None, exc: None, tb: None) -> object: ...


def _exit(tp: _Exits) -> None:
    """Stop a torch profiler as its ``with`` block would (exports via on_trace_ready when it was recording)."""
    try:
        tp.__exit__(None, None, None)
    finally:
        torchlogs.unhush()


def _quiet_stop(tp: _Exits) -> None:
    try:
        _exit(tp)
    except Exception:  # noqa: BLE001 - the profiler that failed to start may fail to stop; it is dropped
        return

"""The capture session's recorded windows, trigger and hang watchdog: one object the session holds.

:class:`JobControl` is the plan that records windows asked for after the schedule's (anomalies,
``gpuprof trigger``), the registration that lets ``gpuprof trigger`` reach this process, and the watchdog
that writes a hang report. :class:`~gpuprof.capture.session.Profiler` makes one and calls it at setup, at
each step and at the end; what it reads of the session it is handed (the live state, the window, the
step clock), so it declares nothing of its host.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from gpuprof.capture.checks import MemoryCheck
from gpuprof.findings import Finding

if TYPE_CHECKING:  # pragma: no cover - annotations only
    from gpuprof.capture.checks import Live
    from gpuprof.capture.config import CaptureConfig
    from gpuprof.capture.guard import Guard
    from gpuprof.capture.job.job import JobWindows
    from gpuprof.capture.job.watchdog import Watchdog
    from gpuprof.capture.window import TraceWindow

__all__ = ["JobControl", "CONTENTION_SHARE", "OWN_AFTER_STEPS", "WINDOW_REPORT_ENV", "defer_window_report"]

# the driving thread waited for a core this share of the run (or more): GP656 even without a slow streak
OWN_AFTER_STEPS = 2  # steps after a window (or its report) still marked as gpuprof's own work
WINDOW_REPORT_ENV = "GPUPROF_WINDOW_REPORT"  # "end": a window's report waits for the end of the run; "window": not


def defer_window_report() -> bool:
    """Under ``gpuprof run`` (or with ``GPUPROF_WINDOW_REPORT=end``) a window's analysis waits for the end of the
    job: on the training's thread it would compete for the GIL, and a child process costs an interpreter's
    start (2-2.5 s of CPU) and still competes for the cores; at the end it is done once, with the final report,
    and slows no step (docs/run.md, "The watch"). ``GPUPROF_WINDOW_REPORT=window`` keeps the report at the
    window's end."""
    import os

    how = os.environ.get(WINDOW_REPORT_ENV, "").strip().lower()
    if how in ("end", "window"):
        return how == "end"
    return bool(os.environ.get("GPUPROF_RUN_CONFIG"))  # gpuprof.run.options.ENV (run sits above capture)


CONTENTION_SHARE = 0.2


class JobControl:
    """The session's windows after the default one, its trigger channel and its hang watchdog."""

    def __init__(self, config: CaptureConfig, live: Live, guard: Guard, window: TraceWindow) -> None:
        self.config = config
        self.live = live
        self.guard = guard
        self.window = window
        self.windows: JobWindows | None = None  # windows after the default one (gpuprof.capture.job.job)
        self.watchdog: Watchdog | None = None  # the hang watchdog (gpuprof.capture.job.hang)

    def request_window(self, steps: int, reason: str, running: bool) -> bool:
        """:meth:`Profiler.request_window <gpuprof.capture.session.Profiler.request_window>`; ``running``: the
        capture has started and not finished."""
        job = self.windows
        if job is None or not running:
            if not 1 <= steps <= 1000 or reason not in ("anomaly", "trigger"):
                raise ValueError(f"request_window(steps={steps!r}, reason={reason!r}): steps must be 1 to 1000 "
                                 "and reason 'trigger' or 'anomaly'")
            return False
        return job.request(steps, reason, "request_window()")

    def plan(self) -> None:
        """The schedule becomes a plan that also records the windows asked for later (gpuprof.capture.job.windows)."""
        from gpuprof.capture.job.job import JobWindows, window_steps_of
        from gpuprof.capture.job.windows import GrowthDetector, SlowdownDetector, WindowPlan

        cfg, window = self.config, self.window
        plan = WindowPlan(window.schedule)
        window.schedule = plan
        window.window_at = plan.window_at
        opts = cfg.options
        growth = GrowthDetector(opts.leak_min_total_bytes, opts.leak_min_rising_share) if self.live.cuda else None
        slow = SlowdownDetector(opts.anomaly_factor, opts.anomaly_steps, opts.anomaly_min_ms / 1000)
        self.windows = JobWindows(plan, cfg.max_auto_windows, window_steps_of(cfg.schedule),
                                  lambda: bool(window.traces), slow, growth, self.guard.warn_once)

    def register(self) -> None:
        from gpuprof.capture.job.trigger import TriggerChannel

        assert self.live.paths is not None and self.windows is not None
        self.windows.channel = TriggerChannel(str(self.live.paths.run_dir), self.live.ranks.rank)

    def start_watchdog(self, last_step: Callable[[], float], own_work: Callable[[], bool],
                       driver: int | None) -> None:
        """``last_step``: when the last step ended (perf_counter); ``own_work``: gpuprof's own work is running
        on the driving thread (``driver``), which does not count as the job's time."""
        from gpuprof.capture.job.watchdog import Watchdog

        paths, live = self.live.paths, self.live
        assert paths is not None
        self.watchdog = Watchdog(self.config.hang_timeout, lambda: live.step_num, last_step, own_work, live.step_s,
                                 driver, paths.run_dir, paths.out_dir, paths.worker, live.ranks.rank,
                                 lambda: live.stream, self._hang_finding, lambda: _series_now(live),
                                 world=live.ranks.world_size).start()

    def step(self, now: float, recording: bool, reporting: bool) -> None:
        """After each step (the session's ``live`` has it); a failure stops further windows, not the loop."""
        job, live = self.windows, self.live
        if job is None:
            return
        try:
            job.step(live.step_num, live.step_s[-1], now, recording, reporting,
                     self._allocated() if job.growth is not None else None)
        except Exception as err:  # noqa: BLE001 - no further windows; the loop goes on
            self.windows = None
            self.guard.fail("recorded windows", "no further windows are recorded", err)

    def stop(self) -> None:
        """The watchdog stops and the registration goes, each even if the other fails."""
        wd, self.watchdog = self.watchdog, None
        try:
            if wd is not None:
                wd.stop()
                if wd.failure is not None:
                    self.guard.fail("hang watchdog", "no hang report in this run", wd.failure)
        finally:
            job = self.windows
            if job is not None:
                self.guard.run("trigger", "none", job.close)
                share = job.wait_share() if self.live.step_num else None
                if job.contention or (share is not None and share >= CONTENTION_SHARE):
                    from gpuprof.capture.job.verdict import contention_finding

                    found = self.guard.run("host contention", "no host-contention note", contention_finding,
                                           job.contention, self.live.location, share)
                    if found is not None:
                        self.live.findings.append(found)

    def _hang_finding(self, new: Finding, old: Finding | None) -> None:
        """The watchdog's GP651 (from its thread): kept for the report; a resumed stall replaces its first one."""
        found = self.live.findings
        if old is not None and old in found:
            found[found.index(old)] = new
        else:
            found.append(new)

    def _allocated(self) -> int | None:
        """CUDA bytes allocated after the last step (None on the CPU or without the memory sampler)."""
        check = next((m for m in self.live.monitors if isinstance(m, MemoryCheck)), None)
        sampler = check.sampler if check is not None else None
        return sampler.allocated[-1] if sampler is not None and sampler.cuda and sampler.allocated else None


def _series_now(live: Live) -> dict[str, object] | None:
    """This rank's compact series of every step so far, for its hang.json entry (capture.job.hangseries; from
    the watchdog's thread: the step lists only grow, and a copy of them is taken), or None without the watch or
    a finished step. Here, not in hangseries, which the cross-rank report's writers import without the watch."""
    import dataclasses

    from gpuprof.capture.facts import _watch_data
    from gpuprof.capture.job.hangseries import MAX_HANG_POINTS
    from gpuprof.capture.job.phases import compact_series

    data = _watch_data(live, ())
    if data is None or not len(data.step_s):
        return None
    return dataclasses.asdict(compact_series(data, MAX_HANG_POINTS))

"""The capture session's recorded windows, trigger and hang watchdog (issue 33: gpuprof.run does the work).

A part of :class:`~gpuprof.capture.session.Profiler`, kept in its own module so the session stays small: the
plan that records windows asked for after the schedule's (anomalies, ``gpuprof trigger``), the registration
that lets ``gpuprof trigger`` reach this process, and the watchdog that writes a hang report.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuprof.capture.checks import MemoryCheck
from gpuprof.findings import Finding

if TYPE_CHECKING:  # pragma: no cover - annotations only
    from gpuprof.capture.checks import Live
    from gpuprof.capture.config import CaptureConfig
    from gpuprof.capture.guard import Guard
    from gpuprof.capture.job.hang import Watchdog
    from gpuprof.capture.job.job import JobWindows
    from gpuprof.capture.window import TraceWindow

__all__ = ["JobSeams"]


class JobSeams:
    """The recorded-window, trigger and watchdog methods of the session; the attributes are the session's."""

    config: CaptureConfig
    window: TraceWindow
    live: Live
    guard: Guard
    started: bool
    finished: bool
    _job: JobWindows | None
    _watchdog: Watchdog | None
    _t_last: float
    _own_work: bool
    _driver: int | None

    def request_window(self, steps: int = 5, reason: str = "trigger") -> bool:
        """Record ``steps`` more steps from the next step boundary into a trace of their own (any thread).

        The driving thread opens the window at its next :meth:`step`: one
        warm-up step, then ``steps`` recorded, after any window already
        planned; it is analysed with the others and listed in report.json's
        ``job.windows`` with this ``reason`` (``trigger`` or ``anomaly``).
        False when the capture is not running or a request is pending already;
        ValueError for a bad ``steps`` or ``reason``.
        """
        job = self._job
        if job is None or not self.started or self.finished:
            if not 1 <= steps <= 1000 or reason not in ("anomaly", "trigger"):
                raise ValueError(f"request_window(steps={steps!r}, reason={reason!r}): steps must be 1 to 1000 "
                                 "and reason 'trigger' or 'anomaly'")
            return False
        return job.request(steps, reason, "request_window()")

    def _plan_windows(self) -> None:
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
        self._job = JobWindows(plan, cfg.max_auto_windows, window_steps_of(cfg.schedule),
                               lambda: bool(window.traces), slow, growth, self.guard.warn_once)

    def _register(self) -> None:
        from gpuprof.capture.job.trigger import TriggerChannel

        assert self.live.paths is not None and self._job is not None
        self._job.channel = TriggerChannel(str(self.live.paths.run_dir), self.live.ranks.rank)

    def _start_watchdog(self) -> None:
        from gpuprof.capture.job.hang import Watchdog

        paths, live = self.live.paths, self.live
        assert paths is not None
        self._watchdog = Watchdog(self.config.hang_timeout, lambda: live.step_num, lambda: self._t_last,
                                  lambda: self._own_work, live.step_s, self._driver, paths.run_dir, paths.out_dir,
                                  paths.worker, self.live.ranks.rank, lambda: live.stream, self._hang_finding).start()

    def _hang_finding(self, new: Finding, old: Finding | None) -> None:
        """The watchdog's GP651 (from its thread): kept for the report; a resumed stall replaces its first one."""
        found = self.live.findings
        if old is not None and old in found:
            found[found.index(old)] = new
        else:
            found.append(new)

    def _stop_job(self) -> None:
        """The watchdog stops and the registration goes, each even if the other fails."""
        wd, self._watchdog = self._watchdog, None
        try:
            if wd is not None:
                wd.stop()
                if wd.failure is not None:
                    self.guard.fail("hang watchdog", "no hang report in this run", wd.failure)
        finally:
            job = self._job
            if job is not None:
                self.guard.run("trigger", "none", job.close)

    def _allocated(self) -> int | None:
        """CUDA bytes allocated after the last step (None on the CPU or without the memory sampler)."""
        check = next((m for m in self.live.monitors if isinstance(m, MemoryCheck)), None)
        sampler = check.sampler if check is not None else None
        return sampler.allocated[-1] if sampler is not None and sampler.cuda and sampler.allocated else None

"""The session's side of the job's windows, triggers and hangs: one object the capture steps.

:class:`JobWindows` owns the :class:`~gpuprof.capture.job.windows.WindowPlan` (the
torch profiler's schedule), the anomaly detectors, the trigger channel and
the hang watchdog. The session calls :meth:`JobWindows.step` once per step on
the driving thread (a few attribute reads when nothing happens) and
:meth:`JobWindows.close` when it stops.

The detectors look only at steps the job ran alone: not while a window is
recorded (the profiler's cost), nor for two steps after, nor while a window's
report is analysed on the background thread (it competes for the GIL), nor
before the default window has been written.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

from gpuprof.capture.job.windows import (
    DEFAULT_WINDOW_STEPS,
    MAX_WINDOW_STEPS,
    Anomaly,
    GrowthDetector,
    SlowdownDetector,
    WindowPlan,
    thread_wait_s,
)

__all__ = ["JobWindows", "REASONS"]

REASONS = ("anomaly", "trigger")  # the reasons a window after the default one is recorded for
QUIET_STEPS = 2  # steps after a recorded window (or a report) not looked at by the detectors
MAX_CONTENTION = 1000  # host-contention episodes kept (bounded)


class TriggerSource(Protocol):
    """Where on-demand requests come from (:class:`gpuprof.capture.job.trigger.TriggerChannel`)."""

    signalled: bool

    def poll(self) -> int | None: ...

    def close(self) -> None: ...


class JobWindows:
    """The windows after the default one, asked for by the detectors, a trigger or :meth:`request`."""

    def __init__(self, plan: WindowPlan, max_auto: int, window_steps: int, defaults_done: Callable[[], bool],
                 slow: SlowdownDetector, growth: GrowthDetector | None = None,
                 warn: Callable[[str, str], None] | None = None) -> None:
        from gpuprof.capture.job.trigger import POLL_S

        self.plan = plan
        self.auto_left = max_auto
        self.window_steps = window_steps
        self._defaults_done = defaults_done
        self.slow = slow
        self.growth = growth
        self.anomalies: list[Anomaly] = []
        self.contention: list[Anomaly] = []  # slow streaks the run-queue wait explains: other processes' load
        self._wait_from = (time.perf_counter(), thread_wait_s())  # the driving thread's run-queue wait so far
        self._warn = warn  # (key, message): said once per key (the session's guard)
        self.channel: TriggerSource | None = None  # set by the session when the capture registers
        self._poll_s = POLL_S
        self._next_poll = 0.0
        self._quiet_until = 0

    def request(self, steps: int, reason: str, detail: str = "") -> bool:
        """Any thread: record ``steps`` steps from the next step boundary (False: one is pending already)."""
        if reason not in REASONS:
            raise ValueError(f"reason must be one of {', '.join(REASONS)}, got {reason!r}")
        if isinstance(steps, bool) or not isinstance(steps, int) or not 1 <= steps <= MAX_WINDOW_STEPS:
            raise ValueError(f"steps must be an int from 1 to {MAX_WINDOW_STEPS}, got {steps!r}")
        return self.plan.request(steps, reason, detail)

    def step(self, step_num: int, seconds: float, now: float, recording: bool, reporting: bool,
             allocated: int | None) -> None:
        """After step ``step_num - 1`` (``seconds`` long, ended at ``now``); ``recording``: a profiler is alive;
        ``reporting``: a window report is being made; ``allocated``: CUDA bytes allocated (None: not measured)."""
        ch = self.channel
        if ch is not None and (ch.signalled or now >= self._next_poll):
            self._next_poll = now + self._poll_s
            steps = ch.poll()
            if steps is not None:
                self.plan.request(steps, "trigger", "gpuprof trigger")
        if recording or reporting:
            self._quiet_until = step_num + QUIET_STEPS
        elif self.auto_left > 0 and step_num > self._quiet_until and self._defaults_done():
            found = self.slow.observe(step_num - 1, seconds)
            if found is None and self.growth is not None and allocated is not None:
                found = self.growth.observe(step_num - 1, allocated)
            if found is not None and found.kind == "host_contention":
                if len(self.contention) < MAX_CONTENTION:
                    self.contention.append(found)  # no window: the job did not change, the machine's load did
            elif found is not None and self.plan.request(self.window_steps, "anomaly", found.detail, found):
                self.auto_left -= 1
                self.anomalies.append(found)
        if self.plan.pending and self.plan.place_pending(step_num) is None and self._warn is not None:
            self._warn("window unplaced", "gpuprof: a window asked for could not be placed: the schedule records "
                                          "continuously, leaving no free steps for it. Training continues.")

    def wait_share(self) -> float | None:
        """On the driving thread: the share of the time since the capture began that it spent runnable but
        waiting for a core (None without /proc/thread-self/schedstat)."""
        t0, w0 = self._wait_from
        w1 = thread_wait_s()
        wall = time.perf_counter() - t0
        if w0 is None or w1 is None or wall <= 0:
            return None
        return min(max(w1 - w0, 0.0) / wall, 1.0)

    def close(self) -> None:
        ch, self.channel = self.channel, None
        if ch is not None:
            ch.close()


def window_steps_of(schedule: object) -> int:
    """An anomaly window records as many steps as the default one (``Schedule.active``), else the default."""
    from gpuprof.capture.config import Schedule

    return schedule.active if isinstance(schedule, Schedule) else DEFAULT_WINDOW_STEPS

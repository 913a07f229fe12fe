"""Recorded windows after the default one: asked for by the anomaly detectors or by a trigger.

The torch profiler's schedule becomes a :class:`WindowPlan`: the configured
schedule (the *default* window) plus the windows asked for since, each
``WINDOW_WARMUP`` warm-up step(s) then ``steps`` recorded steps, exported to
its own trace file like the default one. A request (:meth:`WindowPlan.request`,
any thread) only sets a value; the driving thread places the window at its
next step boundary (:meth:`WindowPlan.place_pending`), after whatever the
plan records already, so windows never overlap.

The detectors (:class:`SlowdownDetector`, :class:`GrowthDetector`) are pure:
the session feeds them each step's time (and CUDA allocated bytes) outside
recorded windows, and they say when the steady state broke.
"""

from __future__ import annotations

import os
import statistics
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover - annotations only
    from torch.profiler import ProfilerAction

__all__ = [
    "ANOMALY_FACTOR", "ANOMALY_MIN_S", "ANOMALY_STEPS", "DEFAULT_MAX_AUTO_WINDOWS", "DEFAULT_WINDOW_STEPS", "GROWTH_STEPS",
    "WINDOW_WARMUP", "PlannedWindow", "WindowPlan", "SlowdownDetector", "GrowthDetector", "Anomaly", "CAUSE_SHARE",
    "SPREAD_MARGIN", "SPREAD_QUANTILE", "thread_wait_s", "host_load",
]

ANOMALY_FACTOR = 1.5  # a step slower than this x the rolling median is "slow"
ANOMALY_STEPS = 5  # this many slow steps in a row break the steady state
ANOMALY_MIN_S = 0.001  # ...each also at least this much slower than the median (GP650's options set all three)
BASELINE_STEPS = 64  # the rolling median is over the last this many normal steps
BASELINE_MIN_STEPS = 16  # no verdict before this many normal steps (after each window and each anomaly)
BASELINE_EVERY = 8  # the median is recomputed every this many normal steps (a step stays O(1))
SPREAD_QUANTILE = 0.95  # a slow step is also above this quantile of the normal steps (the run's own spread)...
SPREAD_MARGIN = 1.2  # ...times this: noise within the run's spread is no anomaly
CAUSE_SHARE = 0.5  # a cause is named when it explains at least this share of the added time (docs/run.md)
GROWTH_STEPS = 16  # CUDA allocated memory rising over this many steps in a row (and by enough bytes)
DEFAULT_MAX_AUTO_WINDOWS = 2  # automatic (anomaly) windows per job
DEFAULT_WINDOW_STEPS = 5  # steps a trigger records when not told (an anomaly: the schedule's ``active``)
WINDOW_WARMUP = 1  # profiler warm-up steps before a window's recorded steps (its start-up cost stays out)
MAX_WINDOW_STEPS = 1000  # a window longer than this is refused (a trace of thousands of steps is gigabytes)
_SEARCH_STEPS = 10_000  # steps searched for room after the configured schedule's own windows


@dataclass(frozen=True)
class Anomaly:
    """What broke the steady state: ``onset`` is the first step of it; the medians are step times (s)."""

    kind: str  # "slowdown" or "memory_growth"
    onset: int
    detected: int
    detail: str
    before_s: float | None = None
    after_s: float | None = None
    wait_share: float | None = None  # run-queue wait of the training thread / the slow steps' time ("host_contention")
    load: tuple[float, int] | None = None  # (the 1-minute load average, the cores) when it was found


def thread_wait_s() -> float | None:
    """Seconds the calling thread has spent runnable but waiting for a core (/proc/thread-self/schedstat, field 2;
    None without it): CPU starvation by other threads and processes."""
    try:
        with open("/proc/thread-self/schedstat", "rb") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


def host_load() -> tuple[float, int] | None:
    """(the 1-minute load average, the cores this process may use), or None without /proc/loadavg."""
    try:
        with open("/proc/loadavg", "rb") as f:
            load = float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return load, cores


@dataclass(frozen=True)
class PlannedWindow:
    """A window after the default one: warm-up from ``start``, recorded ``first``..``last`` (global steps)."""

    start: int
    steps: int
    reason: str  # "anomaly" or "trigger"
    detail: str = ""  # what fired it, in words (the anomaly's cause, the trigger's source)
    anomaly: Anomaly | None = None  # what broke the steady state (reason "anomaly")

    @property
    def first(self) -> int:
        return self.start + WINDOW_WARMUP

    @property
    def last(self) -> int:
        return self.first + self.steps - 1


class WindowPlan:
    """The torch profiler's schedule: the configured one (the default window) plus the planned windows.

    Called by torch and by the session with the index of the step about to
    run; a configured action wins, else a planned window's, else none.
    """

    def __init__(self, base: Callable[[int], ProfilerAction]) -> None:
        from torch.profiler import ProfilerAction

        self.base = base
        self._PA = ProfilerAction
        self.windows: list[PlannedWindow] = []  # placed, in step order
        self._open: PlannedWindow | None = None  # the latest placed window (the only one that can be current)
        self._lock = threading.Lock()
        self._pending: tuple[int, str, str, Anomaly | None] | None = None  # set by request()

    def __call__(self, step: int) -> ProfilerAction:
        act = self.base(step)
        w = self._open
        if act is not self._PA.NONE or w is None or step < w.start or step > w.last:
            return act
        if step < w.first:
            return self._PA.WARMUP
        return self._PA.RECORD_AND_SAVE if step == w.last else self._PA.RECORD

    @property
    def pending(self) -> bool:
        return self._pending is not None

    def request(self, steps: int, reason: str, detail: str = "", anomaly: Anomaly | None = None) -> bool:
        """Ask for a window of ``steps`` recorded steps (any thread); False when one is pending already."""
        with self._lock:
            if self._pending is not None:
                return False
            self._pending = (steps, reason, detail, anomaly)
            return True

    def busy_until(self) -> int:
        """The last step a planned window warms up or records (-1 when none)."""
        w = self._open
        return w.last if w is not None else -1

    def place_pending(self, now: int) -> PlannedWindow | None:
        """On the driving thread: place the pending request from step ``now`` on (None: none, or no room)."""
        with self._lock:
            req, self._pending = self._pending, None
        if req is None:
            return None
        steps, reason, detail, anomaly = req
        span = WINDOW_WARMUP + steps
        # a step between two windows: the profiler is dropped and created afresh for each
        start = max(now, self.busy_until() + 2)
        for _ in range(_SEARCH_STEPS):
            # free from the step before (the gap) to the step after the window
            clash = next((s for s in range(max(start - 1, 0), start + span + 1)
                          if self.base(s) is not self._PA.NONE), None)
            if clash is None:
                w = PlannedWindow(start, steps, reason, detail, anomaly)
                self.windows.append(w)
                self._open = w
                return w
            start = clash + 2
        return None

    def window_at(self, first_recorded: int) -> PlannedWindow | None:
        """The planned window whose recorded steps hold ``first_recorded`` (None: the default window's)."""
        for w in reversed(self.windows):
            if w.first <= first_recorded <= w.last:
                return w
        return None


class SlowdownDetector:
    """Step time above ``factor`` x the rolling median of the normal steps, and above the run's own spread
    (``SPREAD_MARGIN`` x their ``SPREAD_QUANTILE``), for ``consecutive`` steps in a row.

    O(1) per step (the median and the spread are recomputed every ``BASELINE_EVERY`` normal
    steps). After it fires it starts afresh: the new level becomes the
    baseline, so one lasting slowdown is one anomaly, not one per window.

    Host contention: at the first slow step of a streak and when the streak is long enough, the training
    thread's run-queue wait is read (``wait``, :func:`thread_wait_s`: two small reads per streak, none on a
    normal step). When that wait explains at least ``CAUSE_SHARE`` of the time the streak's steps (after its
    first) added over the median, the anomaly is ``host_contention`` (the thread was runnable but other
    processes had the cores), not a slowdown of the job.
    """

    def __init__(self, factor: float = ANOMALY_FACTOR, consecutive: int = ANOMALY_STEPS,
                 min_added_s: float = ANOMALY_MIN_S, wait: Callable[[], float | None] | None = thread_wait_s,
                 load: Callable[[], tuple[float, int] | None] | None = host_load) -> None:
        self.factor = factor
        self.consecutive = max(1, consecutive)
        self.min_added_s = min_added_s
        self._wait = wait
        self._load = load
        self._normal: deque[float] = deque(maxlen=BASELINE_STEPS)
        self._median: float | None = None
        self._spread = 0.0
        self._since = 0
        self._slow: list[float] = []
        self._onset = 0
        self._wait0: float | None = None
        self._base_wait: tuple[float, int] | None = None  # (wait read, normal steps seen) at the last baseline
        self._normal_wait = 0.0  # run-queue wait per normal step (s), measured between baselines
        self._normal_seen = 0

    def reset(self) -> None:
        """Start afresh (after a recorded window or a report, whose cost is not the job's)."""
        self._normal.clear()
        self._median = None
        self._spread = 0.0
        self._since = 0
        self._slow = []
        self._base_wait = None  # the next normal-wait figure is measured over normal steps only

    def observe(self, step: int, seconds: float) -> Anomaly | None:
        """Step ``step`` (global index) took ``seconds``; an :class:`Anomaly` when the steady state broke."""
        med = self._median
        if (med is not None and seconds > self.factor * med and seconds > self._spread
                and seconds - med >= self.min_added_s):
            if not self._slow:
                self._onset = step
                self._wait0 = self._wait() if self._wait is not None else None
            self._slow.append(seconds)
            if len(self._slow) < self.consecutive:
                return None
            after = statistics.median(self._slow)
            share = self._wait_share(med)
            if share is not None:
                found = Anomaly("host_contention", self._onset, step,
                                f"step time {after * 1e3:.3g} ms from step {self._onset} against a median of "
                                f"{med * 1e3:.3g} ms while the training thread waited for a core "
                                f"{share:.0%} of the time", before_s=med, after_s=after, wait_share=share,
                                load=self._load() if self._load is not None else None)
            else:
                found = Anomaly("slowdown", self._onset, step,
                                f"step time {after * 1e3:.3g} ms from step {self._onset}, above {self.factor:g}x the "
                                f"rolling median of {med * 1e3:.3g} ms for {len(self._slow)} steps in a row",
                                before_s=med, after_s=after)
            self.reset()
            return found
        self._slow = []
        self._normal.append(seconds)
        self._since += 1
        self._normal_seen += 1
        if len(self._normal) >= BASELINE_MIN_STEPS and (med is None or self._since >= BASELINE_EVERY):
            ordered = sorted(self._normal)
            self._median = statistics.median(ordered)
            self._spread = SPREAD_MARGIN * ordered[min(len(ordered) - 1, int(SPREAD_QUANTILE * len(ordered)))]
            self._since = 0
            self._note_normal_wait()
        return None

    def _note_normal_wait(self) -> None:
        """The run-queue wait per normal step since the last baseline (one read every ``BASELINE_EVERY`` steps):
        the wait a busy machine costs every step, which a slow streak's own wait is measured above."""
        w = self._wait() if self._wait is not None else None
        if w is None:
            return
        prev = self._base_wait
        if prev is not None and self._normal_seen > prev[1]:
            self._normal_wait = max(w - prev[0], 0.0) / (self._normal_seen - prev[1])
        self._base_wait = (w, self._normal_seen)

    def _wait_share(self, med: float) -> float | None:
        """The streak's run-queue wait above the normal steps' as a share of its steps' time, when that added
        wait explains at least ``CAUSE_SHARE`` of the time they added over ``med`` (else None: no contention
        named)."""
        w0 = self._wait0
        w1 = self._wait() if self._wait is not None and w0 is not None else None
        if w0 is None or w1 is None:
            return None
        timed = self._slow[1:]  # the first slow step ended before the first read
        added = sum(timed) - med * len(timed)
        waited = max(w1 - w0 - self._normal_wait * len(timed), 0.0)  # the wait above the normal steps'
        if not timed or added <= 0 or waited < CAUSE_SHARE * added:
            return None
        return min(waited / sum(timed), 1.0)


class GrowthDetector:
    """CUDA allocated memory rising step after step: ``steps`` samples in a row, none falling, most rising,
    by at least ``min_total`` bytes (GP640's thresholds)."""

    def __init__(self, min_total: int, min_rising_share: float, steps: int = GROWTH_STEPS) -> None:
        self.min_total = min_total
        self.min_rising_share = min_rising_share
        self.steps = steps
        self.reset()

    def reset(self) -> None:
        self._first: int | None = None
        self._prev: int | None = None
        self._onset = 0
        self._n = 0
        self._rises = 0

    def observe(self, step: int, allocated: int) -> Anomaly | None:
        prev = self._prev
        self._prev = allocated
        if prev is None or allocated < prev:
            self._first, self._onset, self._n, self._rises = allocated, step, 0, 0
            return None
        self._n += 1
        self._rises += allocated > prev
        first = self._first if self._first is not None else allocated
        grown = allocated - first
        if self._n >= self.steps and grown >= self.min_total and self._rises >= self.min_rising_share * self._n:
            found = Anomaly("memory_growth", self._onset, step,
                            f"CUDA allocated memory grew by {grown / 2**20:.1f} MiB over {self._n} steps from "
                            f"step {self._onset} without falling")
            self.reset()
            return found
        return None

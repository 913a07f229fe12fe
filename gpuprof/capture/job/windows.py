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
    "WINDOW_WARMUP", "PlannedWindow", "WindowPlan", "SlowdownDetector", "GrowthDetector", "Anomaly",
]

ANOMALY_FACTOR = 1.5  # a step slower than this x the rolling median is "slow"
ANOMALY_STEPS = 5  # this many slow steps in a row break the steady state
ANOMALY_MIN_S = 0.001  # ...each also at least this much slower than the median (GP650's options set all three)
BASELINE_STEPS = 64  # the rolling median is over the last this many normal steps
BASELINE_MIN_STEPS = 16  # no verdict before this many normal steps (after each window and each anomaly)
BASELINE_EVERY = 8  # the median is recomputed every this many normal steps (a step stays O(1))
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
    """Step time above ``factor`` x the rolling median of the normal steps for ``consecutive`` steps in a row.

    O(1) per step (the median is recomputed every ``BASELINE_EVERY`` normal
    steps). After it fires it starts afresh: the new level becomes the
    baseline, so one lasting slowdown is one anomaly, not one per window.
    """

    def __init__(self, factor: float = ANOMALY_FACTOR, consecutive: int = ANOMALY_STEPS,
                 min_added_s: float = ANOMALY_MIN_S) -> None:
        self.factor = factor
        self.consecutive = max(1, consecutive)
        self.min_added_s = min_added_s
        self._normal: deque[float] = deque(maxlen=BASELINE_STEPS)
        self._median: float | None = None
        self._since = 0
        self._slow: list[float] = []
        self._onset = 0

    def reset(self) -> None:
        """Start afresh (after a recorded window or a report, whose cost is not the job's)."""
        self._normal.clear()
        self._median = None
        self._since = 0
        self._slow = []

    def observe(self, step: int, seconds: float) -> Anomaly | None:
        """Step ``step`` (global index) took ``seconds``; an :class:`Anomaly` when the steady state broke."""
        med = self._median
        if med is not None and seconds > self.factor * med and seconds - med >= self.min_added_s:
            if not self._slow:
                self._onset = step
            self._slow.append(seconds)
            if len(self._slow) < self.consecutive:
                return None
            after = statistics.median(self._slow)
            found = Anomaly("slowdown", self._onset, step,
                            f"step time {after * 1e3:.3g} ms from step {self._onset}, above {self.factor:g}x the "
                            f"rolling median of {med * 1e3:.3g} ms for {len(self._slow)} steps in a row",
                            before_s=med, after_s=after)
            self.reset()
            return found
        self._slow = []
        self._normal.append(seconds)
        self._since += 1
        if len(self._normal) >= BASELINE_MIN_STEPS and (med is None or self._since >= BASELINE_EVERY):
            self._median = statistics.median(self._normal)
            self._since = 0
        return None


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

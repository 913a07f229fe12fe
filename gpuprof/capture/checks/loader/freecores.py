"""The cores free beside the trainer, as measured over the steps: what a loader fix's what-if is capped by.

DataLoader workers do the loading the training process did, on the same machine: where its cores are busy (the
trainer's own compute on PyTorch's intra-op threads, or other processes), the workers can only take their CPU
from the trainer, and the step saves less than the loading it no longer waits for, or nothing (issue 46: a
``num_workers`` fix predicted to save 121 ms a step made a job on 2 busy cores 6.5% slower). :class:`FreeCores`
reads, at a few points of the run (the first step, each recorded window's start and end, every quarter second of
steps, the last of which ends the measurement), the CPU time
of the training process (``os.times``: every thread of it) and the idle time of the cores it may run on
(``/proc/stat``, the lines of the CPUs in its affinity mask: ``idle`` + ``iowait``), and sums them over the steps
outside recorded windows (gpuprof's own profiling is not the job's), not the run's own end (the last trace's
export, the analysis). Per step: one clock read. Without ``/proc/stat``
(not Linux) it measures nothing and the what-if falls back to its model (docs/critical-path.md).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from gpuprof.capture.checks.loader.workerio import ticks_per_s

__all__ = ["CoreUse", "FreeCores", "idle_seconds"]

MIN_SPAN_S = 0.5  # under this much measured time the figures are not given (a few ticks of /proc/stat)
TICK_S = 0.25  # during the steps, one reading this often (about 50 us each): where the measurement ends


@dataclass(frozen=True)
class CoreUse:
    """Over ``seconds`` of steps: the training process's CPU (``trainer_cores``, 1.0 = one core busy the whole
    time) and the idle time of the cores it may run on (``idle_cores``, same unit), of ``cores``."""

    seconds: float
    trainer_cores: float
    idle_cores: float
    cores: int


def _cpus() -> set[int] | None:
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


def idle_seconds(raw: bytes, cpus: set[int] | None, tick: float) -> float | None:
    """The idle + iowait seconds of ``cpus`` (None: every CPU, the ``cpu`` line) in a ``/proc/stat`` text; None
    when it holds none of them or cannot be read."""
    total, seen = 0, False
    for line in raw.splitlines():
        if not line.startswith(b"cpu"):
            continue
        name, *fields = line.split()
        if cpus is None:
            if name != b"cpu":
                continue
        else:
            try:
                if int(name[3:]) not in cpus:
                    continue
            except ValueError:  # the "cpu" line: every CPU, not ours alone
                continue
        try:
            total += int(fields[3]) + (int(fields[4]) if len(fields) > 4 else 0)
        except (IndexError, ValueError):
            return None
        seen = True
    return total / tick if seen else None


def _proc_stat() -> bytes | None:
    try:
        with open("/proc/stat", "rb") as fh:
            return fh.read(1 << 20)
    except OSError:
        return None


class FreeCores:
    """Sums the trainer's CPU and its cores' idle time over the spans between :meth:`start` and :meth:`stop`."""

    def __init__(self) -> None:
        self._tick = ticks_per_s()
        self._cpus = _cpus()
        self._cores = len(self._cpus) if self._cpus else (os.cpu_count() or 1)
        self._open: tuple[float, float, float] | None = None
        self._last: tuple[float, float, float] | None = None  # the latest reading inside the open span
        self._wall = self._cpu = self._idle = 0.0
        self._broken = False
        self._pending = False

    def _read(self) -> tuple[float, float, float] | None:
        raw = _proc_stat()
        idle = idle_seconds(raw, self._cpus, self._tick) if raw is not None else None
        if idle is None:
            self._broken = True
            return None
        t = os.times()
        return time.monotonic(), t.user + t.system, idle

    def start(self) -> None:
        """Open a span (a no-op while one is open or after a failed read)."""
        if self._open is None and not self._broken:
            self._open = self._last = self._read()

    def start_next_step(self) -> None:
        """Open a span at the end of the next step (:meth:`tick`): after a window, once its trace is written."""
        self._pending = True

    def tick(self) -> None:
        """At the end of a step: a reading every :data:`TICK_S` (a clock read otherwise), so that :meth:`stop` with
        ``at_last_tick`` can end the span at the steps' end, not at the end of the run's own work after them."""
        if self._pending:
            self._pending = False
            self.start()
        elif self._last is not None and time.monotonic() - self._last[0] >= TICK_S:
            self._last = self._read() or self._last

    def stop(self, at_last_tick: bool = False) -> None:
        """Close the open span, adding it to the sums: now, or (``at_last_tick``, at the run's end) at the latest
        reading :meth:`tick` took during the steps."""
        if self._open is None:
            return
        now = self._last if at_last_tick else self._read()
        if now is not None:
            self._wall += max(now[0] - self._open[0], 0.0)
            self._cpu += max(now[1] - self._open[1], 0.0)
            self._idle += max(now[2] - self._open[2], 0.0)
        self._open = self._last = None

    def result(self) -> CoreUse | None:
        """The sums so far, an open span counted to now and left open (the findings are read at each window's
        report, and again at the end); None with too little measured or nothing readable."""
        wall, cpu, idle = self._wall, self._cpu, self._idle
        if self._open is not None:
            now = self._read()
            if now is not None:
                wall += max(now[0] - self._open[0], 0.0)
                cpu += max(now[1] - self._open[1], 0.0)
                idle += max(now[2] - self._open[2], 0.0)
        if self._broken or wall < MIN_SPAN_S:
            return None
        return CoreUse(seconds=round(wall, 3), trainer_cores=round(cpu / wall, 3),
                       idle_cores=round(min(idle / wall, float(self._cores)), 3), cores=self._cores)

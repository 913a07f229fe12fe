"""What the DataLoader workers read and wait on: the I/O evidence of the loader verdicts (GP606).

The watch's sampler (:mod:`gpuprof.capture.job.sampler`) reads, at each sample and for
each worker process it found, three kernel counters, off the training thread:

* ``/proc/<pid>/io``: ``rchar`` (bytes the process passed to ``read()``/
  ``pread()``: files, whether from the disk, the page cache or a network file
  system, pipes, sockets read with ``read()``) and ``read_bytes`` (bytes the
  storage layer fetched for it: page-cache misses);
* ``/proc/<pid>/stat`` field 42, ``delayacct_blkio_ticks``: time blocked on
  block I/O; only meaningful with the kernel's delay accounting on
  (``/proc/sys/kernel/task_delayacct`` = 1, off by default since Linux 5.14),
  else None;
* ``/proc/<pid>/schedstat`` field 3: how many times the worker was put on a
  core, i.e. woke up (a worker that blocks once per sample, on a socket or a
  sleep, wakes at least once per sample; one that only hands batches over wakes
  a few times per batch).

Rates are summed over the workers, per second of the interval. A counter the
system does not give (no ``/proc``, a worker gone) is left out; a column with
no worker read at all is None. Socket reads through ``recv()`` (Python's
``socket``, HTTP clients, object stores) are not counted anywhere in ``/proc``
per process: the verdicts say so rather than guess.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field

__all__ = ["WorkerIo", "WorkerIoSamples", "delay_accounting", "read_proc", "ticks_per_s"]


def read_proc(path: str) -> bytes | None:
    """A small /proc file's bytes (None when it is gone: a worker may exit at any time). Never blocks on a FIFO:
    /proc entries are kernel files."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        return os.read(fd, 4096)
    except OSError:
        return None
    finally:
        os.close(fd)


def delay_accounting() -> bool | None:
    """Whether the kernel counts tasks' block-I/O delays (True/False), None where it does not say."""
    raw = read_proc("/proc/sys/kernel/task_delayacct")
    if raw is None:
        return None
    return raw.strip() == b"1"


def ticks_per_s() -> float:
    """The kernel's clock ticks per second (the unit of /proc's CPU times), 100 where it does not say."""
    try:
        return float(os.sysconf("SC_CLK_TCK"))
    except (AttributeError, ValueError, OSError):
        return 100.0


@dataclass
class _Counters:
    rchar: int | None = None
    read_bytes: int | None = None
    blkio_ticks: int | None = None
    wakeups: int | None = None


def _counters(pid: int) -> _Counters:
    c = _Counters()
    io = read_proc(f"/proc/{pid}/io")
    if io is not None:
        for line in io.splitlines():
            key, _, value = line.partition(b":")
            if key in (b"rchar", b"read_bytes"):
                try:
                    setattr(c, key.decode(), int(value))
                except ValueError:
                    pass
    st = read_proc(f"/proc/{pid}/stat")
    if st is not None:
        f = st[st.rfind(b")") + 2:].split()
        try:
            c.blkio_ticks = int(f[39])  # field 42 of stat (fields after the command name start at 3)
        except (IndexError, ValueError):
            pass
    ss = read_proc(f"/proc/{pid}/schedstat")
    if ss is not None:
        try:
            c.wakeups = int(ss.split()[2])
        except (IndexError, ValueError):
            pass
    return c


@dataclass
class WorkerIoSamples:
    """The workers' I/O, one entry per sample of the watch (None: not measured at that sample)."""

    read_kib_s: list[float | None] = field(default_factory=list)  # rchar, KiB/s, all workers
    disk_read_kib_s: list[float | None] = field(default_factory=list)  # read_bytes, KiB/s, all workers
    io_wait_pct: list[float | None] = field(default_factory=list)  # blocked on block I/O, % of one core, all
    wakeups_s: list[float | None] = field(default_factory=list)  # times put on a core, per second, all workers


class WorkerIo:
    """Reads the counters of the module docstring for the worker processes the sampler found."""

    def __init__(self) -> None:
        self._last: dict[int, _Counters] = {}
        self._t = time.monotonic()
        self._tick = ticks_per_s()
        self.delayacct = delay_accounting()
        self._cols = WorkerIoSamples()
        self._lock = threading.Lock()

    def prime(self, pids: list[int]) -> None:
        """Start from the counters of the workers alive now (their past is not the interval's)."""
        self._last = {pid: _counters(pid) for pid in pids}
        self._t = time.monotonic()

    def sample(self, pids: list[int]) -> None:
        """One sample: the counters' growth since the previous one over every worker in ``pids``."""
        now = time.monotonic()
        wall = max(now - self._t, 1e-6)
        self._t = now
        seen: dict[int, _Counters] = {}
        sums: dict[str, float] = {}
        for pid in pids:
            c = seen[pid] = _counters(pid)
            before = self._last.get(pid, _Counters(0, 0, 0, 0))  # a new worker: its counters start at its birth
            for name in ("rchar", "read_bytes", "blkio_ticks", "wakeups"):
                now_v, was = getattr(c, name), getattr(before, name)
                if now_v is not None and was is not None:
                    sums[name] = sums.get(name, 0.0) + max(now_v - was, 0)
        self._last = seen

        def rate(name: str, scale: float) -> float | None:
            v = sums.get(name)
            return round(v * scale / wall, 2) if v is not None else None

        with self._lock:
            self._cols.read_kib_s.append(rate("rchar", 1 / 1024))
            self._cols.disk_read_kib_s.append(rate("read_bytes", 1 / 1024))
            self._cols.io_wait_pct.append(rate("blkio_ticks", 100 / self._tick) if self.delayacct else None)
            self._cols.wakeups_s.append(rate("wakeups", 1.0))

    def halve(self) -> None:
        """Keep every other sample (the sampler does the same to its own columns)."""
        with self._lock:
            c = self._cols
            self._cols = WorkerIoSamples(c.read_kib_s[::2], c.disk_read_kib_s[::2], c.io_wait_pct[::2],
                                         c.wakeups_s[::2])

    def snapshot(self) -> WorkerIoSamples:
        with self._lock:
            c = self._cols
            return WorkerIoSamples(list(c.read_kib_s), list(c.disk_read_kib_s), list(c.io_wait_pct),
                                   list(c.wakeups_s))

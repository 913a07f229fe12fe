"""The watch's sampler: a daemon thread that reads CPU (and, on a GPU, NVML) figures about once a second.

Everything here runs OFF the training thread: the training loop pays nothing
for it but the interpreter's lock for the few microseconds a sample takes
(a handful of small ``/proc`` reads once per ``interval`` seconds). The thread
is started by :meth:`Sampler.start` and joined by :meth:`Sampler.stop`; a
fork child (a DataLoader worker) never runs it: threads do not survive
``fork()``, and the child's copy of the sampler knows it is not its
process's (``_pid``), so it neither starts nor waits for one.

* CPU of the trainer: ``os.times()`` (user + system of every thread of the
  process), as a percentage of one core over the interval.
* The training thread's own time on a core and its time runnable but waiting for one
  (``/proc/<pid>/task/<tid>/schedstat`` of the thread that installed the watch, the one driving the steps),
  as percentages of the interval: what tells a job that slowed (more time on a core per step) from one that
  other processes kept off the cores (more time waiting for one; :mod:`gpuprof.capture.job.phases`).
* CPU of its workers: the trainer's child processes (DataLoader workers are
  forked or spawned by it), found through ``/proc/<pid>/task/*/children``
  (or, where the kernel lacks that file, a scan of ``/proc/*/stat`` for the
  parent id), each read from ``/proc/<child>/stat``; and their CPU *demand*,
  the time on a core plus the time runnable but waiting for one, from
  ``/proc/<child>/schedstat`` (a CPU-bound worker wants a whole core even
  when a busy machine gives it less). Not on systems without ``/proc``:
  those columns are None there.
* NVML (``nvidia-ml-py``, the ``watch`` extra), only when the capture uses
  CUDA: GPU utilisation, memory used, SM clock, power, throttle reasons of
  the device the trainer uses. Without the package, those columns are None.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from gpuprof.capture.checks.loader.workerio import WorkerIo, ticks_per_s
from gpuprof.capture.checks.loader.workerio import read_proc as _read
from gpuprof.report import JobSamples

__all__ = ["Sampler", "CpuReader", "Nvml", "open_nvml", "INTERVAL_S", "MAX_SAMPLES", "child_pids", "worker_pids"]

INTERVAL_S = 1.0
MAX_SAMPLES = 4096  # then every other sample is dropped and the interval doubles (bounded for any job length)


def _stat_fields(raw: bytes) -> list[bytes]:
    """The fields of /proc/<pid>/stat after the command name (which may hold spaces and parentheses)."""
    return raw[raw.rfind(b")") + 2:].split()


def _schedstat(path: str) -> tuple[int, int] | None:
    """(ns on a core, ns runnable and waiting for one) from a /proc schedstat file, or None."""
    raw = _read(path)
    f = raw.split() if raw is not None else []
    try:
        return int(f[0]), int(f[1])
    except (IndexError, ValueError):
        return None


def worker_pids(pid: int) -> list[int]:
    """The processes that can be ``pid``'s DataLoader workers: its children, less Python's multiprocessing helpers
    (the resource tracker), with a forkserver replaced by the processes it forked (forkserver-started workers)."""
    out: list[int] = []
    for c in child_pids(pid):
        cmd = _read(f"/proc/{c}/cmdline") or b""
        if b"multiprocessing.resource_tracker" in cmd:
            continue
        if b"multiprocessing.forkserver" in cmd:
            out += child_pids(c)
            continue
        out.append(c)
    return sorted(set(out))


def child_pids(pid: int) -> list[int]:
    """The child processes of ``pid`` (Linux /proc; [] elsewhere)."""
    tasks = f"/proc/{pid}/task"
    try:
        tids = os.listdir(tasks)
    except OSError:
        return []
    out: list[int] = []
    have_children_file = False
    for tid in tids:
        raw = _read(f"{tasks}/{tid}/children")
        if raw is None:
            continue
        have_children_file = True
        out += [int(x) for x in raw.split()]
    if have_children_file:
        return sorted(set(out))
    # kernels without CONFIG_PROC_CHILDREN: the parent id of every process
    found: list[int] = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = _read(f"/proc/{name}/stat")
            if st is not None:
                f = _stat_fields(st)
                if len(f) > 1 and f[1] == str(pid).encode():
                    found.append(int(name))
    return found


class CpuReader:
    """CPU seconds of this process and of its children, read again at each sample."""

    def __init__(self, pid: int | None = None, driver_tid: int | None = None) -> None:
        self.pid = pid if pid is not None else os.getpid()
        self.proc = os.path.isdir(f"/proc/{self.pid}")
        self._tick = ticks_per_s()
        self._last_self = self._self_s()
        self._driver = f"/proc/{self.pid}/task/{driver_tid}/schedstat" if driver_tid is not None and self.proc else None
        self._last_driver = self._driver_s()
        self._last_children: dict[int, float] = {}
        self._last_demand: dict[int, float] = {}
        self._last_t = time.monotonic()
        self.last_driver_pct: tuple[float | None, float | None] = (None, None)
        self.pids: list[int] = []  # the workers read at the last read (their I/O is read too: checks.loader.workerio)
        if self.proc:
            for c in worker_pids(self.pid):
                self.pids.append(c)
                s = self._child_s(c)
                if s is not None:
                    self._last_children[c] = s
                d = self._demand_s(c)
                if d is not None:
                    self._last_demand[c] = d

    def _self_s(self) -> float:
        t = os.times()
        return t.user + t.system

    def _child_s(self, pid: int) -> float | None:
        raw = _read(f"/proc/{pid}/stat")
        if raw is None:
            return None
        f = _stat_fields(raw)
        try:
            return (int(f[11]) + int(f[12])) / self._tick  # utime, stime (fields 14 and 15 of stat)
        except (IndexError, ValueError):
            return None

    def _demand_s(self, pid: int) -> float | None:
        """Seconds on a core plus seconds runnable and waiting for one (/proc/<pid>/schedstat)."""
        got = _schedstat(f"/proc/{pid}/schedstat")
        return None if got is None else (got[0] + got[1]) / 1e9

    def _driver_s(self) -> tuple[float, float] | None:
        """(seconds on a core, seconds runnable and waiting for one) of the driving thread, or None."""
        got = None if self._driver is None else _schedstat(self._driver)
        return None if got is None else (got[0] / 1e9, got[1] / 1e9)

    def driver(self, wall: float) -> tuple[float | None, float | None]:
        """(the driving thread's CPU %, its run-queue wait %) since the previous call; (None, None) without them."""
        now, last = self._driver_s(), self._last_driver
        self._last_driver = now
        if now is None or last is None:
            return None, None
        return (round(100.0 * max(now[0] - last[0], 0.0) / wall, 2), round(100.0 * max(now[1] - last[1], 0.0) / wall, 2))

    def read(self) -> tuple[float, float | None, float | None, int | None]:
        """(process CPU %, workers' CPU %, workers' CPU demand %, workers) since the previous read; 100 = one core.
        The driving thread's figures over the same interval are in :attr:`last_driver_pct` after it."""
        now = time.monotonic()
        wall = max(now - self._last_t, 1e-6)
        me = self._self_s()
        proc_pct = 100.0 * (me - self._last_self) / wall
        self._last_self, self._last_t = me, now
        self.last_driver_pct = self.driver(wall)
        if not self.proc:
            return proc_pct, None, None, None
        busy = want = 0.0
        seen: dict[int, float] = {}
        demand: dict[int, float] = {}
        for c in worker_pids(self.pid):
            s = self._child_s(c)
            if s is None:
                continue
            seen[c] = s
            busy += s - self._last_children.get(c, 0.0)  # a new child: all its CPU time is since the last read
            d = self._demand_s(c)
            if d is not None:
                demand[c] = d
                want += d - self._last_demand.get(c, 0.0)
        self._last_children, self._last_demand = seen, demand
        self.pids = list(seen)
        want_pct = 100.0 * max(want, 0.0) / wall if demand or not seen else None
        return proc_pct, 100.0 * max(busy, 0.0) / wall, want_pct, len(seen)


class Nvml(Protocol):
    """One device's NVML readings (:func:`open_nvml`)."""

    def read(self) -> tuple[float | None, float | None, float | None, float | None, int | None]: ...

    def close(self) -> None: ...


class _NvmlDevice:
    # ``nv``: the pynvml module (untyped, optional); only this class touches it
    def __init__(self, nv: Any, handle: object) -> None:
        self.nv = nv
        self.h = handle

    def _get(self, name: str, *args: object) -> object | None:
        fn = getattr(self.nv, name, None)
        if fn is None:
            return None
        try:
            return fn(self.h, *args)  # type: ignore[no-any-return]
        except Exception:  # noqa: BLE001 - a reading this GPU or driver does not support: that column is None
            return None

    def read(self) -> tuple[float | None, float | None, float | None, float | None, int | None]:
        util = self._get("nvmlDeviceGetUtilizationRates")
        mem = self._get("nvmlDeviceGetMemoryInfo")
        clock = self._get("nvmlDeviceGetClockInfo", getattr(self.nv, "NVML_CLOCK_SM", 1))
        power = self._get("nvmlDeviceGetPowerUsage")
        throttle = self._get("nvmlDeviceGetCurrentClocksEventReasons")
        if throttle is None:
            throttle = self._get("nvmlDeviceGetCurrentClocksThrottleReasons")
        return (float(util.gpu) if util is not None else None,  # type: ignore[attr-defined]
                float(mem.used) / 2**20 if mem is not None else None,  # type: ignore[attr-defined]
                float(clock) if isinstance(clock, (int, float)) else None,
                float(power) / 1000.0 if isinstance(power, (int, float)) else None,  # mW -> W
                int(throttle) if isinstance(throttle, int) else None)

    def close(self) -> None:
        with contextlib.suppress(Exception):  # shutting NVML down is best effort
            self.nv.nvmlShutdown()


def open_nvml(pci_bus_id: str | None, index: int) -> Nvml | None:
    """NVML for the trainer's device (by PCI bus id, else by index), or None without nvidia-ml-py or a driver."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no driver or library: the GPU columns are None
        return None
    try:
        if pci_bus_id:
            handle = pynvml.nvmlDeviceGetHandleByPciBusId(pci_bus_id)
        else:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    except Exception:  # noqa: BLE001
        _NvmlDevice(pynvml, None).close()
        return None
    return _NvmlDevice(pynvml, handle)


@dataclass
class _Columns:
    step: list[int] = field(default_factory=list)
    proc: list[float] = field(default_factory=list)
    workers_pct: list[float | None] = field(default_factory=list)
    demand_pct: list[float | None] = field(default_factory=list)
    workers: list[int | None] = field(default_factory=list)
    driver_cpu: list[float | None] = field(default_factory=list)
    driver_wait: list[float | None] = field(default_factory=list)
    gpu: list[tuple[float | None, float | None, float | None, float | None, int | None]] = field(default_factory=list)


class Sampler:
    """The daemon thread (module docstring). ``steps()`` tells it how many steps have completed."""

    def __init__(self, steps: Callable[[], int], interval_s: float = INTERVAL_S,
                 nvml: Callable[[], Nvml | None] | None = None, driver_tid: int | None = None) -> None:
        self.steps = steps
        self.driver_tid = driver_tid  # the native id of the thread driving the steps (None: not read)
        self.interval_s = interval_s
        self._nvml_open = nvml
        self._nvml: Nvml | None = None
        self._cols = _Columns()
        self.io = WorkerIo()  # the workers' reads, I/O wait and wake-ups (GP606's evidence)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()
        self.error: Exception | None = None  # a failure on the thread, handed to the training thread at stop()
        self.cpu_s = 0.0  # the thread's own CPU time, once it ended (bench/bench_watch.py reads it)
        self.gpu = False

    def use_nvml(self, opener: Callable[[], Nvml | None]) -> None:
        """Open NVML with ``opener`` on the sampler thread, at its next sample (once)."""
        self._nvml_open = opener

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        if self._thread is not None or os.getpid() != self._pid:
            return
        self._thread = threading.Thread(target=self._run, name="gpuprof-watch", daemon=True)
        self._thread.start()

    def stop(self) -> Exception | None:
        """Stop and join the thread (a last sample is taken first); returns its failure, if any."""
        t, self._thread = self._thread, None
        if t is not None and os.getpid() == self._pid:  # a fork child's copy has no thread to join
            self._stop.set()
            t.join()
        return self.error

    def _run(self) -> None:
        try:
            cpu = CpuReader(driver_tid=self.driver_tid)
            self.io.prime(cpu.pids)
            while not self._stop.wait(self.interval_s):
                self._open_nvml()
                self._sample(cpu)
            self._sample(cpu)  # the last part-interval, so a short job has one sample
        except Exception as err:  # noqa: BLE001 - kept; the training thread warns once at stop()
            self.error = err
        finally:
            if self._nvml is not None:
                self._nvml.close()
            self.cpu_s = time.thread_time()

    def _open_nvml(self) -> None:
        opener, self._nvml_open = self._nvml_open, None
        if opener is not None and self._nvml is None:
            self._nvml = opener()
            if self._nvml is not None:
                self.gpu = True  # the samples before this one hold None in the GPU columns

    def _sample(self, cpu: CpuReader) -> None:
        proc, workers_pct, demand_pct, workers = cpu.read()
        self.io.sample(cpu.pids)
        gpu = self._nvml.read() if self._nvml is not None else (None, None, None, None, None)
        with self._lock:
            c = self._cols
            c.step.append(self.steps())
            c.proc.append(round(proc, 2))
            c.workers_pct.append(round(workers_pct, 2) if workers_pct is not None else None)
            c.demand_pct.append(round(demand_pct, 2) if demand_pct is not None else None)
            c.workers.append(workers)
            c.driver_cpu.append(cpu.last_driver_pct[0])
            c.driver_wait.append(cpu.last_driver_pct[1])
            c.gpu.append(gpu)
            if len(c.step) > MAX_SAMPLES:  # keep the memory bounded: every other sample, twice the period
                self._cols = _Columns(c.step[::2], c.proc[::2], c.workers_pct[::2], c.demand_pct[::2], c.workers[::2],
                                      c.driver_cpu[::2], c.driver_wait[::2], c.gpu[::2])
                self.io.halve()
                self.interval_s *= 2

    def snapshot(self) -> JobSamples:
        """The samples so far (any thread)."""
        with self._lock:
            c = self._cols
            samples = JobSamples(interval_s=self.interval_s, step=list(c.step), process_cpu_pct=list(c.proc),
                                 workers_cpu_pct=list(c.workers_pct), workers_demand_pct=list(c.demand_pct),
                                 workers=list(c.workers))
            if any(v is not None for v in c.driver_wait):
                samples.thread_cpu_pct, samples.thread_wait_pct = list(c.driver_cpu), list(c.driver_wait)
            if self.gpu:
                samples.gpu_util_pct = [g[0] for g in c.gpu]
                samples.gpu_memory_used_mib = [round(g[1], 1) if g[1] is not None else None for g in c.gpu]
                samples.gpu_sm_clock_mhz = [g[2] for g in c.gpu]
                samples.gpu_power_w = [g[3] for g in c.gpu]
                samples.gpu_throttle_reasons = [g[4] for g in c.gpu]
            return samples

"""The watch's sampler (gpuprof/capture/job/sampler.py): CPU of the trainer and its children, bounded samples, NVML."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import types
from typing import Any

import pytest

from gpuprof.capture.job import sampler as S

linux = pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs Linux /proc")

BURN = "import time\nt = time.perf_counter()\nwhile time.perf_counter() - t < 30: pass\n"
SLEEP = "import time\ntime.sleep(30)\n"


def _child(code: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", code])


@linux
def test_child_pids_finds_our_children() -> None:
    kids = [_child(SLEEP), _child(SLEEP)]
    try:
        assert set(S.child_pids(os.getpid())) >= {k.pid for k in kids}
        assert S.child_pids(kids[0].pid) == []
    finally:
        for k in kids:
            k.kill()
            k.wait()


@linux
@pytest.mark.slow
def test_busy_and_idle_children_are_told_apart() -> None:
    """A child that spins wants a whole core (its demand, on a core or waiting for one); one that sleeps does not."""
    for code, busy in ((BURN, True), (SLEEP, False)):
        reader = S.CpuReader()
        kid = _child(code)
        try:
            time.sleep(2.0)
            proc, used, demand, workers = reader.read()
        finally:
            kid.kill()
            kid.wait()
        assert workers is not None and workers >= 1
        assert used is not None and demand is not None and demand >= used - 1.0
        if busy:
            assert demand > 60.0, (used, demand)  # about 100 over the interval; the interpreter's start-up too
        else:
            assert demand < 40.0 and used < 40.0, (used, demand)  # the start-up of python only


def test_process_cpu_is_measured() -> None:
    """The process's CPU over the interval covers at least what this thread burnt (a loaded machine may give it
    less than a core: the check is on CPU seconds, not on a percentage)."""
    reader = S.CpuReader()
    w0, c0 = time.monotonic(), time.thread_time()
    while time.thread_time() - c0 < 0.2:
        pass
    proc, *_ = reader.read()
    wall = time.monotonic() - w0
    assert proc / 100 * wall >= 0.2 - 0.02  # os.times() counts in clock ticks (10 ms)


@linux
def test_the_driving_threads_core_time_and_wait_are_read() -> None:
    """The thread that drives the steps: its time on a core over the interval covers what it burnt (CPU seconds,
    not a share a loaded machine moves), its wait is a share, and both are None for a thread /proc does not
    have (or no thread named)."""
    reader = S.CpuReader(driver_tid=threading.get_native_id())
    w0, c0 = time.monotonic(), time.thread_time()
    while time.thread_time() - c0 < 0.2:
        pass
    reader.read()
    wall = time.monotonic() - w0
    cpu, wait = reader.last_driver_pct
    assert cpu is not None and wait is not None
    assert cpu / 100 * wall >= 0.2 - 0.02 and 0.0 <= wait <= 100.0
    assert S.CpuReader(driver_tid=2**30).driver(1.0) == (None, None)
    assert S.CpuReader().driver(1.0) == (None, None)


@linux
def test_the_thread_figures_reach_the_samples() -> None:
    """Each sample holds the driving thread's figures beside the process's; a sampler told no thread has none."""
    s = S.Sampler(lambda: 3, interval_s=1.0, driver_tid=threading.get_native_id())
    reader = S.CpuReader(driver_tid=threading.get_native_id())
    for _ in range(3):
        s._sample(reader)
    snap = s.snapshot()
    assert snap.thread_cpu_pct is not None and snap.thread_wait_pct is not None
    assert len(snap.thread_cpu_pct) == len(snap.thread_wait_pct) == len(snap.step) == 3
    assert all(v is not None and v >= 0 for v in snap.thread_wait_pct)
    bare = S.Sampler(lambda: 3, interval_s=1.0)
    bare._sample(S.CpuReader())
    assert bare.snapshot().thread_wait_pct is None


def test_samples_stay_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(S, "MAX_SAMPLES", 8)
    steps = iter(range(10_000))
    s = S.Sampler(lambda: next(steps), interval_s=1.0)
    reader = S.CpuReader()
    for _ in range(40):
        s._sample(reader)
    snap = s.snapshot()
    assert len(snap.step) <= 8 and s.interval_s > 1.0  # every other sample dropped, the period doubled each time
    assert snap.step == sorted(snap.step) and snap.step[-1] == 39
    assert len(snap.process_cpu_pct) == len(snap.workers_cpu_pct) == len(snap.workers) == len(snap.step)


def test_thread_is_joined_and_reports_its_failure() -> None:
    checked = threading.Event()

    def boom() -> int:
        checked.wait(10)  # fail only once the test has seen the thread run (a busy machine ran it first)
        raise RuntimeError("step counter failed")

    s = S.Sampler(boom, interval_s=0.01)
    s.start()
    assert s.running
    checked.set()
    err = s.stop()
    assert not s.running and isinstance(err, RuntimeError)
    assert not [t for t in threading.enumerate() if t.name == "gpuprof-watch"]


def test_stop_in_a_fork_child_does_not_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    s = S.Sampler(lambda: 0, interval_s=10.0)
    s.start()
    thread = s._thread
    assert thread is not None
    with monkeypatch.context() as m:
        m.setattr(S.os, "getpid", lambda: -1)  # as in a fork child: the thread is not this process's
        assert s.stop() is None
        # nothing waited for (no clock: a busy machine may stretch any bound): the thread was neither told to
        # stop nor joined, so it is still alive in its 10 s wait
        assert thread.is_alive() and not s._stop.is_set()
        copy = S.Sampler(lambda: 0)
        copy._pid = 12345
        copy.start()  # a copy made before a fork never starts a thread
        assert not copy.running
    s._stop.set()  # this test's own thread: ended and joined here
    thread.join(timeout=5)
    assert not thread.is_alive()


def _fake_pynvml(monkeypatch: pytest.MonkeyPatch, fail: set[str] = frozenset()) -> list[str]:  # type: ignore[assignment]
    calls: list[str] = []

    def f(name: str, value: Any) -> Any:
        def call(*args: Any) -> Any:
            calls.append(name)
            if name in fail:
                raise RuntimeError(name)
            return value
        return call

    mod = types.SimpleNamespace(
        nvmlInit=f("init", None), nvmlShutdown=f("shutdown", None),
        nvmlDeviceGetHandleByPciBusId=f("bus", "h"), nvmlDeviceGetHandleByIndex=f("index", "h"),
        nvmlDeviceGetUtilizationRates=f("util", types.SimpleNamespace(gpu=87)),
        nvmlDeviceGetMemoryInfo=f("mem", types.SimpleNamespace(used=3 * 2**30)),
        nvmlDeviceGetClockInfo=f("clock", 1410), NVML_CLOCK_SM=1,
        nvmlDeviceGetPowerUsage=f("power", 250_500),
        nvmlDeviceGetCurrentClocksEventReasons=f("reasons", 4),
    )
    monkeypatch.setitem(sys.modules, "pynvml", mod)
    return calls


def test_nvml_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _fake_pynvml(monkeypatch)
    dev = S.open_nvml("00000000:3B:00.0", 0)
    assert dev is not None and calls[:2] == ["init", "bus"]
    assert dev.read() == (87.0, 3072.0, 1410.0, 250.5, 4)
    steps = iter(range(100))
    s = S.Sampler(lambda: next(steps), interval_s=1.0)
    reader = S.CpuReader()
    s._sample(reader)  # before the first step: no NVML yet
    s.use_nvml(lambda: dev)
    s._open_nvml()
    s._sample(reader)
    snap = s.snapshot()
    assert snap.gpu_util_pct == [None, 87.0] and snap.gpu_power_w == [None, 250.5]
    assert snap.gpu_throttle_reasons == [None, 4] and snap.gpu_memory_used_mib == [None, 3072.0]


def test_nvml_readings_a_driver_lacks_are_null(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_pynvml(monkeypatch, fail={"power", "reasons"})
    dev = S.open_nvml(None, 0)
    assert dev is not None
    util, mem, clock, power, reasons = dev.read()
    assert util == 87.0 and power is None and reasons is None


def test_no_nvml_without_the_package_or_a_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # not installed
    assert S.open_nvml(None, 0) is None
    _fake_pynvml(monkeypatch, fail={"init"})  # installed, no driver
    assert S.open_nvml(None, 0) is None


def test_python_multiprocessing_helpers_are_not_workers() -> None:
    """The resource tracker (and a forkserver itself) are children of the trainer but never DataLoader workers."""
    import multiprocessing.resource_tracker as rt
    import subprocess
    import sys

    from gpuprof.capture.job.sampler import child_pids, worker_pids

    rt.ensure_running()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        tracker = rt._resource_tracker._pid
        assert tracker in child_pids(os.getpid())  # a child, as the CI run's worker count showed
        assert tracker not in worker_pids(os.getpid()) and child.pid in worker_pids(os.getpid())
    finally:
        child.kill()
        child.wait()

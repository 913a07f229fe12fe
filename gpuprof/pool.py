"""The ``--jobs`` worker pool: used only where it pays, and leaving nothing behind when its parent dies.

**Where it pays.** Without an explicit ``--jobs`` (:func:`workers_for` with
``jobs=None``) the traces are analysed in this process unless they hold at
least ``POOL_MIN_BYTES`` (32 MiB) of JSON text (a gzip file counts
``GZIP_GUESS`` times its size: the text is unknown until read), and then
with one worker per ``BYTES_PER_WORKER`` (16 MiB) of text at most, and no
more workers than there are *free* CPUs (:func:`free_cpus`: the usable CPUs,
cgroup quota included, less those other processes keep busy; at least one).
A URL (:mod:`gpuprof.remote`) counts as ``POOL_MIN_BYTES``: reading over the
network, processes pay for themselves sooner. An input of unknown size (a
pipe) is read here, one by one. An explicit ``--jobs N`` is the user's
choice and is followed (at most one worker per file).

The pool's fixed cost decides the threshold. Where this process has a single
Python thread and no torch (the command line: :func:`_single_threaded`), the
workers are plain ``fork`` children: they share the modules already
imported and start in ~20-40 ms in all, plus ~30 ms of warm-up each
(measured on the shared two-core VM, where the analysis runs at ~60 MB/s: 32
MiB is ~0.5 s of work, of which two workers save ~0.2 s). A process with
other threads (torch's, a caller's, where a fork could copy a lock held)
gets a ``forkserver`` instead, a fresh process that imports the analysis
once and forks the workers from itself: ~0.65 s more, so its threshold is
``FORKSERVER_MIN_BYTES`` (128 MiB). Each rank then costs the pool a fixed
amount: one task sent, and back its trace summary (~170 kB, whatever the
trace's size) and its rank summary (a few hundred bytes per collective),
never the trace.

**Nothing behind.** A CI timeout or the OOM killer may SIGTERM or SIGKILL
``gpuprof analyze`` while its workers run or sleep on the call queue: they
would run on (100 MB each), and with a forkserver keep multiprocessing's
resource tracker, and the POSIX semaphores it would unlink in ``/dev/shm``,
alive. Each worker watches the parent from its first moment
(:func:`_watch_parent`: a pidfd, readable when the parent exits; polling
where there is none) and exits when it goes; on Linux it also asks the kernel
for SIGKILL when its own parent (this process, or the forkserver, which exits
with it) dies (``PR_SET_PDEATHSIG``). ``fork`` workers use semaphores that
are unlinked as they are made, so no ``/dev/shm`` file exists to leak; with a
forkserver, once the workers are gone the resource tracker sees its last user
leave and unlinks them. Workers are always joined (``shutdown(wait=True)``,
also when a result raises), so no zombie outlives the call.

**Nothing hangs.** A worker stopped by SIGSTOP (or a debugger), or blocked
in a read that never returns, would keep its result from coming forever.
While waiting, the pool reads each worker's CPU time (``/proc``); when for
``STALL_S`` seconds (``GPUPROF_WORKER_STALL_S``) no trace finished and no
worker used CPU, it raises :class:`WorkerStalled` (one line naming the
stopped workers and the traces still waited for) and ends the workers:
SIGTERM, then SIGCONT, which a stopped process needs to act on it.
"""

from __future__ import annotations

import os
import signal
import stat
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from gpuprof.errors import GpuprofError
from gpuprof.limits import env_seconds

if TYPE_CHECKING:  # pragma: no cover
    from multiprocessing.context import BaseContext

__all__ = ["workers_for", "run_pool", "affinity_cpus", "free_cpus", "stall_timeout", "WorkerStalled", "STALL_S", "STALL_ENV", "POOL_MIN_BYTES", "FORKSERVER_MIN_BYTES", "BYTES_PER_WORKER",
           "GZIP_GUESS"]

POOL_MIN_BYTES = 32 << 20  # JSON text below which fork workers save too little (< ~0.2 s) to be worth it
FORKSERVER_MIN_BYTES = 128 << 20  # the same where a forkserver must start (~0.65 s more)
BYTES_PER_WORKER = 16 << 20  # no worker for less than this much text
GZIP_GUESS = 8  # profiler traces gzip 10-30x; counting 8x errs towards reading one by one

_PR_SET_PDEATHSIG = 1
STALL_S = 60.0  # seconds with no trace finished and no worker using CPU before the pool gives up
STALL_ENV = "GPUPROF_WORKER_STALL_S"


def affinity_cpus() -> int:
    """The CPUs this process may run on (its affinity; the machine's count where there is none), at least 1:
    the default number of processes for analysing several traces and for ``gpuprof try``'s trials."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _cpus() -> int:
    n = affinity_cpus()
    return min(n, _cgroup_cpus() or n)


def _cgroup_cpus() -> int | None:
    """The CPUs a cgroup v2 quota allows (``cpu.max``, a container's ``--cpus``), rounded up; None: no quota."""
    try:
        with open("/sys/fs/cgroup/cpu.max", encoding="ascii") as fh:
            quota, period = fh.read().split()[:2]
        return None if quota == "max" else max(1, -(-int(quota) // int(period)))
    except (OSError, ValueError):
        return None


def free_cpus() -> int:
    """The usable CPUs not already busy (at least one): usable CPUs less :func:`_busy_cpus`.

    Load is machine-wide: on a shared machine (or in a container whose host is
    busy) this errs towards fewer workers, which costs time, never a result.
    """
    cpus = _cpus()
    busy = _busy_cpus()
    if busy is None:
        return cpus
    host = affinity_cpus()  # the load counts the CPUs we may run on, not a quota
    return max(1, min(cpus, host - busy))


def _busy_cpus() -> int | None:
    """CPUs other processes keep busy: the whole runnable processes of the 1-minute load average, but no
    more than are runnable right now (the average lags: it still counts a run that just ended, our own
    previous one say). None: unknown (not Linux)."""
    try:
        with open("/proc/loadavg", encoding="ascii") as fh:
            fields = fh.read().split()
        running_now = int(fields[3].split("/")[0]) - 1  # less this process, which is running to read it
        return max(0, min(int(float(fields[0])), running_now))
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.getloadavg()[0])
    except (AttributeError, OSError):
        return None


def _text_bytes(path: Any) -> int | None:
    """A file's JSON text as the pool counts it; None when unknown (a pipe, standard input)."""
    if not isinstance(path, Path):
        return POOL_MIN_BYTES  # a URL: read over the network, where processes pay (its size is not asked for)
    try:
        st = os.stat(path)
    except OSError:
        return None  # vanished, or standard input: the serial read says what it is
    if not stat.S_ISREG(st.st_mode):
        return None  # a pipe: its size is unknown until read
    return st.st_size * GZIP_GUESS if path.name.endswith(".gz") else st.st_size


def workers_for(files: Sequence[Any], jobs: int | None, free: int | None = None) -> int:
    """How many processes to analyse ``files`` with (1: no pool).

    ``jobs=None``: decide by size and free CPUs (``free``, default :func:`free_cpus`).
    """
    if len(files) < 2:
        return 1
    if jobs is not None:
        return max(1, min(jobs, len(files)))
    sizes = [_text_bytes(f) for f in files]
    if any(s is None for s in sizes):  # a pipe or a vanished file: read where it is named, one by one
        return 1
    total = sum(s for s in sizes if s is not None)
    if total < (POOL_MIN_BYTES if _single_threaded() else FORKSERVER_MIN_BYTES):
        return 1
    return max(1, min(free if free is not None else free_cpus(), len(files), total // BYTES_PER_WORKER))


def run_pool(fn: Callable[..., Any], items: Sequence[Any], workers: int, args: tuple[Any, ...] = ()) -> list[Any]:
    """``[fn(item, *args) for item in items]`` on ``workers`` processes; results in order.

    Raises what a worker raised, ``BrokenProcessPool`` (a ``RuntimeError``)
    when one died, or :class:`WorkerStalled` when none made progress for
    :func:`stall_timeout` seconds. The workers are joined before this returns or raises.
    """
    import concurrent.futures as cf

    pool = cf.ProcessPoolExecutor(max_workers=workers, mp_context=_context(), initializer=_watch_parent,
                                  initargs=(os.getpid(),))
    try:
        futures = [pool.submit(fn, item, *args) for item in items]
        _wait_watching(pool, futures, items, stall_timeout())
        return [fu.result() for fu in futures]
    except BaseException:  # Ctrl-C, a worker's error: the rest of the work is not wanted, do not wait for it
        _terminate(pool)
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _terminate(pool: Any) -> None:
    """SIGTERM the pool's live workers, then SIGCONT (a stopped one acts on the SIGTERM only once continued),
    so the shutdown that follows can join them."""
    for proc in _workers(pool):
        try:
            proc.terminate()
            if proc.pid is not None:
                os.kill(proc.pid, signal.SIGCONT)
        except (OSError, ValueError, AttributeError):
            continue  # already gone or closed


def _workers(pool: Any) -> list[Any]:
    procs = getattr(pool, "_processes", None) or {}  # concurrent.futures keeps no public list of them
    return list(procs.values())


class WorkerStalled(GpuprofError):
    """No worker of the pool made progress for :func:`stall_timeout` seconds (stopped, or blocked): one line, exit 2."""


def stall_timeout() -> float:
    """Seconds the pool waits while no worker uses CPU and no trace completes: ``GPUPROF_WORKER_STALL_S`` or
    :data:`STALL_S`."""
    return env_seconds(STALL_ENV, STALL_S)


def _wait_watching(pool: Any, futures: list[Any], items: Sequence[Any], timeout: float) -> None:
    """Wait for ``futures``; :class:`WorkerStalled` when for ``timeout`` s no trace completed and no worker used CPU.

    A worker analysing a trace always uses CPU or is runnable (state ``R``: on
    a loaded machine it may wait for a core for longer than the limit); one
    that does neither for that long is stopped (SIGSTOP, a debugger) or
    blocked (a read that never returns), and waiting on it would hang the
    command. Progress is read from
    ``/proc/PID/stat`` (CPU ticks and state), so where there is no ``/proc``
    nothing is judged. A pause of this process itself (Ctrl-Z, then ``fg``:
    the whole job stopped together) starts the wait again.
    """
    import concurrent.futures as cf

    poll = min(1.0, timeout / 4)
    pending = set(futures)
    last_progress = last_poll = time.monotonic()
    seen: dict[int, int | None] = {}
    while pending:
        done, pending = cf.wait(pending, timeout=poll, return_when=cf.FIRST_COMPLETED)
        now = time.monotonic()
        ticks = {p.pid: _cpu_ticks(p.pid) for p in _workers(pool) if p.pid is not None}
        if done or now - last_poll > max(5.0, 5 * poll) or ticks != seen or None in ticks.values() \
                or any(_state(pid) == "R" for pid in ticks):
            # a trace done, this process paused, a worker that ran or is runnable (at work, waiting for a core
            # on a busy machine: its CPU time does not move, but it is no stall), or no /proc to tell
            last_progress, seen = now, ticks
        last_poll = now
        if pending and now - last_progress >= timeout:
            raise WorkerStalled(_stall_message(ticks, futures, pending, items, timeout))


def _stall_message(ticks: dict[int, int | None], futures: list[Any], pending: set[Any], items: Sequence[Any],
                   timeout: float) -> str:
    from gpuprof.redact import redact as shown  # a URL with its credentials masked

    stopped = [pid for pid in ticks if _state(pid) in ("T", "t")]
    waiting = [shown(str(items[i])) for i, fu in enumerate(futures) if fu in pending]
    names = ", ".join(waiting[:3]) + (f" and {len(waiting) - 3} more" if len(waiting) > 3 else "")
    why = (f"worker process{'es' if len(stopped) > 1 else ''} {', '.join(map(str, stopped))} "
           f"{'are' if len(stopped) > 1 else 'is'} stopped (SIGSTOP or a debugger)" if stopped
           else "no worker process used any CPU")
    return (f"--jobs: {why} and no trace was finished for {timeout:g} s; gave up waiting for {names} "
            f"({STALL_ENV} sets the wait)")


def _proc_stat(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            return fh.read().rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
    except (OSError, IndexError):
        return None


def _cpu_ticks(pid: int) -> int | None:
    """utime + stime of ``pid`` in clock ticks; None where unknown (no /proc, gone)."""
    fields = _proc_stat(pid)
    try:
        return int(fields[11]) + int(fields[12]) if fields else None
    except (ValueError, IndexError):
        return None


def _state(pid: int) -> str | None:
    fields = _proc_stat(pid)
    return fields[0] if fields else None


def _context() -> BaseContext:
    """``fork`` where this process has one thread (cheap, safe); else a preloaded ``forkserver``."""
    import multiprocessing

    methods = multiprocessing.get_all_start_methods()
    if "fork" in methods and _single_threaded():
        return multiprocessing.get_context("fork")
    if "forkserver" not in methods:  # Windows
        return multiprocessing.get_context("spawn")
    # a thread (torch's, a caller's) may hold a lock a plain fork would copy held: fork from a fresh
    # process instead, preloaded so each worker starts in milliseconds
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["gpuprof.analysis", "gpuprof.pool"])
    return ctx


def _single_threaded() -> bool:
    """True when a plain fork is safe here: one Python thread, and no torch (whose thread pools and CUDA state
    are the documented fork hazards). Native threads of numpy's BLAS sleep and re-arm at fork (atfork)."""
    return threading.active_count() == 1 and "torch" not in sys.modules
def _watch_parent(parent: int) -> None:
    """(In a worker.) Exit as soon as ``parent`` is gone, whatever it died of."""
    # the parent's SIGINT handling (Ctrl-C reaches the whole process group) is the parent's: a worker
    # stopped by it would only turn a clean "interrupted" into a broken-pool note
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        _pdeathsig()
    try:
        fd: int | None = os.pidfd_open(parent)
    except (AttributeError, OSError):
        fd = None  # no pidfd (old kernel, not Linux): poll
    if not _alive(parent):  # died before the watch began
        os._exit(1)
    threading.Thread(target=_wait_for_exit, args=(parent, fd), name="gpuprof-parent-watch", daemon=True).start()


def _wait_for_exit(parent: int, fd: int | None) -> None:
    import select

    if fd is not None:
        select.select([fd], [], [])  # a pidfd turns readable when the process exits
    else:
        import time

        while _alive(parent):
            time.sleep(0.5)
    os._exit(1)  # no cleanup to run: the parent that wanted the results is gone


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _pdeathsig() -> None:
    """Ask the kernel to SIGKILL this process when its parent (this one's forker) exits."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):
        pass  # the pidfd watch alone then; nothing to report from a worker

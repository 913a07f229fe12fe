"""The ``--jobs`` worker pool: used only where it pays, and leaving nothing behind when its parent dies.

**Where it pays.** A pool has a fixed cost: a forkserver, one process per
worker, the analysis modules imported once (``set_forkserver_preload``), the
results pickled back: 1.3 s measured on the shared two-core VM (8 small
rank traces: 1.5-1.7 s with ``-j 1``, 2.0-3.5 s with ``-j 2``), what
analysing ~130 MB of trace text costs there. Two workers save half the
serial time, so they pay from about twice that. So without an explicit
``--jobs`` (:func:`workers_for` with ``jobs=None``) the pool is used only
when the files hold at least ``POOL_MIN_BYTES`` of JSON text (a gzip file
counts ``GZIP_GUESS`` times its size: the text is unknown until read) and
there are two CPUs or more; each worker gets at least ``BYTES_PER_WORKER``;
a URL (:mod:`gpuprof.remote`) counts as ``POOL_MIN_BYTES``: reading over the
network, processes pay for themselves sooner.
Eight small rank traces are read one by one. An explicit ``--jobs N`` is
the user's choice and is followed (at most one worker per file).

**Nothing behind.** A CI timeout or the OOM killer may SIGTERM or SIGKILL
``gpuprof analyze`` while its workers sleep on the call queue: they would
sleep forever (100 MB each) and keep multiprocessing's resource tracker,
and the POSIX semaphores it would unlink in ``/dev/shm``, alive. Each worker
watches the parent from its first moment (:func:`_watch_parent`: a pidfd,
readable when the parent exits; polling where there is none) and exits when
it goes; on Linux it also asks the kernel for SIGKILL when its own parent,
the forkserver (which exits with the parent), dies (``PR_SET_PDEATHSIG``).
Once the workers are gone, the resource tracker sees its last user leave and
unlinks the semaphores. Workers are always joined (``shutdown(wait=True)``,
also when a result raises), so no zombie outlives the call.
"""

from __future__ import annotations

import os
import signal
import stat
import sys
import threading
from pathlib import Path
from typing import Any, Callable, Sequence

__all__ = ["workers_for", "run_pool", "POOL_MIN_BYTES", "BYTES_PER_WORKER", "GZIP_GUESS"]

POOL_MIN_BYTES = 256 << 20  # JSON text below which the pool costs more than it saves
BYTES_PER_WORKER = 64 << 20  # no worker for less than this much text
GZIP_GUESS = 8  # profiler traces gzip 10-30x; counting 8x errs towards reading one by one

_PR_SET_PDEATHSIG = 1


def _cpus() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


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


def workers_for(files: Sequence[Any], jobs: int | None) -> int:
    """How many processes to analyse ``files`` with (1: no pool). ``jobs=None``: decide by size and CPUs."""
    if len(files) < 2:
        return 1
    if jobs is not None:
        return max(1, min(jobs, len(files)))
    sizes = [_text_bytes(f) for f in files]
    if any(s is None for s in sizes):  # a pipe or a vanished file: read where it is named, one by one
        return 1
    total = sum(s for s in sizes if s is not None)
    if total < POOL_MIN_BYTES:
        return 1
    return max(1, min(_cpus(), len(files), total // BYTES_PER_WORKER))


def run_pool(fn: Callable[..., Any], items: Sequence[Any], workers: int, args: tuple[Any, ...] = ()) -> list[Any]:
    """``[fn(item, *args) for item in items]`` on ``workers`` processes; results in order.

    Raises what a worker raised, or ``BrokenProcessPool`` (a ``RuntimeError``)
    when one died. The workers are joined before this returns or raises.
    """
    import concurrent.futures as cf
    import multiprocessing

    # forkserver: workers forked from a fresh process, not from this one, which may hold threads
    # (torch's, a caller's) that make a plain fork crash or hang; preloaded so each starts in milliseconds
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["gpuprof.analysis", "gpuprof.pool"])
    pool = cf.ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_watch_parent,
                                  initargs=(os.getpid(),))
    try:
        futures = [pool.submit(fn, item, *args) for item in items]
        return [fu.result() for fu in futures]
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _watch_parent(parent: int) -> None:
    """(In a worker.) Exit as soon as ``parent`` is gone, whatever it died of."""
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
    """Ask the kernel to SIGKILL this process when its parent (the forkserver) exits."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):
        pass  # the pidfd watch alone then; nothing to report from a worker

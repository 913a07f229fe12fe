"""Analyses done once, off the request threads: a cache keyed by file and mtime, filled by one worker.

A request never analyses anything itself: it asks :meth:`Store.get` for a
key, gets the result when it is known and current, and otherwise gets
``None`` while the job is queued (or already running) on the worker; the
page polls. So a 500 MB trace being analysed never holds up the listing of
runs, another run's page or TensorBoard's own tabs (the worker is a Python
thread: it shares the GIL, which the interpreter hands over every few
milliseconds, so requests are slower meanwhile but never wait for it).

One worker thread, on purpose: analyses are CPU-bound Python, two at once
would take as long as two in a row while using twice the memory. It is a
daemon thread: stopping TensorBoard (Ctrl+C) never waits for an analysis
of a big trace to finish (a ``ThreadPoolExecutor`` would join it at exit).

A key's **signature** (the files' size and mtime, see
:func:`gpuprof.tbplugin.runs.file_sig`) says whether a cached result is
current; a changed file is analysed again. A job that fails caches its
one-line error under the same signature (an unreadable trace is not retried
at every poll, only when the file changes). Entries beyond ``capacity`` are
dropped least recently used first.

**Time budget.** One job may take at most ``budget_s`` seconds
(``GPUPROF_TB_ANALYSIS_SECONDS``, default 600): past it, the next request
that asks the store finds the job overdue, caches a one-line error for it
(under its signature: retried only when the file changes), asks it to stop
(:func:`check_cancelled`, which the loaders call between chunks, raises in
the job's thread) and starts a fresh worker for the queue. A Python thread
cannot be killed, so an overdue job that never reaches a check runs on in
the background, but no later run waits for it.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Hashable

from gpuprof.errors import GpuprofError

__all__ = ["Store", "Result", "check_cancelled", "AnalysisCancelled", "DEFAULT_BUDGET_S"]

log = logging.getLogger(__name__)

DEFAULT_BUDGET_S = 600.0  # a 1 GB trace takes about 20 s; ten minutes is a stuck or hostile file
_local = threading.local()


def _budget_from_env() -> float:
    try:
        v = float(os.environ.get("GPUPROF_TB_ANALYSIS_SECONDS", DEFAULT_BUDGET_S))
    except ValueError:
        return DEFAULT_BUDGET_S  # a typo must not lift the budget
    return v if v > 0 and v == v else DEFAULT_BUDGET_S


class AnalysisCancelled(GpuprofError):
    """The job ran past its time budget; raised in its own thread at its next check."""


def check_cancelled() -> None:
    """Raise :class:`AnalysisCancelled` when the job running on this thread is past its budget."""
    job = getattr(_local, "job", None)
    if job is not None and job.cancelled.is_set():
        raise AnalysisCancelled(f"analysis stopped after {job.budget_s:g} s")


@dataclass
class _Running:
    key: Hashable
    signature: Hashable
    started: float
    budget_s: float
    cancelled: threading.Event
    worker: threading.Thread


class Result:
    """A finished job: ``value`` or, when it failed, ``error`` (one line)."""

    __slots__ = ("value", "error")

    def __init__(self, value: Any = None, error: str | None = None) -> None:
        self.value = value
        self.error = error


class Store:
    def __init__(self, capacity: int = 64, budget_s: float | None = None) -> None:
        self._capacity = capacity
        self._budget_s = _budget_from_env() if budget_s is None else budget_s
        self._lock = threading.Lock()
        self._done: OrderedDict[Hashable, tuple[Hashable, Result]] = OrderedDict()
        self._running: dict[Hashable, Hashable] = {}  # key -> signature queued or being analysed
        self._jobs: queue.SimpleQueue[tuple[Hashable, Hashable, Callable[[], Any]] | None] = queue.SimpleQueue()
        self._current: _Running | None = None  # the job the live worker is on
        self.abandoned = 0  # overdue jobs left behind (each started a fresh worker)
        self._worker = self._start_worker()

    def _start_worker(self) -> threading.Thread:
        t = threading.Thread(target=self._work, name="gpuprof-tb-analysis", daemon=True)
        t.start()
        return t

    def get(self, key: Hashable, signature: Hashable, job: Callable[[], Any]) -> Result | None:
        """The result of ``job`` for ``key`` at ``signature``, or ``None`` while it is being computed."""
        with self._lock:
            self._reap_overdue()
            hit = self._done.get(key)
            if hit is not None and hit[0] == signature:
                self._done.move_to_end(key)
                return hit[1]
            if self._running.get(key) == signature:
                return None
            self._running[key] = signature
            self._jobs.put((key, signature, job))
            return None

    def _reap_overdue(self) -> None:
        """(Lock held.) The running job past its budget: its error cached, it told to stop, a new worker started."""
        cur = self._current
        if cur is None or time.monotonic() - cur.started <= cur.budget_s:
            return
        cur.cancelled.set()
        self._current = None
        self.abandoned += 1
        if self._running.get(cur.key) == cur.signature:
            del self._running[cur.key]
        self._store(cur.key, cur.signature, Result(error=f"{_name(cur.key)}: analysis took longer than "
                                                         f"{cur.budget_s:g} s and was stopped (set "
                                                         "GPUPROF_TB_ANALYSIS_SECONDS to allow more)"))
        log.warning("gpuprof TensorBoard plugin: analysis of %r passed its %g s budget; the queue goes on",
                    cur.key, cur.budget_s)
        self._worker = self._start_worker()

    def _work(self) -> None:
        me = threading.current_thread()
        while (item := self._jobs.get()) is not None:
            key, signature, job = item
            cancelled = threading.Event()
            with self._lock:
                self._current = _Running(key, signature, time.monotonic(), self._budget_s, cancelled, me)
            _local.job = self._current
            self._run(key, signature, job, cancelled)
            with self._lock:
                if self._worker is not me:
                    return  # this worker was left behind for an overdue job; a fresh one has the queue
                self._current = None

    def _run(self, key: Hashable, signature: Hashable, job: Callable[[], Any], cancelled: threading.Event) -> None:
        try:
            result = Result(value=job())
        except GpuprofError as err:  # bad input, a rule that raised: the page shows the one-line reason
            result = Result(error=str(err))
        except Exception as err:  # noqa: BLE001 - a gpuprof bug: shown on the page and logged whole, never dropped
            log.exception("gpuprof TensorBoard plugin: analysis of %r failed", key)
            result = Result(error=f"internal error in gpuprof ({type(err).__name__}: {err}); please report it")
        with self._lock:
            if cancelled.is_set():
                return  # overdue: its error is cached already, and a newer job may own the key now
            if self._running.get(key) == signature:
                del self._running[key]
            self._store(key, signature, result)

    def _store(self, key: Hashable, signature: Hashable, result: Result) -> None:
        self._done[key] = (signature, result)
        self._done.move_to_end(key)
        while len(self._done) > self._capacity:
            self._done.popitem(last=False)

    @property
    def budget_s(self) -> float:
        """The time one job may take (seconds)."""
        return self._budget_s

    def pending(self) -> int:
        with self._lock:
            self._reap_overdue()
            return len(self._running)

    def close(self) -> None:
        """Stop the worker after the job it is on (queued jobs before it run first)."""
        self._jobs.put(None)


def _name(key: Hashable) -> str:
    """A job key's file, for the error line: ``("trace", "/logdir/run/x.json")`` -> the path."""
    if isinstance(key, tuple) and key and isinstance(key[-1], str):
        return key[-1]
    return str(key)

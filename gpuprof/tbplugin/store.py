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
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import OrderedDict
from typing import Any, Callable, Hashable

from gpuprof.errors import GpuprofError

__all__ = ["Store", "Result"]

log = logging.getLogger(__name__)


class Result:
    """A finished job: ``value`` or, when it failed, ``error`` (one line)."""

    __slots__ = ("value", "error")

    def __init__(self, value: Any = None, error: str | None = None) -> None:
        self.value = value
        self.error = error


class Store:
    def __init__(self, capacity: int = 64) -> None:
        self._capacity = capacity
        self._lock = threading.Lock()
        self._done: OrderedDict[Hashable, tuple[Hashable, Result]] = OrderedDict()
        self._running: dict[Hashable, Hashable] = {}  # key -> signature queued or being analysed
        self._jobs: queue.SimpleQueue[tuple[Hashable, Hashable, Callable[[], Any]] | None] = queue.SimpleQueue()
        self._worker = threading.Thread(target=self._work, name="gpuprof-tb-analysis", daemon=True)
        self._worker.start()

    def get(self, key: Hashable, signature: Hashable, job: Callable[[], Any]) -> Result | None:
        """The result of ``job`` for ``key`` at ``signature``, or ``None`` while it is being computed."""
        with self._lock:
            hit = self._done.get(key)
            if hit is not None and hit[0] == signature:
                self._done.move_to_end(key)
                return hit[1]
            if self._running.get(key) == signature:
                return None
            self._running[key] = signature
            self._jobs.put((key, signature, job))
            return None

    def _work(self) -> None:
        while (item := self._jobs.get()) is not None:
            self._run(*item)

    def _run(self, key: Hashable, signature: Hashable, job: Callable[[], Any]) -> None:
        try:
            result = Result(value=job())
        except GpuprofError as err:  # bad input, a rule that raised: the page shows the one-line reason
            result = Result(error=str(err))
        except Exception as err:  # noqa: BLE001 - a gpuprof bug: shown on the page and logged whole, never dropped
            log.exception("gpuprof TensorBoard plugin: analysis of %r failed", key)
            result = Result(error=f"internal error in gpuprof ({type(err).__name__}: {err}); please report it")
        with self._lock:
            if self._running.get(key) == signature:
                del self._running[key]
            self._done[key] = (signature, result)
            self._done.move_to_end(key)
            while len(self._done) > self._capacity:
                self._done.popitem(last=False)

    def pending(self) -> int:
        with self._lock:
            return len(self._running)

    def close(self) -> None:
        """Stop the worker after the job it is on (queued jobs before it run first)."""
        self._jobs.put(None)

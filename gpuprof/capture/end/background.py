"""The window report, written on a background thread while the run goes on.

When the schedule's last recorded window closes, the session copies its
facts (:class:`~gpuprof.capture.run.RunFacts`, on the driving thread) and
:meth:`WindowReporter.start` hands them to a daemon thread that analyses the
traces, writes report.json/report.md and the TensorBoard text, and prints the
summary. Its failures are kept (:class:`~gpuprof.capture.guard.DeferredGuard`)
and warned about on the driving thread, once each, at a later ``step()`` or at
``stop()``, which waits for the thread at most ``REPORT_WAIT_S``.
"""

from __future__ import annotations

import threading

from gpuprof.capture.end.publish import Outputs, window_report
from gpuprof.capture.guard import DeferredGuard, Guard
from gpuprof.capture.run import RunFacts
from gpuprof.report import Report

__all__ = ["REPORT_WAIT_S", "WindowReporter"]

REPORT_WAIT_S = 60.0  # how long the end of the run waits for the window report's thread


class WindowReporter:
    """At most one background window report per capture."""

    def __init__(self, guard: Guard) -> None:
        self._guard = guard
        self._thread: threading.Thread | None = None
        self._deferred: DeferredGuard | None = None
        self.report: Report | None = None  # the window's report, once written
        self.ready = False  # the thread is done: the driving thread collects its warnings

    @property
    def started(self) -> bool:
        return self._thread is not None

    @property
    def busy(self) -> bool:
        """A report is being written now (its analysis competes with the training for the GIL)."""
        t = self._thread
        return t is not None and t.is_alive()

    def start(self, facts: RunFacts, out: Outputs, again: bool = False) -> None:
        """Start the report's thread; ``again``: a later window's report, when the previous one is done."""
        if self._thread is not None:
            if not again or self._thread.is_alive():
                return
            self.collect(0.0)  # the previous report's warnings, said now
            self._thread = None
        deferred = self._deferred = DeferredGuard(self._guard)
        t = threading.Thread(target=self._run, args=(facts, out, deferred), name="gpuprof-report", daemon=True)
        self._thread = t
        t.start()

    def _run(self, facts: RunFacts, out: Outputs, g: DeferredGuard) -> None:
        try:
            self.report = window_report(facts, out, g)
        except Exception as err:  # noqa: BLE001 - kept; warned about on the driving thread
            g.fail("window report", "the report is written when the run ends instead", err)
        finally:
            self.ready = True

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the thread; True when no report is being written now."""
        t = self._thread
        if t is None or t is threading.current_thread():
            return True
        t.join(timeout)
        return not t.is_alive()

    def collect(self, wait_s: float | None = None) -> None:
        """On the driving thread: wait for the thread (at most ``wait_s``, default ``REPORT_WAIT_S``) and warn
        about its failures, once each."""
        if self._thread is None:
            return
        if not self.wait(REPORT_WAIT_S if wait_s is None else wait_s):
            # blocked (e.g. printing to a stderr nobody reads): never hold the run's end
            self._guard.warn_once("window report stuck", f"gpuprof: the report of the recorded window was "
                                  f"still being written after {REPORT_WAIT_S if wait_s is None else wait_s:g} s; "
                                  "the run's end does not wait for it. Training continues.")
        self.ready = False
        deferred, self._deferred = self._deferred, None
        if deferred is not None:
            deferred.replay()

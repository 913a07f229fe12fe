"""The hang watchdog's thread: when no step finishes for the hang timeout, it writes where every thread waits
(what it writes and where: :mod:`gpuprof.capture.job.hang`, whose module docstring is the whole story)."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TextIO

from gpuprof.capture.job.hang import (
    HangRecord,
    _faulthandler_text,
    _flight_recorder,
    _where_shown,
    culprit,
    effective_timeout,
    hang_finding,
    hang_into_report,
    process_group_timeout_s,
    thread_stacks,
    waiting_at,
    watch_timeout,
    write_hang_files,
)
from gpuprof.capture.job.hangfile import read_entries
from gpuprof.findings import Finding

__all__ = ["Watchdog"]


class Watchdog:
    """Watches the end of the session's last step from a daemon thread (module docstring).

    ``last_end()`` is the ``time.perf_counter()`` at which the last step (or the capture's start) ended;
    ``busy()`` is True while gpuprof's own work inside ``step()`` runs (a profiler starting, a trace
    exported): that time is not the job's, so no stall is counted then.
    """

    def __init__(self, configured: float | None, steps: Callable[[], int], last_end: Callable[[], float],
                 busy: Callable[[], bool], step_s: Sequence[float], driver: int | None, run_dir: Path, out_dir: Path,
                 worker: str, rank: int | None, stream: Callable[[], TextIO],
                 add_finding: Callable[[Finding, Finding | None], None],
                 series: Callable[[], dict[str, object] | None] | None = None, world: int | None = None) -> None:
        self.configured = configured
        self._steps = steps
        self._last_end = last_end
        self._busy = busy
        self._step_s = step_s  # the session's list (read only, from this thread)
        self._driver = driver
        self.run_dir, self.out_dir, self.worker, self.rank = run_dir, out_dir, worker, rank
        self.stream = stream
        self._add_finding = add_finding  # (new, replaced or None): the session keeps the finding for the report
        self._series = series  # this rank's watch series so far, for its hang.json entry (capture.job.hangseries)
        self.world = world  # the job's number of ranks (None: one process, or not known)
        self._stop = threading.Event()
        self.record: HangRecord | None = None  # the current (or last) stall
        self.failure: BaseException | None = None  # the thread's own failure (said once by the session)
        self._stall_end = 0.0  # last_end() when the current stall was reported
        self._culprit_known = False  # the current stall's finding names the culprit
        self._thread = threading.Thread(target=self._run, name="gpuprof-hang-watchdog", daemon=True)

    def start(self) -> "Watchdog":
        self._thread.start()
        return self

    def stop(self) -> None:
        """End the thread; a stall the job came out of since the last check is noted as resumed now."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(5.0)
        rec = self.record
        if rec is not None and rec.resumed_at_step is None and not self._thread.is_alive():
            end = self._last_end()
            if end != self._stall_end:
                try:
                    self._resumed(self._steps(), end - self._stall_end)
                except Exception as err:  # noqa: BLE001 - said once by the session
                    self.failure = err

    def check_interval(self) -> float:
        timeout, _ = watch_timeout(effective_timeout(self.configured, self._step_s), process_group_timeout_s(),
                                   self._step_s)
        return 5.0 if timeout is None else max(0.05, min(5.0, timeout / 10))

    def _run(self) -> None:
        try:
            seen = self._last_end()
            while not self._stop.wait(self.check_interval()):
                if self._busy():  # gpuprof's own work in step(): not the job's time
                    continue
                end, now = self._last_end(), time.perf_counter()
                rec = self.record
                if end != seen:
                    if rec is not None and rec.resumed_at_step is None:
                        self._resumed(self._steps(), end - seen)
                    seen = end
                timeout, early = watch_timeout(effective_timeout(self.configured, self._step_s),
                                               process_group_timeout_s(), self._step_s)
                rec = self.record
                if rec is not None and rec.resumed_at_step is None and not self._culprit_known:
                    self._late_culprit(rec)
                if timeout is not None and now - end >= timeout and (rec is None or rec.resumed_at_step is not None):
                    self._stall_end = end
                    self._hung(self._steps(), now - end, timeout, process_group_timeout_s() if early else None)
        except Exception as err:  # noqa: BLE001 - kept; the session says it once and the job goes on
            self.failure = err

    def _hung(self, step: int, stalled: float, timeout: float, pg_timeout: float | None = None) -> bool:
        """Report the stall (True); False when the driving thread is not in the user's code at all (it ended,
        or idles between a notebook's cells): the loop is not running, so it is not hung."""
        stacks = thread_stacks(self._driver, skip=threading.get_ident())
        driver = next((s for s in stacks if s.driver), None)
        if waiting_at(driver) is None:
            return False
        try:
            fh = _faulthandler_text()
        except Exception as err:  # noqa: BLE001 - the Python stacks are enough
            fh = f"(faulthandler failed: {type(err).__name__}: {err})"
        fr, note = _flight_recorder(self.out_dir, self.worker)
        rec = HangRecord(self.worker, self.rank, os.getpid(), socket.gethostname(), step, stalled, timeout,
                         time.time(), waiting_at(driver), stacks, fh, fr, note, pg_timeout_s=pg_timeout,
                         series=self._series_now())
        said = self._publish(rec, None)
        who = f"rank {self.rank}" if self.rank is not None else "the process"
        from gpuprof.render.safe import clip

        why = f" {clip(said, 600)}." if said else ""
        if pg_timeout is not None:
            why += (f" The process group's own timeout ({pg_timeout:g} s) is shorter than the hang timeout: the "
                    f"watchdog fired at {timeout:g} s, before the process group aborts the job.")
        self._say(f"gpuprof: no step finished for {stalled:.1f} s after step {step} (hang timeout {timeout:g} s); "
                  f"{who} waits at {_where_shown(rec.waiting_at)}.{why} Every thread's stack is in "
                  f"{self.run_dir / 'hang.md'}. The job is left running.")
        return True

    def _series_now(self) -> dict[str, object] | None:
        """This rank's series up to the stall; None without one, or when reading it fails (the stacks matter
        more: the failure is said once and the hang report is written without it)."""
        try:
            return self._series() if self._series is not None else None
        except Exception as err:  # noqa: BLE001 - the hang report goes on without the series
            self._say(f"gpuprof: this rank's step series could not be read for the hang report: "
                      f"{type(err).__name__}: {' '.join(str(err).split())[:200]}")
            return None

    def _late_culprit(self, rec: HangRecord) -> None:
        """While the stall lasts: another rank's entry written after ours may name the culprit; then this
        rank's finding says it too (the rank waiting in the collective usually writes first)."""
        said = culprit(read_entries(self.run_dir)[0])
        if said is None:
            return
        self._culprit_known = True
        old = rec.finding
        rec.finding = hang_finding(rec, str(self.run_dir / "hang.md"), said)
        self._add_finding(rec.finding, old)
        self._into_report(rec.finding)

    def _resumed(self, step: int, after: float) -> None:
        rec = self.record
        assert rec is not None
        old = rec.finding
        rec.resumed_at_step, rec.resumed_after_s = step, round(after, 3)
        self._publish(rec, old)
        who = f"rank {self.rank}" if self.rank is not None else "the process"
        self._say(f"gpuprof: {who} resumed: a step finished {after:.1f} s after the last one (now at step {step}).")

    def _publish(self, rec: HangRecord, replaced: Finding | None) -> str | None:
        """Write the stall (hang.json/hang.md, the finding); the culprit in words when the ranks' entries
        name one (the rank that writes second sees both)."""
        rec.finding = hang_finding(rec, str(self.run_dir / "hang.md"))
        said = None
        try:
            said = write_hang_files(self.run_dir, rec)  # the culprit of the entries merged under the lock
        except OSError as err:  # a planted link or FIFO, a full disk: the finding still reaches the report
            self._say(f"gpuprof: the hang report could not be written in {self.run_dir}: {err}. Watching goes on.")
        else:
            self._cross()
        if said is not None:
            rec.finding = hang_finding(rec, str(self.run_dir / "hang.md"), said)
        self._culprit_known = said is not None
        self.record = rec
        self._add_finding(rec.finding, replaced)
        self._into_report(rec.finding)
        return said

    def _cross(self) -> None:
        """The job's hang across ranks into the run directory's cross-rank report, from every rank's entry
        present (gpuprof.capture.job.hangcross); a single process has none."""
        if self.rank is None:
            return
        from gpuprof.capture.job.hangcross import write_cross_hang

        try:
            write_cross_hang(self.run_dir, self.world)
        except (OSError, ValueError) as err:
            self._say(f"gpuprof: the cross-rank hang verdict could not be written in {self.run_dir}: {err}. "
                      "hang.md holds every rank's entry.")

    def _into_report(self, found: Finding) -> None:
        """The stall into this rank's report.json now (a SIGTERM or kill later keeps it; ``gpuprof analyze RUN``
        shows it); the end-of-run report rewrites the file with everything."""
        try:
            hang_into_report(self.out_dir / "report.json", found)
        except (OSError, ValueError) as err:
            self._say(f"gpuprof: the hang could not be added to {self.out_dir / 'report.json'}: {err}. "
                      "hang.md holds it.")

    def _say(self, line: str) -> None:
        from gpuprof.render.safe import visible

        try:  # one line, inert: a name in it (the run directory, an error) cannot act on the terminal
            print(visible(line), file=self.stream(), flush=True)
        except (OSError, ValueError):  # a closed or broken stream: the files hold it all
            return

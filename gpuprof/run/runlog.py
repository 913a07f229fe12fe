"""Where a process's gpuprof messages go under ``gpuprof run``: ``<out dir>/gpuprof.log``, not the user's output.

The job's own output stays the job's: the summary printed when a recorded
window closes, the notice that a trace is being written, the end-of-run
summary of each process, all land in the log file beside the process's
``report.json``. ``gpuprof run`` prints one end-of-run card after the job
(:mod:`gpuprof.run.card`). Alarms the user needs while the job runs also go
to stderr: a hang (no step finished for the hang timeout, and its
resumption) and a CUDA out-of-memory notice; so does the line saying where
the experiment trackers got the results (``--to``). ``--verbose``
keeps the old behaviour (rank 0's messages on stderr, no log file).
"""

from __future__ import annotations

import io
import sys
import threading
from pathlib import Path
from typing import IO, Callable

__all__ = ["RunLog", "LOG_NAME", "ALARMS"]

LOG_NAME = "gpuprof.log"
#: lines also shown on stderr: the watchdog's and the OOM handler's alarms, and where the trackers got the results
ALARMS = ("gpuprof: no step finished", "gpuprof: CUDA out of memory", "gpuprof: results sent to ")
_RESUMED = " resumed: a step finished "


class RunLog(io.TextIOBase):
    """A text stream that appends to ``<out_dir()>/gpuprof.log`` (opened at the first write, when the capture's
    directories exist); alarms (:data:`ALARMS`) are copied to stderr. Never raises on write: a log that cannot
    be written sends its lines to stderr instead."""

    def __init__(self, out_dir: Callable[[], Path | None]) -> None:
        super().__init__()
        self._out_dir = out_dir
        self._fh: IO[str] | None = None
        self._failed = False
        self._lock = threading.Lock()
        self._line = ""  # the start of the line being written (print() writes the text, then the newline)

    @property
    def path(self) -> Path | None:
        d = self._out_dir()
        return None if d is None else d / LOG_NAME

    def isatty(self) -> bool:
        return False

    def writable(self) -> bool:
        return True

    def write(self, s: str) -> int:
        with self._lock:
            fh = self._open()
            if fh is None:
                _stderr(s)
            else:
                try:
                    fh.write(s)
                except (OSError, ValueError):
                    _stderr(s)
            text = self._line + s
            lines = text.split("\n")
            self._line = lines.pop()
            for line in lines:
                if fh is not None and (line.startswith(ALARMS) or (line.startswith("gpuprof: ") and _RESUMED in line)):
                    _stderr(line + "\n")
        return len(s)

    def flush(self) -> None:
        fh = self._fh
        if fh is not None:
            try:
                fh.flush()
            except (OSError, ValueError):
                pass

    def close(self) -> None:
        fh, self._fh = self._fh, None
        if fh is not None:
            try:
                fh.close()
            except (OSError, ValueError):
                pass
        super().close()

    def _open(self) -> IO[str] | None:
        if self._fh is not None or self._failed:
            return self._fh
        path = self.path
        if path is None:
            return None
        try:
            self._fh = open(path, "a", encoding="utf-8", errors="backslashreplace")  # noqa: SIM115 - kept open
        except OSError:
            self._failed = True
        return self._fh


def _stderr(s: str) -> None:
    try:
        sys.stderr.write(s)
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):
        pass

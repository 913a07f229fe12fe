"""From a moment on a host thread to the user's source line.

Two sources of Python stacks exist in traces:

* ``python_function`` events (``with_stack=True`` in torch >= 1.10): nested
  ranges named ``path/file.py(LINE): function``;
* the legacy ``Call stack`` arg of 2021 operators: ``frame;frame;...`` with the
  innermost frame first.

"User code" is decided by :mod:`gpuprof.frames` (one policy for all of
gpuprof); the innermost user frame is what a finding points at.
"""

from __future__ import annotations

import re
from typing import Union

import numpy as np

from gpuprof.findings import SourceLocation
from gpuprof.frames import is_user_file
from gpuprof.trace.callsite import call_line
from gpuprof.trace.model import Event, Trace, op_call_stack
from gpuprof.trace.table import EventTable
from gpuprof.trace.vocab import Kind

__all__ = ["parse_frame", "is_user_frame", "StackIndex"]

_FRAME_RE = re.compile(r"^(.*)\((\d+)\): (.*)$")

_LOC_CACHE: dict[str, Union[SourceLocation, None]] = {}


def parse_frame(name: str) -> SourceLocation | None:
    """``train.py(42): step`` -> SourceLocation("train.py", 42, "step"); None for built-ins."""
    m = _FRAME_RE.match(name)
    if not m:
        return None
    return SourceLocation(file=m.group(1), line=int(m.group(2)), function=m.group(3))


def is_user_frame(name: str) -> bool:
    """True for a frame ``path(LINE): function`` in the user's own code (:func:`gpuprof.frames.is_user_file`)."""
    if not name or name[0] == "<":
        return False
    m = _FRAME_RE.match(name)
    if not m:
        return False
    return is_user_file(m.group(1))


def user_location(name: str) -> SourceLocation | None:
    hit = _LOC_CACHE.get(name, False)
    if hit is not False:
        return hit  # type: ignore[return-value]
    loc = parse_frame(name) if is_user_frame(name) else None
    if len(_LOC_CACHE) < 100_000:
        _LOC_CACHE[name] = loc
    return loc


class StackIndex:
    """Finds the innermost user frame around a moment on a host thread."""

    # A frame that started this many frames earlier is too far away to be an
    # enclosing user frame worth the scan (deep backward scans cost time).
    MAX_SCAN = 4000

    def __init__(self, trace: Trace) -> None:
        # a loaded trace's frames are an EventTable already; a list (a Trace built by hand) is made one,
        # so that one scan (_table_location) serves both
        self._frames: dict[tuple[object, object], EventTable] = {
            k: v for k, v in EventTable.of(trace.python, int(Kind.PYTHON_FUNCTION)).by_thread().items()}
        self._ends: dict[int, np.ndarray] = {}  # per thread table (by id): each frame's end, made on first use

    def frames_on(self, keys: frozenset[tuple[object, object]]) -> list[EventTable]:
        """The frames of each thread among ``keys`` (a :func:`~gpuprof.trace.threads.thread_keys` set)
        that has any, each list in time order."""
        return [self._frames[k] for k in keys if k in self._frames]

    @property
    def available(self) -> bool:
        return bool(self._frames)

    def location(self, pid: object, tid: object, t: float, op: Event | None = None) -> SourceLocation | None:
        """The innermost user frame on thread (pid, tid) active at time ``t``.

        Falls back to the legacy ``Call stack`` of ``op`` when the trace has no
        Python frames for that thread.
        """
        key = (pid, tid)
        frames = self._frames.get(key)
        if frames is None and isinstance(tid, str) and tid.isdigit():
            key = (pid, int(tid))
            frames = self._frames.get(key)
        if frames:
            loc = _table_location(frames, t, self.MAX_SCAN)
            if loc is not None:
                return loc
        if op is not None:
            return call_stack_location(op)
        return None

    def call_location(self, pid: object, tid: object, t: float, op: Event | None = None) -> SourceLocation | None:
        """As :meth:`location`, at the line of the call the user frame was making at ``t`` when the
        user's source tells it (:mod:`gpuprof.trace.callsite`), else the function's first line."""
        frames = self._frames.get((pid, tid))
        if frames is None and isinstance(tid, str) and tid.isdigit():
            frames = self._frames.get((pid, int(tid)))
        if not frames:
            return self.location(pid, tid, t, op)
        found = _table_user_frame(frames, t, self.MAX_SCAN)
        if found is None:
            return self.location(pid, tid, t, op)
        j, loc = found
        if loc.function is None or loc.line is None:
            return loc
        key = id(frames)
        end = self._ends.get(key)
        if end is None:
            end = self._ends[key] = frames.ts + frames.dur
        line = call_line(loc.file, loc.line, loc.function, frames.names, frames.name_code, frames.ts, end, j, t)
        return loc if line is None else SourceLocation(loc.file, line, loc.function)


    def parent_name(self, frame: Event) -> str | None:
        """The name of the frame that directly encloses ``frame`` (a Python frame of this trace) on its
        thread: who called it; None at the top or without frames."""
        frames = self._frames.get((frame.pid, frame.tid))
        if not frames:
            return None
        i = int(np.searchsorted(frames.ts, frame.ts, side="right")) - 1
        names, code = frames.names, frames.name_code
        for j in range(i, max(-1, i - self.MAX_SCAN), -1):
            start, end = float(frames.ts[j]), float(frames.ts[j] + frames.dur[j])
            if start == frame.ts and end == frame.end and names[code[j]] == frame.name:
                continue  # the frame itself
            if start <= frame.ts and end >= frame.end:
                return str(names[code[j]])
        return None


def _table_user_frame(frames: EventTable, t: float, max_scan: int) -> tuple[int, SourceLocation] | None:
    """(index, location) of the innermost user frame open at ``t`` (as :func:`_table_location`)."""
    i = int(np.searchsorted(frames.ts, t, side="right")) - 1
    if i < 0:
        return None
    lo = max(0, i - max_scan + 1)
    open_at_t = frames.ts[lo:i + 1] + frames.dur[lo:i + 1] >= t
    names, code = frames.names, frames.name_code
    for j in (np.flatnonzero(open_at_t)[::-1] + lo).tolist():
        loc = user_location(names[code[j]])
        if loc is not None:
            return j, loc
    return None


def _table_location(frames: EventTable, t: float, max_scan: int) -> SourceLocation | None:
    """StackIndex.location's scan over one thread's frames (in time order): back from the last one
    started at or before ``t``, at most ``max_scan`` of them, the first open at ``t`` whose name is a
    user frame."""
    found = _table_user_frame(frames, t, max_scan)
    return found[1] if found is not None else None


def call_stack_location(op: Event) -> SourceLocation | None:
    """First user frame of a 2021-style ``Call stack`` (innermost first)."""
    stack = op_call_stack(op)
    if stack is None:
        return None
    for frame in stack.split(";"):
        loc = user_location(frame.strip())
        if loc is not None:
            return loc
    return None

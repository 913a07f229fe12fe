"""Which runs a TensorBoard logdir holds, found from the file names alone (no file is opened here).

A **run** is a directory that directly holds trace files
(``*.pt.trace.json[.gz]`` as ``torch.profiler.tensorboard_trace_handler`` and
gpuprof capture write them, or any other ``*.json[.gz]`` trace), a gpuprof
``report.json``, or a memory snapshot (``*.memory_snapshot.pickle``). Its
name is its path relative to the logdir (``.`` for the logdir itself), the
way TensorBoard names runs. A ``rank<R>`` directory under a run (where
capture under ``torchrun`` puts each rank's report) belongs to that run, not
a run of its own. This is the layout torch-tb-profiler reads too, so both
plugins list the same runs.

The walk never follows symbolic links (a logdir is often a shared folder, a
link could point anywhere) and stops at ``MAX_DEPTH`` levels and
``MAX_FILES`` entries (``GPUPROF_TB_MAX_FILES`` raises it), saying so in a
note instead of walking forever. It goes breadth first, so the runs near the
top of the logdir are found before a deep tree of other files uses up the
limit. File types come from the directory entries (``d_type``): no ``stat``
per file.

:class:`RunIndex` keeps the list: the plugin answers every request (the
page polls twice a second) from it, and walks again only when a directory
it saw changed (its mtime: a file created, removed or renamed in it), at
most once per ``RunIndex.min_interval_s``, and by one thread while the
others are answered from the list they have.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from gpuprof.limits import Limit
from gpuprof.trace.source import is_trace_name  # the names `gpuprof analyze DIR` takes as traces

__all__ = ["Run", "find_runs", "FileSig", "MAX_DEPTH", "MAX_FILES", "RunIndex"]

MAX_DEPTH = 6
# entries looked at (files and directories); a walk by d_type costs about 1 µs each
MAX_FILES = Limit("GPUPROF_TB_MAX_FILES", 200_000, "the entries the plugin looks at under the logdir")
SNAPSHOT_SUFFIX = ".memory_snapshot.pickle"
_RANK_DIR = re.compile(r"rank(\d+)")

#: A file as the cache knows it: (path, size, mtime in ns). A changed file is analysed again.
FileSig = tuple[str, int, int]


@dataclass
class Run:
    """One run: its trace files, its reports (one per rank under torchrun) and its memory snapshots."""

    name: str
    path: Path
    traces: list[Path] = field(default_factory=list)
    reports: list[Path] = field(default_factory=list)  # report.json of the run and of its rank<R> dirs
    snapshots: list[Path] = field(default_factory=list)

    def files(self) -> list[Path]:
        return self.traces + self.reports

    def signature(self) -> tuple[FileSig, ...]:
        """What the run's analysis depends on; a file that changed or vanished changes it."""
        return tuple(sig for sig in map(file_sig, self.files()) if sig is not None)

    def summary(self) -> dict[str, object]:
        return {"name": self.name, "traces": len(self.traces), "reports": len(self.reports),
                "snapshots": len(self.snapshots), "capture": bool(self.reports)}


def file_sig(path: Path) -> FileSig | None:
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    return (os.fspath(path), st.st_size, st.st_mtime_ns)


_OOM_SNAPSHOT = re.compile(r"oom(\.\d+)?\.pickle")  # the snapshot a capture's out-of-memory verdict writes


def find_runs(logdir: str | os.PathLike[str], notes: list[str] | None = None,
              dirs: dict[str, int] | None = None) -> list[Run]:
    """Every run under ``logdir``, sorted by name. ``notes`` (when given) gets a line per limit reached.

    ``dirs`` (when given) gets each directory walked with its mtime (ns), for :class:`RunIndex`.
    """
    root = Path(logdir)
    runs: dict[Path, Run] = {}
    seen = 0
    cap = MAX_FILES.value()
    queue: deque[tuple[Path, int]] = deque([(root, 0)])
    while queue:
        d, depth = queue.popleft()
        try:
            if dirs is not None:
                dirs[os.fspath(d)] = os.stat(d, follow_symlinks=d == root).st_mtime_ns
            entries = list(os.scandir(d))
        except OSError:
            continue  # unreadable or vanished meanwhile: not a run
        for e in sorted(entries, key=lambda e: e.name):
            seen += 1
            if seen > cap:
                if notes is not None:
                    notes.append(MAX_FILES.exceeded(f"more than {cap:,} files and directories under the logdir") +
                                 "; the runs beyond are not listed")
                return _sorted(runs)
            try:
                is_dir = e.is_dir(follow_symlinks=False)
                is_file = not is_dir and e.is_file(follow_symlinks=False)
            except OSError:
                continue
            if is_dir:
                if e.name.startswith("."):
                    continue
                if depth + 1 <= MAX_DEPTH:
                    queue.append((Path(e.path), depth + 1))
                elif notes is not None and not any("deeper than" in n for n in notes):
                    notes.append(f"directories deeper than {MAX_DEPTH} levels under the logdir are not searched")
                continue
            if not is_file:
                continue  # links, sockets, FIFOs...: never followed (and re-checked on the descriptor when read)
            kind = _kind(e.name)
            if kind is None:
                continue
            owner = d
            if kind == "report" and _RANK_DIR.fullmatch(d.name) and d != root:
                owner = d.parent  # <run>/rank<R>/report.json belongs to <run>
            run = runs.setdefault(owner, Run(_name(owner, root), owner))
            getattr(run, kind + "s").append(Path(e.path))
    return _sorted(runs)


class RunIndex:
    """The runs under a logdir, walked again only when a directory changed, at a bounded rate (module doc)."""

    def __init__(self, logdir: Path, min_interval_s: float = 2.0, full_every_s: float = 60.0) -> None:
        self.logdir = logdir
        self.min_interval_s = min_interval_s  # between two looks at the directories' mtimes
        self.full_every_s = full_every_s  # a walk at least this often all the same (a clock or mtime that lies)
        self.walks = 0
        self._lock = threading.Lock()
        self._runs: list[Run] | None = None
        self._notes: list[str] = []
        self._dirs: dict[str, int] = {}
        self._checked = self._walked = 0.0

    def get(self) -> tuple[list[Run], list[str]]:
        """The runs and the walk's notes; the list a refresh under way replaces, never a wait for it."""
        runs = self._runs
        if runs is not None and time.monotonic() - self._checked < self.min_interval_s:
            return runs, list(self._notes)
        if not self._lock.acquire(blocking=runs is None):
            return runs or [], list(self._notes)  # another request is refreshing: answer from what we have
        try:
            now = time.monotonic()
            if self._runs is None or (now - self._checked >= self.min_interval_s and self._stale(now)):
                notes: list[str] = []
                dirs: dict[str, int] = {}
                self._runs = find_runs(self.logdir, notes, dirs) if self.logdir.is_dir() else []
                self._notes, self._dirs = notes, dirs
                self._walked = now
                self.walks += 1
            self._checked = time.monotonic()
            return self._runs, list(self._notes)
        finally:
            self._lock.release()

    def _stale(self, now: float) -> bool:
        if now - self._walked >= self.full_every_s or not self._dirs:
            return True  # due, or the logdir was missing or unreadable: looking again costs one stat
        for d, mtime in self._dirs.items():
            try:
                if os.stat(d, follow_symlinks=d == os.fspath(self.logdir)).st_mtime_ns != mtime:
                    return True
            except OSError:
                return True  # vanished
        return False


def _kind(name: str) -> str | None:
    if name == "report.json":
        return "report"
    if (name.endswith(SNAPSHOT_SUFFIX) and not name.startswith(".")) or _OOM_SNAPSHOT.fullmatch(name):
        return "snapshot"
    if is_trace_name(name):
        return "trace"
    return None


def _name(d: Path, root: Path) -> str:
    rel = os.path.relpath(d, root)
    return "." if rel == "." else rel.replace(os.sep, "/")


def _sorted(runs: dict[Path, Run]) -> list[Run]:
    out = sorted(runs.values(), key=lambda r: r.name)
    for r in out:
        r.traces.sort()
        r.reports.sort()
        r.snapshots.sort()
    return out


def rank_of_report(path: Path) -> int | None:
    """The rank a ``<run>/rank<R>/report.json`` belongs to, from its directory name."""
    m = _RANK_DIR.fullmatch(path.parent.name)
    return int(m.group(1)) if m else None

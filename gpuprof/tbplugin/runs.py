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
``MAX_FILES`` files, saying so in a note instead of walking forever.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

from gpuprof.trace.load import TRACE_SUFFIXES

__all__ = ["Run", "find_runs", "FileSig", "MAX_DEPTH", "MAX_FILES"]

MAX_DEPTH = 6
MAX_FILES = 20_000
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


def is_trace_name(name: str) -> bool:
    """The names ``gpuprof analyze DIR`` takes as traces (gpuprof's own JSON outputs excluded)."""
    return (name.endswith(TRACE_SUFFIXES) and not name.startswith((".", "report."))
            and not name.endswith((".gpuprof.json", ".gpuprof.json.gz")))


def find_runs(logdir: str | os.PathLike[str], notes: list[str] | None = None) -> list[Run]:
    """Every run under ``logdir``, sorted by name. ``notes`` (when given) gets a line per limit reached."""
    root = Path(logdir)
    runs: dict[Path, Run] = {}
    seen = 0
    stack: list[tuple[Path, int]] = [(root, 0)]
    while stack:
        d, depth = stack.pop()
        try:
            entries = list(os.scandir(d))
        except OSError:
            continue  # unreadable or vanished meanwhile: not a run
        for e in sorted(entries, key=lambda e: e.name):
            seen += 1
            if seen > MAX_FILES:
                if notes is not None:
                    notes.append(f"stopped looking for runs after {MAX_FILES} files under the logdir")
                return _sorted(runs)
            try:
                mode = e.stat(follow_symlinks=False).st_mode
            except OSError:
                continue
            if stat.S_ISDIR(mode):
                if e.name.startswith("."):
                    continue
                if depth + 1 <= MAX_DEPTH:
                    stack.append((Path(e.path), depth + 1))
                elif notes is not None and not any("deeper than" in n for n in notes):
                    notes.append(f"directories deeper than {MAX_DEPTH} levels under the logdir are not searched")
                continue
            if not stat.S_ISREG(mode):
                continue  # links, sockets, ...: never followed
            kind = _kind(e.name)
            if kind is None:
                continue
            owner = d
            if kind == "report" and _RANK_DIR.fullmatch(d.name) and d != root:
                owner = d.parent  # <run>/rank<R>/report.json belongs to <run>
            run = runs.setdefault(owner, Run(_name(owner, root), owner))
            getattr(run, kind + "s").append(Path(e.path))
    return _sorted(runs)


def _kind(name: str) -> str | None:
    if name == "report.json":
        return "report"
    if name.endswith(SNAPSHOT_SUFFIX) and not name.startswith("."):
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

"""Finding the runs under a log directory and the figures of each, from its saved ``report.json`` files.

A run is a directory holding a ``report.json`` (a capture writes one per
run, ``<run>/report.json``, or one per rank, ``<run>/rank<R>/report.json``:
a run's ranks are one run). Each file is read with the checks of
:mod:`gpuprof.saved` (regular file, size bound, schema version); one
that fails them is skipped with a note, so one bad run does not hide the
others. The walk follows no symlink and stops at :data:`MAX_REPORTS`.

Runs are in time order: the newest modification time of their reports
(the time the run finished writing them), then name.
"""

from __future__ import annotations

import ftplib
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuprof.errors import InputError, describe_error
from gpuprof.saved.figures import RunFigures
from gpuprof.saved.types import SavedReport

__all__ = ["METRICS", "HistoryRun", "History", "read_history", "MAX_REPORTS"]

REPORT_NAME = "report.json"
MAX_REPORTS = 10_000  # far beyond a real log directory; bounds the time and memory a hostile tree costs
# the figures each run has (RunFigures), in the order shown: name -> (label, unit)
METRICS: dict[str, tuple[str, str]] = {"step_time_us": ("step time", "us"),
                                       "gpu_utilization": ("GPU utilisation", "fraction"),
                                       "data_loading_share": ("data loading", "fraction"),
                                       "memory_peak_bytes": ("memory peak", "bytes")}


@dataclass
class HistoryRun:
    """One run: its name (the directory, relative to the log directory), figures (None: not in its reports), codes."""

    name: str
    mtime: float
    reports: list[str]
    figures: dict[str, float | None]  # RunFigures (gpuprof.saved.figures: the one definition of each)
    findings: list[str]  # distinct finding codes, sorted

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "reports": self.reports, **self.figures, "findings": self.findings}


@dataclass
class History:
    root: str
    runs: list[HistoryRun] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _find_reports(root: Path, notes: list[str]) -> list[Path]:
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames.sort()
        if REPORT_NAME in filenames:
            p = Path(dirpath) / REPORT_NAME
            try:
                regular = stat.S_ISREG(os.lstat(p).st_mode)
            except OSError:
                regular = False
            if not regular:
                notes.append(f"skipped {p}: not a regular file")
                continue
            found.append(p)
            if len(found) >= MAX_REPORTS:
                notes.append(f"stopped after {MAX_REPORTS} reports")
                break
    return found


_Found = list[tuple[str, str, SavedReport, float]]  # (run name, report, the report read, modification time)


def _shown(url: str) -> str:
    """``url`` as gpuprof may print it: the log directory's credentials (registered by redacting the URL the
    user gave, first) masked wherever they occur, as fsspec's listings spell a URL otherwise."""
    from gpuprof.redact import scrub

    return scrub(url)


def _run_name(parts: list[str]) -> str:
    """The run of a report, from its directory's path parts below the log directory (rank<R> folded in)."""
    if parts and parts[-1].startswith("rank") and parts[-1][4:].isdigit():
        parts = parts[:-1]  # one rank of a distributed run
    return "/".join(parts) or "."


def _read_local(root: Path, logdir: str, notes: list[str]) -> _Found:
    from gpuprof.saved.read import read_saved

    try:
        st = os.stat(root)
    except OSError as err:
        raise InputError.from_os_error(logdir, err) from None
    if not stat.S_ISDIR(st.st_mode):
        raise InputError(logdir, "not a directory (give the log directory holding the runs)")
    out: _Found = []
    for rep in _find_reports(root, notes):
        try:
            doc = read_saved(rep)
            mtime = os.stat(rep).st_mtime
        except InputError as err:
            notes.append(f"skipped {err}")
            continue
        except OSError as err:
            notes.append(f"skipped {rep}: {err.strerror or err}")
            continue
        out.append((_run_name(list(rep.parent.relative_to(root).parts)), str(rep), doc, mtime))
    return out


def _read_remote(url: str, notes: list[str]) -> _Found:
    """Every ``report.json`` under a URL prefix (fsspec), read with the same checks as a local one."""
    from gpuprof.redact import redact
    from gpuprof.remote import find_remote, modified_time, open_remote
    from gpuprof.saved.read import MAX_REPORT_BYTES, loaded

    redact(url)  # registers the URL's secrets, which _shown then masks in every listed URL

    try:
        reports = find_remote(url, lambda name: name == REPORT_NAME)
    except InputError as err:
        if "holds no" in err.problem:
            raise InputError(_shown(url), f"no {REPORT_NAME} under it") from None
        raise
    root = url.rstrip("/")
    tail = root.split("://", 1)[-1].strip("/")
    out: _Found = []
    for rep in reports[:MAX_REPORTS]:
        name = _shown(str(rep))
        try:
            _, stream, _, size = open_remote(str(rep), 0)
            try:
                if size is not None and size > MAX_REPORT_BYTES:
                    raise InputError(name, f"report larger than {MAX_REPORT_BYTES >> 20} MiB; not one gpuprof wrote")
                raw = stream.read(MAX_REPORT_BYTES + 1)
            finally:
                stream.close()
            doc = loaded(raw, name)[1]
        except InputError as err:
            notes.append(f"skipped {err}")
            continue
        except (OSError, EOFError, ftplib.Error) as err:  # a store that failed mid-read (remote._BACKEND_ERRORS)
            notes.append(f"skipped {name}: {describe_error(err)}")
            continue
        rel = str(rep).split("://", 1)[-1].strip("/")
        at = rel.find(tail) if tail else 0
        below = rel[at + len(tail):] if at >= 0 else rel
        parts = [p for p in below.split("/") if p][:-1]  # the directories between the root and report.json
        out.append((_run_name(parts), name, doc, modified_time(str(rep)) or 0.0))
    if len(reports) > MAX_REPORTS:
        notes.append(f"stopped after {MAX_REPORTS} reports")
    return out


def read_history(logdir: str) -> History:
    """Every run under ``logdir`` (a directory, or a URL prefix read through fsspec) in time order;
    InputError when it is not a directory or holds no readable report."""
    from gpuprof.remote import is_url, local_or_url

    where = local_or_url(logdir) if is_url(logdir) else Path(logdir)
    hist = History(root=logdir)
    if isinstance(where, Path):
        found = _read_local(where, logdir, hist.notes)
    else:
        found = _read_remote(str(where), hist.notes)
        hist.root = _shown(logdir)
    by_run: dict[str, list[tuple[str, SavedReport, float]]] = {}
    for run_name, rep, doc, mtime in found:
        by_run.setdefault(run_name, []).append((rep, doc, mtime))
    if not by_run:
        raise InputError(hist.root, f"no readable {REPORT_NAME} under it" + (f" ({hist.notes[0]})" if hist.notes else ""))
    for name, items in by_run.items():
        docs = [d for _, d, _ in items]
        codes = sorted({f.code for d in docs for f in d.findings})
        hist.runs.append(HistoryRun(name, max(m for _, _, m in items), [p for p, _, _ in items],
                                    RunFigures.of(docs).to_dict(), codes))
    hist.runs.sort(key=lambda r: (r.mtime, r.name))
    return hist

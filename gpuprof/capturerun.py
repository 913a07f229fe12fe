"""The runtime findings a capture left in its run directory, for ``gpuprof analyze <run dir>``.

A capture (``gpuprof.profile``) writes ``report.json`` beside its traces
(``<run>/report.json``, or ``<run>/rank<R>/report.json`` under torchrun). The
runtime checks (GP6xx: a leak, a slow DataLoader, a host sync) were measured
in the live process and cannot be recomputed from the traces, so analysing
the run directory offline would silently lose them. :func:`capture_findings`
reads them back; :func:`capture_findings_of` hands them to an analysis
report, marked as from the capture (``origin="runtime"``, ``source`` = the
report.json), and drops the trace findings a runtime finding covers, as the
capture's own report does. The same goes for the whole-job watch's ``job``
(the first report that has one: the run's, or rank 0's under torchrun),
which the traces cannot give either. A ``report.json`` that is a symbolic
link (or not a regular file, a FIFO) is not read.

Torch-free: ``gpuprof analyze`` never imports torch. A ``report.json`` that
is unreadable, too big or not a capture's report is skipped with a note (the
traces are still analysed), never fatal: it is a by-product, not the input.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from gpuprof.errors import InputError
from gpuprof.findings import Finding
from gpuprof.report import JobSummary, Report

__all__ = ["CaptureFindings", "capture_findings", "capture_findings_of",
           "REPORT_NAME", "MAX_REPORT_BYTES"]

REPORT_NAME = "report.json"
CROSS_NAME = "report.cross_rank.json"  # the job's cross-rank report (its hang verdict is read back)
MAX_REPORT_BYTES = 64 * 1024 * 1024  # a real capture report is KBs; never read a huge file whole



@dataclass
class CaptureFindings:
    """What the run's capture reports hold: runtime findings, and notes on the reports skipped."""

    findings: list[Finding] = field(default_factory=list)
    reports: list[str] = field(default_factory=list)  # the report.json files read
    notes: list[str] = field(default_factory=list)
    job: JobSummary | None = None  # the whole job, as the capture's watch saw it (the first report with one)


def _reports_under(root: Path) -> list[Path]:
    """``report.json`` of the run (single process) and of each ``rank<R>`` directory, sorted."""
    out = []
    if _regular(root / REPORT_NAME):
        out.append(root / REPORT_NAME)
    try:
        children = sorted(root.iterdir())
    except OSError:
        return out
    for child in children:
        if child.name.startswith("rank") and child.name[4:].isdigit() and _regular(child / REPORT_NAME):
            out.append(child / REPORT_NAME)
    return out


def _regular(p: Path) -> bool:
    """A regular file itself: a link is not followed, a FIFO not opened (nothing blocks)."""
    import stat

    try:
        return stat.S_ISREG(os.lstat(p).st_mode)
    except OSError:
        return False


def capture_findings(path: str | os.PathLike[str]) -> CaptureFindings:
    """The runtime findings (GP6xx) of the capture reports in run directory ``path`` (nothing for a file)."""
    out = CaptureFindings()
    root = Path(path)
    if not root.is_dir():
        return out
    for rep in _reports_under(root):
        try:
            read = _read(rep)
        except ValueError as err:
            out.notes.append(f"skipped {rep}: {err}")
            continue
        if read is None:
            continue  # not a capture's report (e.g. a saved `gpuprof analyze --format json`)
        found, job = read
        out.reports.append(str(rep))
        out.findings += found
        if out.job is None:
            out.job = job
    _cross_hang(root, out)
    return out


def _cross_hang(root: Path, out: CaptureFindings) -> None:
    """The job's hang across ranks (GP651 of ``report.cross_rank.json``, written from every rank's hang.json
    entry when the hang was detected: gpuprof.capture.job.hangcross), first among the run's findings."""
    rep = root / CROSS_NAME
    if not _regular(rep):
        return
    try:
        read = _read(rep, command="analyze", codes=frozenset({"GP651"}))
    except ValueError as err:
        out.notes.append(f"skipped {rep}: {err}")
        return
    if read is not None and read[0]:
        out.reports.append(str(rep))
        out.findings[:0] = read[0]


def _read(rep: Path, command: str = "capture", codes: frozenset[str] | None = None,
          ) -> tuple[list[Finding], JobSummary | None] | None:
    """The runtime findings (of ``codes``, default every runtime check's) and job of a report written by
    ``command`` (None: another's); ValueError when it is unreadable or malformed (the typed reader's checks,
    :mod:`gpuprof.saved`)."""
    from gpuprof.safefile import TooLarge, read_regular
    from gpuprof.saved.read import live_findings, loaded

    try:  # listed as a regular file (_regular); a link or FIFO put there since is refused, not followed or waited on
        raw = read_regular(rep, MAX_REPORT_BYTES)
    except TooLarge:
        raise ValueError(f"larger than {MAX_REPORT_BYTES:,} bytes, not a capture report") from None
    except OSError as err:
        raise ValueError(f"cannot read it ({err.strerror or err})") from None
    if raw is None:
        raise ValueError(f"cannot read it ({os.strerror(errno.ENOENT)})")
    try:
        saved = loaded(raw, str(rep), MAX_REPORT_BYTES)[1]
        if saved.command != command:
            return None
        runtime = _runtime_codes() if codes is None else codes
        found = live_findings(saved.findings, str(rep),  # trace findings: recomputed from the traces
                              keep=lambda f: f.origin == "runtime" and f.code in runtime)
        return [_as_from_capture(f, rep) for f in found], saved.job
    except InputError as err:
        raise ValueError(err.problem) from None


def _runtime_codes() -> frozenset[str]:
    """The runtime checks' codes (GP6xx, GP71x, GP80x, GP85x: gpuprof.runtimecodes)."""
    from gpuprof.runtimecodes import RUNTIME_CHECKS

    return frozenset(c.code for c in RUNTIME_CHECKS)


def _as_from_capture(f: Finding, rep: Path) -> Finding:
    # links are made again where the report is finished (gpuprof.flow.finish), among its findings
    return replace(f, origin="runtime", source=str(rep), links=())


def capture_findings_of(report: Report, path: str | os.PathLike[str]) -> list[Finding]:
    """The run's capture findings for ``report`` (a :class:`gpuprof.report.Report`), its notes added to it.

    The findings are not filtered nor folded here: the caller adds them to the
    report's findings, which are finished once (:func:`gpuprof.flow.finish`:
    ``--select``/``--ignore``, then the overlap policy that folds a trace
    finding into the runtime one that supersedes it, GP102 under GP601).
    """
    found = capture_findings(path)
    report.notes += found.notes
    if report.job is None:
        report.job = found.job
    if not found.reports:
        return []
    n = len(found.findings)
    report.notes.append(
        f"{n} runtime finding{'s' if n != 1 else ''} from the capture's "
        f"{', '.join(found.reports)}: measured while the run trained, not recomputed from the traces")
    return found.findings

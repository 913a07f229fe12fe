"""The end-of-run card of ``gpuprof run``: one answer, printed once, after the job's last line.

When the command has ended, ``gpuprof run`` (the parent process, which never
imports torch) reads back what the job wrote under the logdir through the
saved-report reader (:mod:`gpuprof.saved.read`): each run directory's
``report.json`` (a single process) or ``rank<R>/report.json`` (the ranks of a
job) and ``report.cross_rank.json``. It writes ``report.html`` in the run
directory (unless ``--no-html``) and prints the card: the steps and phases of
rank 0 (or the single process), the top findings across ranks with their cost
(the cross-rank verdicts first among equals: straggler, imbalance; the job's hang across ranks first of all), and
the paths of ``report.md``, the cross-rank report, the HTML page and the log
of gpuprof's messages. A report that cannot be read is one line naming it;
the card never changes the command's exit code.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from gpuprof.errors import GpuprofError
from gpuprof.findings import Finding, sort_findings
from gpuprof.render.safe import one_line, visible
from gpuprof.report import Report

__all__ = ["RunDir", "find_run_dirs", "end_card", "TOP_FINDINGS", "HTML_NAME"]

TOP_FINDINGS = 5  # findings the card shows (all of them are in report.md and the HTML page)
HTML_NAME = "report.html"
MAX_RUN_DIRS = 8  # run directories one card names (mp.spawn without a process group: one per process)


@dataclass
class RunDir:
    """One run directory the job wrote, read back."""

    path: Path
    lead: Report | None = None  # rank 0's report, or the single process's
    lead_md: Path | None = None
    ranks: dict[int, Report] = field(default_factory=dict)  # rank -> report (a multi-rank run)
    cross: Report | None = None
    problems: list[str] = field(default_factory=list)


def find_run_dirs(logdir: str, before: Mapping[str, int], after: Mapping[str, int]) -> list[Path]:
    """The run directories this job wrote or changed under ``logdir`` (by name), at most :data:`MAX_RUN_DIRS`."""
    out = []
    for name in sorted(n for n, mtime in after.items() if before.get(n) != mtime):
        p = Path(logdir) / name
        if p.is_dir() and not p.is_symlink():
            out.append(p)
    return out[:MAX_RUN_DIRS]


def _read(path: Path, problems: list[str]) -> Report | None:
    from gpuprof.saved.read import read_report

    try:
        return read_report(path)
    except GpuprofError as err:
        problems.append(one_line(str(err)))
    except (OSError, ValueError, RecursionError) as err:
        problems.append(f"{visible(str(path))}: {type(err).__name__}: {one_line(str(err))}")
    return None


def read_run_dir(path: Path) -> RunDir:
    rd = RunDir(path)
    single = path / "report.json"
    if single.is_file() or (single.exists() and not single.is_dir()):  # a FIFO: one line from the reader
        rd.lead, rd.lead_md = _read(single, rd.problems), path / "report.md"
        return rd
    for sub in sorted(path.glob("rank*/report.json")):
        tail = sub.parent.name[4:]
        if not tail.isdigit():
            continue
        rep = _read(sub, rd.problems)
        if rep is not None:
            rd.ranks[int(tail)] = rep
    if rd.ranks:
        first = min(rd.ranks)
        rd.lead, rd.lead_md = rd.ranks[first], path / f"rank{first}" / "report.md"
    cross = path / "report.cross_rank.json"
    if cross.is_file():
        rd.cross = _read(cross, rd.problems)
    return rd


def _section(report: Report, kind: str) -> dict[str, object] | None:
    for s in report.sections:
        if getattr(s, "kind", None) == kind:
            data = getattr(s, "data", None)
            if isinstance(data, dict):
                return data
    return None


def _head(rd: RunDir) -> str:
    rep = rd.lead
    assert rep is not None
    sec = _section(rep, "capture") or {}
    steps = sec.get("steps")
    head = f"gpuprof: {steps if isinstance(steps, int) else '?'} steps"
    median = sec.get("step_time_median_ms")
    if isinstance(median, (int, float)):
        head += f", median {median:.2f} ms/step"
    data = sec.get("data_loading_share")
    if isinstance(data, (int, float)):
        head += f", data loading {data:.0%}"
    if rd.ranks:
        head += f" (rank {min(rd.ranks)} of {len(rd.ranks)} rank{'s' if len(rd.ranks) != 1 else ''} reporting)"
    return head


def top_findings(rd: RunDir, n: int = TOP_FINDINGS) -> tuple[list[tuple[Finding, str]], int]:
    """The ``n`` costliest findings across the run (cross-rank ones, then each rank's, one per code: the costliest
    rank's, with how many ranks had it), each with where it was found; and how many distinct findings there are."""
    seen: dict[tuple[str, str], tuple[Finding, str]] = {}
    by_code: dict[str, list[tuple[Finding, int]]] = {}
    across: set[str] = set()
    if rd.cross is not None:
        for f in rd.cross.findings:
            seen[(f.code, f.message)] = (f, "across ranks")
        # the job's hang across ranks says what each rank's own hang finding says, and which rank is the cause
        across = {f.code for f in rd.cross.findings if f.code == "GP651"}
    if rd.ranks:
        for r, rep in sorted(rd.ranks.items()):
            for f in rep.findings:
                if f.code in across:
                    continue
                by_code.setdefault(f.code, []).append((f, r))
        for code, items in by_code.items():
            best, rank = sort_findings_with_rank(items)[0]
            where = f"rank {rank}" if len(items) == 1 else f"rank {rank}; {len(items)} ranks"
            seen.setdefault((code, best.message), (best, where))
    elif rd.lead is not None:
        for f in rd.lead.findings:
            seen[(f.code, f.message)] = (f, "")
    # a hang first: it has no cost to rank it by (the job did not finish), and it is what the user must fix
    ordered = sorted(sort_findings(f for f, _ in seen.values()), key=lambda f: f.code != "GP651")
    place = {id(f): w for f, w in seen.values()}
    return [(f, place[id(f)]) for f in ordered[:n]], len(ordered)


def sort_findings_with_rank(items: list[tuple[Finding, int]]) -> list[tuple[Finding, int]]:
    order = sort_findings(f for f, _ in items)
    rank_of = {id(f): r for f, r in items}
    return [(f, rank_of[id(f)]) for f in order]


def write_html(rd: RunDir) -> Path | None:
    """``report.html`` in the run directory: rank 0's (or the single process's) report with the cross-rank
    findings and sections beside its own. Raises OSError when it cannot be written."""
    from gpuprof.atomic import atomic_write
    from gpuprof.htmlpage.page import report_page

    if rd.lead is None:
        return None
    rep = rd.lead
    if rd.cross is not None:
        rep = Report(command=rep.command, inputs=list(rep.inputs), traces=list(rep.traces),
                     sections=[*rep.sections, *rd.cross.sections], findings=[*rd.cross.findings, *rep.findings],
                     notes=[*rep.notes, *(f"cross-rank: {n}" for n in rd.cross.notes)],
                     failed_rules=[*rep.failed_rules, *rd.cross.failed_rules], job=rep.job)
    path = rd.path / HTML_NAME
    atomic_write(path, report_page(rep))
    return path


def card_lines(rd: RunDir, html: Path | None, width: int | None = None) -> list[str]:
    """The card of one run directory (every name through :func:`visible`/:func:`one_line`)."""
    from gpuprof.capture.end.text import _job_lines, _wrapped, finding_lines

    lines = [f"gpuprof: ─── end of run: {visible(str(rd.path))} ───"]
    lines += [f"gpuprof: {p}" for p in rd.problems]
    if rd.lead is None:
        return lines
    lines.append(_head(rd))
    lines += _job_lines(rd.lead)
    top, total = top_findings(rd)
    if top:
        across = " across ranks" if rd.ranks else ""
        shown = f"top {len(top)} of {total}" if total > len(top) else f"{total}"
        lines.append(f"gpuprof: {shown} finding{'s' if total != 1 else ''}{across}, costliest first:")
        for f, where in top:
            main, *fix = finding_lines(f, None)  # whole lines: the place goes in before wrapping
            if where:
                main += f" ({visible(where)})"
            lines += _wrapped(main, width, 4)
            for line in fix:
                lines += _wrapped(line, width, 9)
    else:
        lines.append("gpuprof: no findings")
    lines.append("gpuprof: files")
    if rd.lead_md is not None and rd.lead_md.is_file():
        lines.append(f"  report       {visible(str(rd.lead_md))} (and report.json)")
    cross_md = rd.path / "report.cross_rank.md"
    if rd.cross is not None and cross_md.is_file():
        lines.append(f"  cross-rank   {visible(str(cross_md))}")
    if html is not None:
        lines.append(f"  HTML         {visible(str(html))}")
    logs = [p for p in ([rd.path / "gpuprof.log"] + sorted(rd.path.glob("rank*/gpuprof.log"))) if p.is_file()]
    if logs:
        more = f" (and {len(logs) - 1} more, one per rank)" if len(logs) > 1 else ""
        lines.append(f"  log          {visible(str(logs[0]))}{more}")
    hang = rd.path / "hang.md"
    if hang.is_file():
        lines.append(f"  hang         {visible(str(hang))}")
    lines.append(f"               gpuprof analyze {visible(shlex.quote(str(rd.path)))}")
    return lines


def end_card(logdir: str, before: Mapping[str, int], after: Mapping[str, int], *, html: bool = True,
             width: int | None = None) -> str | None:
    """The card for what the job wrote under ``logdir`` (None when it wrote no report). Never raises an
    OSError: a page that cannot be written is a line of the card."""
    cards: list[str] = []
    for path in find_run_dirs(logdir, before, after):
        rd = read_run_dir(path)
        if rd.lead is None and not rd.problems:
            continue
        page = None
        if html:
            try:
                page = write_html(rd)
            except OSError as err:
                rd.problems.append(f"{HTML_NAME} not written in {visible(str(path))}: "
                                   f"{one_line(err.strerror or str(err))}")
        cards.append("\n".join(card_lines(rd, page, width)))
    return "\n".join(cards) if cards else None

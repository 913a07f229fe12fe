"""The job's hang, across ranks: one verdict from every rank's ``hang.json`` entry (issue 41, items 1 and 7).

Each rank's watchdog writes its own entry of ``hang.json`` in the shared run directory
(:func:`gpuprof.capture.job.hang.write_hang_files`): where its driving thread waits, the collective it
waits in, its steps so far and its series up to the stall. The process group cannot carry them (its
collectives are what is stuck, and its store is served by rank 0's process), so the cross-rank verdict is
made from that file: after each write, the rank that wrote reads every entry present and puts one verdict
into the cross-rank report of the run directory (``report.cross_rank.json``: a ``hang`` section and one
GP651 finding; ``report.cross_rank.md``: the same in words). ``gpuprof analyze RUN`` and ``gpuprof run``'s
end card read it from there; the end-of-run gather, which rewrites that report, keeps it
(:func:`add_to_report`).

The verdict says which ranks never reached the collective the others wait in, where each rank is, the last
step every rank finished and each rank's series up to the stall. A rank of the job (``world_size``) whose
entry is absent, or whose entry (or the whole file: truncated, a link, not a regular file) cannot be read,
is named as missing with the reason: where it is is never guessed, and no culprit is named from the ranks
that remain when the one that would be the culprit may be among the missing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuprof.atomic import atomic_write
from gpuprof.capture.job.hangfile import MAX_HANG_JSON_BYTES, read_entries, read_json
from gpuprof.findings import Evidence, Finding, SourceLocation
from gpuprof.safefile import read_regular

__all__ = ["HANG_SECTION", "HangSection", "hang_verdict", "write_cross_hang", "add_to_report", "read_entries"]

HANG_SECTION = "hang"
SECTION_VERSION = 1
MAX_SERIES_RANKS = 64  # ranks whose series the section carries (every rank's is in hang.json)
MAX_NAMED = 8  # ranks named in one sentence
CROSS_JSON, CROSS_MD = "report.cross_rank.json", "report.cross_rank.md"
MD_BEGIN, MD_END = "<!-- gpuprof: hang verdict -->", "<!-- gpuprof: end of hang verdict -->"


@dataclass
class HangSection:
    """The ``hang`` section of the cross-rank report (docs/report-schema.md)."""

    data: dict[str, Any] = field(default_factory=dict)
    kind: str = HANG_SECTION

    def to_dict(self) -> dict[str, Any]:
        return self.data


def _int(x: object) -> int | None:
    return x if isinstance(x, int) and not isinstance(x, bool) else None


def _entry_problem(r: dict[str, Any]) -> str | None:
    """Why a rank's entry cannot be used (None: it can)."""
    step = _int(r.get("step"))
    if step is None or step < 0:
        return "its hang.json entry has no step count"
    w = r.get("waiting_at")
    if w is not None and not (isinstance(w, dict) and isinstance(w.get("file"), str) and _int(w.get("line")) is not None):
        return "its hang.json entry has a malformed waiting_at"
    if not isinstance(r.get("threads"), list):
        return "its hang.json entry has no thread stacks"
    return None


def _loc(r: dict[str, Any]) -> SourceLocation | None:
    w = r.get("waiting_at")
    if not isinstance(w, dict):
        return None
    fn = w.get("function")
    return SourceLocation(str(w.get("file")), int(w["line"]), fn if isinstance(fn, str) else None)


def _names(ranks: list[int]) -> str:
    more = f" and {len(ranks) - MAX_NAMED} more" if len(ranks) > MAX_NAMED else ""
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks[:MAX_NAMED])) + more


def hang_verdict(run_dir: Path, world: int | None) -> tuple[HangSection, Finding] | None:
    """The job's hang across ranks from ``run_dir/hang.json`` (module docstring): the ``hang`` section and its
    GP651 finding; None when no entry describes a stall still going on (none written, or every stall resumed)
    and no file problem hides them. ``world``: the job's number of ranks, None when unknown (then only the
    ranks seen are named)."""
    from gpuprof.capture.job.hang import _in_collective, culprit

    entries, file_problem = read_entries(run_dir)
    good: dict[int, dict[str, Any]] = {}
    bad: dict[int, str] = {}
    for r in entries:
        rank = _int(r.get("rank"))
        if rank is None or rank < 0 or (world is not None and rank >= world):
            continue  # not a rank of this job (a single process's entry, or a stray one)
        problem = _entry_problem(r)
        if problem is not None:
            bad.setdefault(rank, problem)
        elif rank not in good:
            good[rank] = r
            bad.pop(rank, None)
    stalled = {k: r for k, r in good.items() if r.get("resumed_at_step") is None}
    if not stalled and file_problem is None and not bad:
        return None  # nothing written, or every stall resumed
    expected = range(world) if world is not None else sorted({*good, *bad})
    absent = "wrote no entry in hang.json (its watchdog did not fire: it may still step, have exited, or run " \
             "on a machine that does not share the run directory)"
    missing = [{"rank": k, "why": bad.get(k) or file_problem or absent} for k in expected if k not in good]
    ordered = [stalled[k] for k in sorted(stalled)]
    # a culprit only as the entries show one (a rank not in a collective while another waits in one); the
    # missing ranks are named beside it, never placed
    said = culprit(ordered)
    steps = {k: int(r["step"]) for k, r in stalled.items()}
    last = min(steps.values()) if steps else None
    rows: list[dict[str, Any]] = []
    for k in sorted(good):
        r = good[k]
        rows.append({"rank": k, "worker": str(r.get("worker")), "step": int(r["step"]),
                     "stalled_s": r.get("stalled_s") if isinstance(r.get("stalled_s"), (int, float)) else None,
                     "waiting_at": r.get("waiting_at"), "collective": _in_collective(r),
                     "resumed_at_step": _int(r.get("resumed_at_step")),
                     "series": r.get("series") if isinstance(r.get("series"), dict) and len(rows) < MAX_SERIES_RANKS
                     else None})
    report = str(run_dir / "hang.md")
    data: dict[str, Any] = {"version": SECTION_VERSION, "world_size": world, "culprit": said,
                            "last_common_step": last, "ranks": rows, "missing": missing, "hang_report": report}
    return HangSection(data), _finding(data, stalled, steps, said, report)


def _finding(data: dict[str, Any], stalled: dict[int, dict[str, Any]], steps: dict[int, int], said: str | None,
             report: str) -> Finding:
    from gpuprof.capture.job.hang import _at
    from gpuprof.runtimecodes import runtime_check

    spec = runtime_check("GP651")
    missing = data["missing"]
    parts = []
    if stalled:
        last = data["last_common_step"]
        spread = "" if len(set(steps.values())) <= 1 else (
            " (" + ", ".join(f"rank {k} finished {s}" for k, s in sorted(steps.items())[:MAX_NAMED])
            + f": the last step every rank finished is {last})")
        parts.append(f"the job hung after step {last}{spread}")
    else:
        parts.append("no hang entry that can be read describes a stall going on")
    if said is not None:
        parts.append(said)
    elif stalled:
        where = "; ".join(f"rank {k} " + (f"waits in the {c} at " if (c := data_row(data, k)) else "is at ")
                          + _at(r) for k, r in sorted(stalled.items())[:MAX_NAMED])
        # (a mix of both is a culprit, named above)
        why = ("every rank that wrote an entry waits in a collective" if all(data_row(data, k) for k in stalled)
               else "no rank waits in a collective")
        parts.append(f"{where}; no rank is named as the cause: {why}")
    if missing:
        ks = [int(m["rank"]) for m in missing]
        reasons = sorted({str(m["why"]) for m in missing})
        parts.append(f"{_names(ks)} {'is' if len(ks) == 1 else 'are'} missing: {'; '.join(reasons[:3])}. "
                     f"Where {'it is' if len(ks) == 1 else 'they are'} is not known")
    culprits = [] if said is None else [k for k, r in sorted(stalled.items()) if data_row(data, k) is None]
    first = stalled.get(culprits[0]) if culprits else None
    return Finding(
        code=spec.code, name=spec.name, severity=spec.severity,
        message=f"Across ranks: {'; '.join(parts[:2])}. " + "".join(f"{p}. " for p in parts[2:])
        + f"Each rank's stack and steps up to the hang: {report}.",
        advice=("Fix the line of the rank that never reached the collective (a condition only some ranks take, "
                "an early exit, a rank-dependent number of steps or batches); a rank that is missing may have died "
                "or be stuck in native code: read its log. Give the process group a timeout "
                "(init_process_group(timeout=...)) so a lost rank fails instead of hanging."),
        evidence=(Evidence("ranks_hung", len(stalled), unit="ranks",
                           extra={"culprit_ranks": culprits, "missing_ranks": [m["rank"] for m in missing],
                                  "last_common_step": data["last_common_step"], "world_size": data["world_size"],
                                  "hang_report": report}),),
        location=_loc(first) if first is not None else None, origin="runtime", source=report)


def data_row(data: dict[str, Any], rank: int) -> str | None:
    """The collective ``rank`` waits in, from the section's rows."""
    for row in data["ranks"]:
        if row["rank"] == rank:
            c = row.get("collective")
            return c if isinstance(c, str) else None
    return None


def hang_markdown(section: Any) -> str:
    """The ``hang`` section in markdown, between markers (so a later verdict replaces it in place)."""
    from gpuprof.capture.job.hangseries import series_lines
    from gpuprof.render.markdown import md_code, md_escape

    data = getattr(section, "data", None)
    data = data if isinstance(data, dict) else {}
    lines = [MD_BEGIN, "## The job hung (across ranks)", ""]
    if isinstance(data.get("culprit"), str):
        lines += [f"**Culprit:** {md_escape(data['culprit'])}.", ""]
    if data.get("last_common_step") is not None:
        lines += [f"Last step every rank finished: {md_escape(str(data.get('last_common_step')))}.", ""]
    rows = [r for r in data.get("ranks") or [] if isinstance(r, dict)]
    if rows:
        lines += ["| rank | steps done | waits in | at | resumed |", "|---|---|---|---|---|"]
        for r in rows:
            w = r.get("waiting_at")
            at = md_code(f"{w.get('file')}:{w.get('line')}", cell=True) if isinstance(w, dict) else "(no user line)"
            lines.append(f"| {md_escape(str(r.get('rank')))} | {md_escape(str(r.get('step')))} "
                         f"| {md_escape(str(r.get('collective') or '-'))} | {at} "
                         f"| {md_escape(str(r.get('resumed_at_step') if r.get('resumed_at_step') is not None else 'no'))} |")
        lines.append("")
    for m in data.get("missing") or []:
        if isinstance(m, dict):
            lines.append(f"- rank {md_escape(str(m.get('rank')))} missing: {md_escape(str(m.get('why')))}")
    lines += series_lines(rows)
    lines += ["", f"Every thread's stack: {md_code(str(data.get('hang_report')))}.", MD_END]
    return "\n".join(lines) + "\n"


def add_to_report(report: Any, run_dir: Path, world: int | None) -> None:
    """The hang verdict into a live cross-rank :class:`gpuprof.report.Report` (the end-of-run or window
    gather's), when ``hang.json`` describes one: the ``hang`` section first, its GP651 among the findings."""
    got = hang_verdict(run_dir, world)
    if got is None:
        return
    section, found = got
    report.sections.insert(0, section)
    report.findings = [found, *report.findings]


def write_cross_hang(run_dir: Path, world: int | None) -> Path | None:
    """The verdict into ``report.cross_rank.json``/``.md`` of ``run_dir`` (the rank that just wrote its
    hang.json entry calls it; under hang.json's lock, so two ranks' verdicts are written one after the
    other, the later seeing both entries). A cross-rank report already there (the window's) keeps its
    sections and findings, its earlier verdict replaced (and taken out once every stall resumed); one that
    cannot be read is replaced. Returns the JSON path, or None when there is no verdict. Raises OSError when the files cannot be written."""
    from gpuprof.capture.job.hang import _locked

    with _locked(run_dir):
        got = hang_verdict(run_dir, world)
        jpath, mpath = run_dir / CROSS_JSON, run_dir / CROSS_MD
        doc = _existing(jpath)
        if got is None:  # every stall resumed: an earlier verdict is taken out again
            if doc is not None and any(isinstance(s, dict) and s.get("kind") == HANG_SECTION
                                       for s in doc.get("sections", [])):
                doc["sections"] = [s for s in doc["sections"]
                                   if not (isinstance(s, dict) and s.get("kind") == HANG_SECTION)]
                doc["findings"] = [f for f in doc.get("findings", [])
                                   if not (isinstance(f, dict) and f.get("code") == "GP651")]
                atomic_write(jpath, json.dumps(doc, indent=2) + "\n")
                atomic_write(mpath, _md_with(_text(mpath), ""))
            return None
        section, found = got
        if doc is None:
            from gpuprof.render import render
            from gpuprof.render.jsonout import render_json
            from gpuprof.report import Report

            rep = Report(command="analyze", sections=[section], findings=[found],
                         notes=["written when the hang was detected, from every rank's hang.json entry; the "
                                "end-of-run gather rewrites this file (keeping the hang)"])
            atomic_write(jpath, render_json(rep))
            atomic_write(mpath, render(rep, "markdown"))
            return jpath
        secs = [s for s in doc.get("sections", []) if not (isinstance(s, dict) and s.get("kind") == HANG_SECTION)]
        doc["sections"] = [{"kind": HANG_SECTION, **section.data}, *secs]
        fs = [f for f in doc.get("findings", []) if not (isinstance(f, dict) and f.get("code") == found.code)]
        doc["findings"] = [json.loads(json.dumps(found.to_dict())), *fs]
        atomic_write(jpath, json.dumps(doc, indent=2) + "\n")
        atomic_write(mpath, _md_with(_text(mpath), hang_markdown(section)))
        return jpath


def _existing(path: Path) -> dict[str, Any] | None:
    """The cross-rank report already written (a regular file, a JSON object with list fields), else None."""
    try:
        doc = read_json(path)
    except (OSError, ValueError):
        return None
    if not (isinstance(doc, dict) and doc.get("command") == "analyze" and isinstance(doc.get("sections", []), list)
            and isinstance(doc.get("findings", []), list)):
        return None
    return doc


def _text(path: Path) -> str:
    """A regular file's text (a link, a FIFO, a missing or huge file: "")."""
    try:
        data = read_regular(path, MAX_HANG_JSON_BYTES)
    except OSError:
        return ""
    return data.decode("utf-8", "replace") if data else ""


def _md_with(old: str, block: str) -> str:
    """``old`` markdown with ``block`` in place of its earlier verdict, or after its title."""
    if MD_BEGIN in old and MD_END in old:
        head, rest = old.split(MD_BEGIN, 1)
        return head + block.rstrip("\n") + rest.split(MD_END, 1)[1]
    if not old.strip():
        return "# gpuprof cross-rank report\n\n" + block
    title, _, rest = old.partition("\n")
    return f"{title}\n\n{block}\n{rest.lstrip(chr(10))}"


from gpuprof.render.sections import register_section  # noqa: E402 - the renderer of the section defined above

register_section(HANG_SECTION, markdown=hang_markdown)

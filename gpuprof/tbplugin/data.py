"""The JSON the dashboard draws, built from gpuprof's own analysis and report JSON (no trace parsing here).

Per trace file: :func:`analyse_trace_file` runs the same pipeline as
``gpuprof analyze`` (:func:`gpuprof.analysis.analyze_trace`) and keeps, next to
the summary and findings of the report schema (docs/report-schema.md), the
per-step numbers the charts need (``TraceMetrics.breakdown_per_step`` /
``idle_per_step``: the same step-time and GPU-idle breakdowns the report
gives as means, one row per step). The summary's timeline is kept beside it,
not in it: the run view carries a ``timeline_ref`` per trace and the page
fetches the timeline itself when it is opened (:mod:`gpuprof.tbplugin.timelines`).

Per run: :func:`run_view` joins the trace analyses with the run's
``report.json`` files (a capture run: the runtime checks' findings, the
capture section, one report per rank under torchrun). The findings list is
the trace analysis's findings (what ``gpuprof analyze RUN`` says) plus the
report's findings that the trace analysis cannot make (``origin`` ``runtime``
or ``memory``); each carries its ``origin`` so the page can say where it came
from. They are finished as ``gpuprof analyze RUN`` finishes them
(:func:`gpuprof.flow.finish`): where two describe one problem (GP601 from the
live DataLoader, GP102 from the trace) the overlap policy keeps one.

:func:`compare_views` compares two run views (before/after a fix).

Everything here is torch-free, like ``gpuprof analyze``.
"""

from __future__ import annotations

import os
import statistics
from pathlib import Path
from typing import Any

import msgspec

from gpuprof.errors import GpuprofError, InputError
from gpuprof.report import SCHEMA_VERSION
from gpuprof.saved.figures import busy_share
from gpuprof.saved.types import SavedReport
from gpuprof.tbplugin.errortext import client_error
from gpuprof.tbplugin.runs import Run, rank_of_report
from gpuprof.tbplugin.timelines import collective_lanes, timeline_ref
from gpuprof.trace.breakdown import BREAKDOWN_KEYS, IDLE_KEYS

__all__ = ["analyse_trace_file", "run_view", "compare_views", "read_report", "rel_name", "MAX_REPORT_BYTES"]

MAX_REPORT_BYTES = 64 << 20  # a report.json is a few kB; a huge one is not ours
# the parts of a trace's analysis the page fetches on their own (the `timeline` and `timeline_ranks` routes)
_FETCHED = ("timeline", "rank_timeline")


def analyse_trace_file(path: Path, logdir: Path | None = None) -> dict[str, Any]:
    """Summary, findings and per-step breakdowns of one trace (the analysis ``gpuprof analyze`` runs).

    A rule that raises is not hidden: its code goes to ``failed_rules`` and a
    note says the analysis is incomplete (strict mode, as in the tests,
    raises instead). An unreadable trace raises :class:`InputError`.
    ``logdir``: the file is opened inside it without following links or
    waiting on a FIFO (:mod:`gpuprof.tbplugin.safeopen`); the plugin always
    gives it. The load checks the analysis store's time budget between
    chunks (:func:`gpuprof.tbplugin.store.check_cancelled`).
    """
    from gpuprof.analysis import analyze_trace
    from gpuprof.runner import RuleFailure
    from gpuprof.tbplugin.safeopen import open_in_logdir
    from gpuprof.tbplugin.store import check_cancelled
    from gpuprof.trace.load import load_trace
    from gpuprof.trace.metrics import compute_metrics

    opened = open_in_logdir(logdir, path, peek=2) if logdir is not None else None
    trace = load_trace(path, progress=lambda done, total: check_cancelled(), opened=opened)
    check_cancelled()
    metrics = compute_metrics(trace)
    check_cancelled()
    failures: list[RuleFailure] = []
    ranks: list[Any] = []
    summary, findings = analyze_trace(trace, failures=failures, metrics=metrics, rank_summaries=ranks)
    steps = [{"id": s.id, "time_us": s.dur, "breakdown_us": {k: bd.get(k, 0.0) for k in BREAKDOWN_KEYS},
              "idle_us": {k: idle.get(k, 0.0) for k in IDLE_KEYS}}
             for s, bd, idle in zip(metrics.steps, metrics.breakdown_per_step, metrics.idle_per_step)]
    from gpuprof.render.format import fmt_comm_wait, fmt_mfu

    summary_d = summary.to_dict()
    # the timeline is not part of the run answer (~300 kB a trace): kept here, cached with the analysis, and
    # answered by the `timeline` route when the page asks for it (gpuprof.tbplugin.timelines)
    timeline = summary_d.pop("timeline", None)
    return {"summary": summary_d, "steps": steps, "timeline": timeline, "rank_timeline": collective_lanes(timeline),
            # worded as every renderer words them: the headline's cards for a one-trace run
            "mfu_text": fmt_mfu(summary), "comm_wait_text": fmt_comm_wait(summary),
            "findings": [f.to_dict() for f in findings],
            "failed_rules": sorted({code for code, _ in failures}),
            # the cross-rank merge's input (msgspec builtins: cached and merged later without the trace)
            "rank_summary": msgspec.to_builtins(ranks[0]) if ranks else None}


def read_report(path: Path, logdir: Path | None = None) -> dict[str, Any]:
    """A gpuprof ``report.json`` (docs/report-schema.md), checked by the saved-report reader (:mod:`gpuprof.saved`)
    as ``gpuprof diff`` checks it: the page relies on its shape.

    ``logdir``: read inside it safely (:mod:`gpuprof.tbplugin.safeopen`), as the plugin always does.
    """
    return _read(path, logdir)[0]


def _read(path: Path, logdir: Path | None) -> tuple[dict[str, Any], SavedReport]:
    """The report's JSON object (what the page draws) and its typed form (what the tab computes from)."""
    from gpuprof.saved.read import loaded
    from gpuprof.tbplugin.safeopen import read_in_logdir

    if logdir is not None:
        raw = read_in_logdir(logdir, path, MAX_REPORT_BYTES)
    else:
        try:
            with open(path, "rb") as fh:
                raw = fh.read(MAX_REPORT_BYTES + 1)
        except OSError as err:
            raise InputError(path, f"cannot read the report: {err.strerror or err}") from err
    return loaded(raw, str(path), MAX_REPORT_BYTES)


def run_view(run: Run, logdir: Path, traces: dict[Path, dict[str, Any] | str]) -> dict[str, Any]:
    """Everything the page shows for one run.

    ``traces`` maps each trace file of the run to its :func:`analyse_trace_file`
    result, or to the one-line error that made it unusable.
    """
    notes: list[str] = []
    errors: list[str] = []
    analysed = []
    for p in run.traces:
        res = traces.get(p)
        rel = rel_name(p, logdir)
        if isinstance(res, str):
            errors.append(client_error(res, logdir))
            continue
        if res is None:
            continue
        analysed.append({"file": rel, **{k: v for k, v in res.items() if k not in _FETCHED},
                         "timeline_ref": timeline_ref(rel, res.get("timeline"), res.get("rank_timeline"))})
    reports: list[tuple[Path, dict[str, Any], SavedReport]] = []
    for p in run.reports:
        try:
            reports.append((p, *_read(p, logdir)))
        except GpuprofError as err:
            errors.append(client_error(err, logdir))
    findings = [dict(f, trace=t["file"]) for t in analysed for f in t["findings"]]
    capture = None
    job = None
    for p, doc, saved in reports:
        if job is None and saved.job is not None:  # one process's (under torchrun: the first rank's)
            job = doc["job"]
        findings += [dict(d, trace=None, report=rel_name(p, logdir))
                     for d, f in zip(doc.get("findings", []), saved.findings) if f.origin != "trace"]
        capture = capture or next(iter(saved.sections_of("capture")), None)
        notes += saved.notes
    cross, cross_findings, cross_failed = _cross_rank(analysed, logdir)
    findings += [dict(f, trace=None, scope="cross-rank") for f in cross_findings]
    notes += [f"cross-rank: rule {code} failed ({msg}): the cross-rank analysis is incomplete"
              for code, msg in cross_failed]
    failed = sorted({c for t in analysed for c in t["failed_rules"]} | {c for c, _ in cross_failed} |
                    {c for _, _, saved in reports for c in saved.failed_rules})
    for t in analysed:
        notes += [f"{t['file']}: {n}" for n in t["summary"].get("notes", [])]
    return {"name": run.name, "kind": "capture" if reports else "traces", "headline": _headline(analysed),
            "traces": analysed, "findings": _finished(findings), "failed_rules": failed,
            "ranks": _ranks(analysed, reports, logdir, cross), "cross_rank": cross, "capture": capture, "job": job,
            "snapshots": [rel_name(p, logdir) for p in run.snapshots], "notes": notes, "errors": errors}


def _cross_rank(analysed: list[dict[str, Any]], logdir: Path
                ) -> tuple[dict[str, Any] | None, list[dict[str, Any]], list[tuple[str, str]]]:
    """The ``cross_rank`` section (report JSON layout), its GP7xx findings and the rules that failed.

    The same selection of ranks as ``gpuprof analyze`` (gpuprof.analysis):
    traces with a rank number that are not a one-process "job"; none when
    fewer than two distinct ranks. A GP7xx rule that raises is reported
    (code and one line), never read as "no findings".
    """
    from gpuprof.distributed.analysis import cross_rank
    from gpuprof.distributed.summary import RankSummary

    job = []
    for t in analysed:
        raw = t.get("rank_summary")
        if raw is None:
            continue
        s = msgspec.convert(raw, RankSummary)
        if s.rank is not None and (s.world_size is None or s.world_size > 1):
            job.append(s)
    if len({s.rank for s in job}) < 2:
        return None, [], []
    failures: list[tuple[str, BaseException]] = []
    section, found = cross_rank(job, failures=failures)
    failed = [(code, " ".join(f"{type(err).__name__}: {err}".split())[:200]) for code, err in failures]
    d = section.to_dict()
    for row in d["ranks"]:  # paths relative to the logdir, as everywhere else on the page
        row["path"] = rel_name(Path(row["path"]), logdir)
    return d, [f.to_dict() for f in found], failed


def rel_name(p: Path, logdir: Path) -> str:
    """A file's name on the page and in requests: its path relative to the logdir, with ``/``."""
    return os.path.relpath(p, logdir).replace(os.sep, "/")


def _finished(findings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The run's findings through the one boundary ``gpuprof analyze`` uses (:func:`gpuprof.flow.finish`).

    The overlap policy folds a trace finding into the runtime one that
    supersedes it (GP102 under GP601), links are made, the order is the
    report's; each keeps where it came from (``trace``/``report``/``scope``)
    and gains ``display_message`` and ``display_cost``, its message and cost as every
    renderer draws them (gpuprof.render.format).
    """
    from gpuprof.findings import Finding
    from gpuprof.flow import finish
    from gpuprof.render.web.model import drawn_finding

    where: dict[tuple[str, str, str | None], dict[str, Any]] = {}
    objs = []
    as_written = []  # a report's finding too malformed to read as one (a stranger's file): shown as it is
    for d in findings:
        try:
            f = Finding.from_dict(d)
        except (KeyError, TypeError, ValueError, AttributeError):
            as_written.append(d)
            continue
        objs.append(f)
        where.setdefault((f.code, f.message, f.source), {k: d[k] for k in ("trace", "report", "scope") if k in d})
    done = [drawn_finding(f, where.get((f.code, f.message, f.source))) for f in finish(objs)]
    return done + as_written


def _headline(analysed: list[dict[str, Any]]) -> dict[str, Any]:
    """The run's summary over every analysed step of every trace (all ranks, all spans)."""
    from gpuprof.render.web.model import TraceFigures, headline

    steps = [s for t in analysed for s in t["steps"]]
    figures = [TraceFigures.of(t["summary"], (d.get("name", "") for d in t["summary"].get("devices", [])))
               for t in analysed]
    one = analysed[0] if len(analysed) == 1 else {}
    return {
        **headline(figures, [s["time_us"] for s in steps], len(steps)),  # the standalone page's cards too
        "mfu_text": one.get("mfu_text"), "comm_wait_text": one.get("comm_wait_text"),
        "breakdown_us": _mean_of(steps, "breakdown_us", BREAKDOWN_KEYS),
        "idle_us": _mean_of(steps, "idle_us", IDLE_KEYS),
    }


def _mean_of(steps: list[dict[str, Any]], key: str, keys: tuple[str, ...]) -> dict[str, float]:
    n = len(steps) or 1
    return {k: sum(s[key].get(k, 0.0) for s in steps) / n for k in keys}


def _ranks(analysed: list[dict[str, Any]], reports: list[tuple[Path, dict[str, Any], SavedReport]], logdir: Path,
           cross: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """One row per rank when the run has several: from the traces' ``distributedInfo`` and the per-rank reports.

    With a cross-rank section, its numbers are the rows' (one source: the
    table under "straggler: rank N" says the same): each rank's median step,
    its wait in collectives per step and whether it is the straggler. A rank
    with a longer step in a synchronous job is usually the one that waits, so
    "vs fastest" (the step time against the fastest rank's) is given only
    without a cross-rank section.
    """
    rows: dict[int, dict[str, Any]] = {}

    def row_of(r: int, world: int | None = None) -> dict[str, Any]:
        return rows.setdefault(r, {"rank": r, "traces": 0, "steps": 0, "step_times": [], "timed": [], "findings": 0,
                                   "report": None, "world_size": world, "idle": []})

    for t in analysed:
        s = t["summary"]
        if s.get("rank") is None:
            continue
        row = row_of(s["rank"], s.get("world_size"))
        row["traces"] += 1
        row["steps"] += s["num_steps"]
        row["step_times"] += [st["time_us"] for st in t["steps"]]
        if s.get("gpu_utilization") is not None:
            row["timed"].append((s["gpu_busy_us"], s["step_time_mean_us"], s["num_steps"]))
        row["findings"] += len(t["findings"])
        row["idle"].extend(st["idle_us"] for st in t["steps"])
    for p, _, saved in reports:
        r = rank_of_report(p)
        if r is None:
            continue
        row = row_of(r)
        row["report"] = rel_name(p, logdir)
        row["findings"] += sum(1 for f in saved.findings if f.origin != "trace")
        cap = next(iter(saved.sections_of("capture")), {})
        if not row["step_times"] and cap.get("step_time_median_ms") is not None:  # a number: the reader checked it
            row["step_times"] = [cap["step_time_median_ms"] * 1000.0]
    if len(rows) < 2:
        return []
    out = []
    for r in sorted(rows):
        row = rows[r]
        idle = row.pop("idle")
        times = row.pop("step_times")
        row["step_time_us"] = statistics.median(times) if times else None
        row["gpu_utilization"] = busy_share(row.pop("timed"))  # the run's one definition (gpuprof.saved.figures)
        row["idle_us"] = sum(sum(i.values()) for i in idle) / len(idle) if idle else None
        out.append(row)
    times = [r["step_time_us"] for r in out if r["step_time_us"] is not None]
    fastest = min(times) if times else None
    for row in out:  # the slowest rank sets the pace; how far behind the fastest each one is
        row["vs_fastest"] = (row["step_time_us"] / fastest - 1.0) if fastest and row["step_time_us"] is not None else None
    if cross is not None:
        by_rank = {x["rank"]: x for x in cross["ranks"]}
        for row in out:
            x = by_rank.get(row["rank"])
            row["vs_fastest"] = None
            row["wait_us"] = x["wait_us"] if x else None
            row["straggler"] = row["rank"] in cross["stragglers"]
            if x is not None:
                row["step_time_us"] = x["step_us"]
    return out


def compare_views(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Run ``b`` against run ``a`` (before → after): ``gpuprof diff``'s document (docs/diff.md) of the two runs.

    Computed by :func:`gpuprof.diff.compare.diff_reports`, the code of ``gpuprof diff``, under ``diff``, and
    drawn by the tab with ``GP.diff`` of :mod:`gpuprof.render.web`, the code of ``gpuprof diff --html``: one
    answer. ``before``/``after`` name the two runs.
    """
    from gpuprof.diff.compare import diff_reports

    return {"before": a["name"], "after": b["name"], "diff": diff_reports(_as_report(a), _as_report(b), (a["name"], b["name"]))}


def _as_report(view: dict[str, Any]) -> dict[str, Any]:
    """A run view in the report's JSON form, as ``gpuprof diff`` reads it."""
    return {"schema_version": SCHEMA_VERSION, "inputs": [view["name"]], "traces": [t["summary"] for t in view["traces"]],
            "findings": view["findings"]}

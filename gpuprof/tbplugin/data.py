"""The JSON the dashboard draws, built from gpuprof's own analysis and report JSON (no trace parsing here).

Per trace file: :func:`analyse_trace_file` runs the same pipeline as
``gpuprof analyze`` (:func:`gpuprof.analysis.analyze_trace`) and keeps, next to
the summary and findings of the report schema (docs/report-schema.md), the
per-step numbers the charts need (``TraceMetrics.breakdown_per_step`` /
``idle_per_step``: the same step-time and GPU-idle breakdowns the report
gives as means, one row per step).

Per run: :func:`run_view` joins the trace analyses with the run's
``report.json`` files (a capture run: the runtime checks' findings, the
capture section, one report per rank under torchrun). The findings list is
the trace analysis's findings (what ``gpuprof analyze RUN`` says) plus the
report's findings that the trace analysis cannot make (``origin`` ``runtime``
or ``memory``); each carries its ``origin`` so the page can say where it came
from. Two of them may describe one problem from two measurements (GP601 from
the live DataLoader, GP102 from the trace); the page shows both, labelled.

:func:`compare_views` compares two run views (before/after a fix).

Everything here is torch-free, like ``gpuprof analyze``.
"""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path
from typing import Any

import msgspec

from gpuprof.errors import GpuprofError, InputError
from gpuprof.tbplugin.runs import Run, rank_of_report
from gpuprof.trace.metrics import BREAKDOWN_KEYS, IDLE_KEYS

__all__ = ["analyse_trace_file", "run_view", "compare_views", "read_report", "MAX_REPORT_BYTES"]

MAX_REPORT_BYTES = 64 << 20  # a report.json is a few kB; a huge one is not ours


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
    from gpuprof.analysis import RuleFailure, analyze_trace
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
    steps = [{"id": s.id, "time_us": s.dur,
              "breakdown_us": {k: bd.get(k, 0.0) for k in BREAKDOWN_KEYS},
              "idle_us": {k: idle.get(k, 0.0) for k in IDLE_KEYS}}
             for s, bd, idle in zip(metrics.steps, metrics.breakdown_per_step, metrics.idle_per_step)]
    return {"summary": summary.to_dict(), "steps": steps,
            "findings": [f.to_dict() for f in findings],
            "failed_rules": sorted({code for code, _ in failures}),
            # the cross-rank merge's input (msgspec builtins: cached and merged later without the trace)
            "rank_summary": msgspec.to_builtins(ranks[0]) if ranks else None}


def read_report(path: Path, logdir: Path | None = None) -> dict[str, Any]:
    """A gpuprof ``report.json`` (docs/report-schema.md), checked enough that the page can rely on its shape.

    ``logdir``: read inside it safely (:mod:`gpuprof.tbplugin.safeopen`), as the plugin always does.
    """
    from gpuprof.tbplugin.safeopen import read_in_logdir

    if logdir is not None:
        raw = read_in_logdir(logdir, path, MAX_REPORT_BYTES)
    else:
        try:
            with open(path, "rb") as fh:
                raw = fh.read(MAX_REPORT_BYTES + 1)
        except OSError as err:
            raise InputError(path, f"cannot read the report: {err.strerror or err}") from err
    if len(raw) > MAX_REPORT_BYTES:
        raise InputError(path, f"report larger than {MAX_REPORT_BYTES >> 20} MiB; not a gpuprof report")
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as err:
        raise InputError(path, f"not valid JSON ({err})") from err
    if not isinstance(doc, dict) or not str(doc.get("schema_version", "")).startswith("1."):
        raise InputError(path, "not a gpuprof report of schema 1.x (no schema_version 1.x)")
    for key in ("traces", "findings", "sections", "notes", "failed_rules"):
        if not isinstance(doc.get(key, []), list):
            raise InputError(path, f"field {key!r} is not a list")
    return doc


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
        rel = _rel(p, logdir)
        if isinstance(res, str):
            errors.append(res)
            continue
        if res is None:
            continue
        analysed.append({"file": rel, **res})
    reports = []
    for p in run.reports:
        try:
            reports.append((p, read_report(p, logdir)))
        except GpuprofError as err:
            errors.append(str(err))
    findings = [dict(f, trace=t["file"]) for t in analysed for f in t["findings"]]
    capture = None
    for p, doc in reports:
        for f in doc.get("findings", []):
            if isinstance(f, dict) and f.get("origin") != "trace":
                findings.append(dict(f, trace=None, report=_rel(p, logdir)))
        for s in doc.get("sections", []):
            if isinstance(s, dict) and s.get("kind") == "capture" and capture is None:
                capture = s
        notes += [n for n in doc.get("notes", []) if isinstance(n, str)]
    cross, cross_findings, cross_failed = _cross_rank(analysed, logdir)
    findings += [dict(f, trace=None, scope="cross-rank") for f in cross_findings]
    notes += [f"cross-rank: rule {code} failed ({msg}): the cross-rank analysis is incomplete"
              for code, msg in cross_failed]
    failed = sorted({c for t in analysed for c in t["failed_rules"]} | {c for c, _ in cross_failed} |
                    {c for _, doc in reports for c in doc.get("failed_rules", []) if isinstance(c, str)})
    for t in analysed:
        notes += [f"{t['file']}: {n}" for n in t["summary"].get("notes", [])]
    return {
        "name": run.name,
        "kind": "capture" if reports else "traces",
        "headline": _headline(analysed),
        "traces": analysed,
        "findings": _sorted_findings(findings),
        "failed_rules": failed,
        "ranks": _ranks(analysed, reports, logdir),
        "cross_rank": cross,
        "capture": capture,
        "snapshots": [_rel(p, logdir) for p in run.snapshots],
        "notes": notes,
        "errors": errors,
    }


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
        row["path"] = _rel(Path(row["path"]), logdir)
    return d, [f.to_dict() for f in found], failed


def _rel(p: Path, logdir: Path) -> str:
    return os.path.relpath(p, logdir).replace(os.sep, "/")


def _sorted_findings(findings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Most expensive first, then by severity, as reports sort them (gpuprof.findings.sort_findings)."""
    rank = {"error": 0, "warning": 1, "info": 2}
    return sorted(findings, key=lambda f: (f.get("cost_us_per_step") is None, -(f.get("cost_us_per_step") or 0.0),
                                           rank.get(str(f.get("severity")), 3), str(f.get("code"))))


def _headline(analysed: list[dict[str, Any]]) -> dict[str, Any]:
    """The run's summary over every analysed step of every trace (all ranks, all spans)."""
    steps = [s for t in analysed for s in t["steps"]]
    times = [s["time_us"] for s in steps]
    total = sum(times)
    devices = []
    for t in analysed:
        for d in t["summary"].get("devices", []):
            if d.get("name") and d["name"] not in devices:
                devices.append(d["name"])
    busy = [t["summary"]["gpu_busy_us"] * t["summary"]["num_steps"] for t in analysed
            if t["summary"].get("gpu_utilization") is not None]
    util_time = sum(t["summary"]["step_time_mean_us"] * t["summary"]["num_steps"] for t in analysed
                    if t["summary"].get("gpu_utilization") is not None)
    return {
        "traces": len(analysed),
        "devices": devices,
        "steps": len(steps),
        "step_time_us": statistics.median(times) if times else None,
        "step_time_mean_us": total / len(times) if times else None,
        # busy / step time over the traces that have GPU activity (the metric's definition, summed over traces)
        "gpu_utilization": sum(busy) / util_time if util_time > 0 else None,
        "breakdown_us": _mean_of(steps, "breakdown_us", BREAKDOWN_KEYS),
        "idle_us": _mean_of(steps, "idle_us", IDLE_KEYS),
    }


def _mean_of(steps: list[dict[str, Any]], key: str, keys: tuple[str, ...]) -> dict[str, float]:
    n = len(steps) or 1
    return {k: sum(s[key].get(k, 0.0) for s in steps) / n for k in keys}


def _ranks(analysed: list[dict[str, Any]], reports: list[tuple[Path, dict[str, Any]]], logdir: Path
           ) -> list[dict[str, Any]]:
    """One row per rank when the run has several: from the traces' ``distributedInfo`` and the per-rank reports."""
    rows: dict[int, dict[str, Any]] = {}
    for t in analysed:
        s = t["summary"]
        r = s.get("rank")
        if r is None:
            continue
        row = rows.setdefault(r, {"rank": r, "traces": 0, "steps": 0, "step_times": [], "busy": 0.0, "time": 0.0,
                                  "findings": 0, "report": None, "world_size": s.get("world_size")})
        row["traces"] += 1
        row["steps"] += s["num_steps"]
        row["step_times"] += [st["time_us"] for st in t["steps"]]
        if s.get("gpu_utilization") is not None:
            row["busy"] += s["gpu_busy_us"] * s["num_steps"]
            row["time"] += s["step_time_mean_us"] * s["num_steps"]
        row["findings"] += len(t["findings"])
        row.setdefault("idle", []).extend(st["idle_us"] for st in t["steps"])
    for p, doc in reports:
        r = rank_of_report(p)
        if r is None:
            continue
        row = rows.setdefault(r, {"rank": r, "traces": 0, "steps": 0, "step_times": [], "busy": 0.0, "time": 0.0,
                                  "findings": 0, "report": None, "world_size": None})
        row["report"] = _rel(p, logdir)
        row["findings"] += sum(1 for f in doc.get("findings", []) if isinstance(f, dict) and f.get("origin") != "trace")
        cap = next((s for s in doc.get("sections", []) if isinstance(s, dict) and s.get("kind") == "capture"), None)
        if cap and not row["step_times"] and isinstance(cap.get("step_time_median_ms"), (int, float)):
            row["step_times"] = [cap["step_time_median_ms"] * 1000.0]
    if len(rows) < 2:
        return []
    out = []
    for r in sorted(rows):
        row = rows[r]
        idle = row.pop("idle", [])
        times = row.pop("step_times")
        busy, time = row.pop("busy"), row.pop("time")
        row["step_time_us"] = statistics.median(times) if times else None
        row["gpu_utilization"] = busy / time if time > 0 else None
        row["idle_us"] = sum(sum(i.values()) for i in idle) / len(idle) if idle else None
        out.append(row)
    times = [r["step_time_us"] for r in out if r["step_time_us"] is not None]
    fastest = min(times) if times else None
    for row in out:  # the slowest rank sets the pace; how far behind the fastest each one is
        row["vs_fastest"] = (row["step_time_us"] / fastest - 1.0) if fastest and row["step_time_us"] is not None else None
    return out


def compare_views(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Run ``b`` against run ``a`` (before → after): step time, breakdowns, findings added and removed.

    Findings are matched by code and source line (the same problem in the
    same place); a code that stays but moves shows as removed and added.
    """
    ha, hb = a["headline"], b["headline"]

    def delta(x: float | None, y: float | None) -> dict[str, float | None]:
        return {"before": x, "after": y, "change": (y / x - 1.0) if x and y is not None else None}

    def key(f: dict[str, Any]) -> tuple[str, str]:
        loc = f.get("location") or {}
        return (str(f.get("code")), f"{loc.get('file')}:{loc.get('line')}" if loc else "")

    ka = {key(f): f for f in a["findings"]}
    kb = {key(f): f for f in b["findings"]}
    return {
        "before": a["name"],
        "after": b["name"],
        "step_time_us": delta(ha["step_time_us"], hb["step_time_us"]),
        "step_time_mean_us": delta(ha["step_time_mean_us"], hb["step_time_mean_us"]),
        "gpu_utilization": {"before": ha["gpu_utilization"], "after": hb["gpu_utilization"]},
        "breakdown_us": {k: {"before": ha["breakdown_us"][k], "after": hb["breakdown_us"][k]} for k in BREAKDOWN_KEYS},
        "idle_us": {k: {"before": ha["idle_us"][k], "after": hb["idle_us"][k]} for k in IDLE_KEYS},
        "removed": [_brief(f) for k, f in ka.items() if k not in kb],
        "added": [_brief(f) for k, f in kb.items() if k not in ka],
        "kept": [{"before": _brief(ka[k]), "after": _brief(kb[k])} for k in ka if k in kb],
    }


def _brief(f: dict[str, Any]) -> dict[str, Any]:
    return {k: f.get(k) for k in ("code", "name", "severity", "message", "cost_us_per_step", "cost_share", "origin")}

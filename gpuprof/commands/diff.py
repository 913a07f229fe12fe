"""``gpuprof diff BEFORE AFTER``'s library path: the comparison of two runs, before rendering (docs/diff.md)."""

from __future__ import annotations

import json
import math
import os
from typing import TYPE_CHECKING, Any

from gpuprof.errors import InputError, UsageError

if TYPE_CHECKING:  # pragma: no cover - annotations only
    from gpuprof.saved.types import SavedReport

__all__ = ["load_side", "compare", "diff_json"]


def load_side(path: str, jobs: int) -> SavedReport:
    """A run as a typed report: a saved report.json read back, or the analysis of traces / a run directory
    (local, or a URL: a trace, a prefix or a glob read through fsspec, see gpuprof.remote), checked as one."""
    from gpuprof.remote import is_url
    from gpuprof.saved.read import checked, is_saved_report, read_saved

    if not is_url(path):
        if is_saved_report(path):
            return read_saved(path)
        if not (os.path.isfile(path) or os.path.isdir(path)):
            if not os.path.exists(path):
                raise InputError(path, "no such file or directory")
            raise InputError(path, "not a trace file, run directory or report.json")
    from gpuprof.analysis import analyze

    return checked(analyze(path, jobs=jobs, timeline=False).to_dict(), path)  # a diff draws no timeline


def compare(before: str, after: str, threshold: str | None, metric: str,
            jobs: int | None) -> tuple[dict[str, Any], list[str]]:
    """``gpuprof diff BEFORE AFTER``'s comparison, before rendering, and every file it read (for -o checks).

    The command line's and the MCP server's one path: a bad threshold or metric is a :class:`UsageError`, raised
    before any trace is read; a gate that cannot judge is an InputError.
    """
    from gpuprof.diff.compare import diff_reports
    from gpuprof.diff.gate import judge, parse_threshold
    from gpuprof.pool import affinity_cpus

    limit = None
    if threshold is not None:
        try:
            limit = parse_threshold(threshold)
        except ValueError as err:
            raise UsageError(str(err), param_hint="--fail-on-regression") from None
    from gpuprof.diff.compare import METRICS

    if metric not in METRICS:  # before any trace is read
        raise UsageError(f"unknown metric {metric!r} (one of: {', '.join(METRICS)})", param_hint="--metric")
    n = jobs or affinity_cpus()
    b, a = load_side(before, n), load_side(after, n)
    from gpuprof.redact import scrub

    diff = diff_reports(b, a, (scrub(before), scrub(after)))  # the labels shown: a URL's credentials masked
    if limit is not None:
        diff["regression"] = judge(diff, metric, limit)
        _refuse_unjudged(diff["regression"], before, after)
    return diff, [before, after] + [t for d in (b, a) for t in _trace_paths(d)]


def diff_json(diff: dict[str, Any]) -> str:
    """The diff as ``--format json`` prints it (docs/diff.md)."""
    from gpuprof.render.jsonout import json_safe

    return json.dumps(json_safe(diff), indent=2, allow_nan=False) + "\n"


def _refuse_unjudged(verdict: dict[str, Any], before: str, after: str) -> None:
    """A gate that cannot judge fails loudly (exit 2): a side without the metric never reads as "no regression"."""
    if verdict["worse_by"] is not None:
        return
    metric = verdict["metric"]
    if verdict["before"] is None or verdict["after"] is None:
        side = before if verdict["before"] is None else after
        raise InputError(side, f"--fail-on-regression: {metric} is not measured in this run (no analysed step "
                               "or no GPU activity), so the gate can neither pass nor fail")
    for side, what, value in ((before, metric, verdict["before"]), (after, metric, verdict["after"]),
                              (after, f"{metric}'s noise", verdict["noise"])):
        if value is not None and not math.isfinite(value):
            raise InputError(side, f"--fail-on-regression: {what} is {value!r} here, not a finite number, so the "
                                   "gate can neither pass nor fail")
    if verdict["before"] != 0:
        raise InputError(before, f"--fail-on-regression: {metric}'s change relative to {verdict['before']!r} here "
                                 "is not a finite number, so the gate can neither pass nor fail")
    raise InputError(before, f"--fail-on-regression: {metric} is 0 here, so a change relative to it is undefined")


def _trace_paths(report: SavedReport) -> list[str]:
    return [t.path for t in report.traces]

"""``gpuprof diff BEFORE AFTER``: compare two runs (docs/diff.md)."""

from __future__ import annotations

import json
import math
import os
import sys
from typing import Any

import click

from gpuprof.errors import EXIT_FINDINGS, EXIT_OK, InputError

__all__ = ["diff_cmd", "load_side", "compare", "diff_json"]

EPILOG = """\b
Exit codes:
  0  compared (and, with --fail-on-regression, no regression)
  1  --fail-on-regression: the metric got worse by more than the threshold and the noise
  2  bad input or usage (one line naming the file)
  3  internal gpuprof error
"""


def load_side(path: str, jobs: int) -> dict[str, Any]:
    """A report in JSON form: a saved report.json read back, or the analysis of traces / a run directory
    (local, or a URL: a trace, a prefix or a glob read through fsspec, see gpuprof.remote)."""
    from gpuprof.remote import is_url
    from gpuprof.reportfile import is_saved_report, read_report_dict

    if is_url(path):
        from gpuprof.analysis import analyze

        return analyze(path, jobs=jobs, timeline=False).to_dict()  # a diff draws no timeline
    if is_saved_report(path):
        return read_report_dict(path)
    if not (os.path.isfile(path) or os.path.isdir(path)):
        if not os.path.exists(path):
            raise InputError(path, "no such file or directory")
        raise InputError(path, "not a trace file, run directory or report.json")
    from gpuprof.analysis import analyze

    return analyze(path, jobs=jobs, timeline=False).to_dict()  # a diff draws no timeline


@click.command("diff", epilog=EPILOG)
@click.argument("before", type=click.Path(path_type=str))
@click.argument("after", type=click.Path(path_type=str))
@click.option("--format", "fmt", type=click.Choice(("terminal", "json", "markdown")), default="terminal", show_default=True,
              help="Output format. json follows docs/diff.md.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write the diff to this file.")
@click.option("--fail-on-regression", "threshold", metavar="PCT",
              help="Exit 1 when --metric got worse by more than PCT per cent (5% or 5; a bare 0.05 is refused as ambiguous) "
                   "and more than the per-step noise.")
@click.option("--metric", default="step_time", show_default=True,
              help="The metric --fail-on-regression judges: step_time, step_time_mean, gpu_utilization, gpu_busy, gpu_idle, "
                   "breakdown.PART or idle.PART (docs/diff.md).")
@click.option("--html", "html_out", type=click.Path(dir_okay=False), metavar="DIFF.html",
              help="Also write the diff as one standalone, offline HTML page.")
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=None, help="Traces analysed at once.")
def diff_cmd(before: str, after: str, fmt: str, output: str | None, threshold: str | None, metric: str,
             html_out: str | None, jobs: int | None) -> None:
    """Compare two runs: BEFORE and AFTER are trace files, run directories or saved report.json files.

    Shows step time and every part of it before and after, the operators
    (by name and input shapes) and kernels that got slower or faster, and the
    findings fixed, new and changed, with each fixed finding's predicted
    saving against the measured change.
    """
    from gpuprof.cli.common import emit_text

    diff, sources = compare(before, after, threshold, metric, jobs)
    if fmt == "json":
        text = diff_json(diff)
    elif fmt == "markdown":
        from gpuprof.diff.render import render_diff_markdown

        text = render_diff_markdown(diff)
    else:
        from gpuprof.diff.render import render_diff_terminal

        text = render_diff_terminal(diff, color=None if output is None and sys.stdout.isatty() else False)
    def page() -> str:
        from gpuprof.htmlpage.page import diff_page

        return diff_page(diff)

    emit_text(text, output, "the diff", sources, html_out, page)
    reg = diff["regression"]
    sys.exit(EXIT_FINDINGS if reg is not None and reg["regressed"] else EXIT_OK)


def compare(before: str, after: str, threshold: str | None, metric: str,
            jobs: int | None) -> tuple[dict[str, Any], list[str]]:
    """``gpuprof diff BEFORE AFTER``'s comparison, before rendering, and every file it read (for -o checks).

    The command line's and the MCP server's one path: a bad threshold or metric is a click usage error, raised
    before any trace is read; a gate that cannot judge is an InputError.
    """
    from gpuprof.analysis import default_analyze_jobs
    from gpuprof.diff.compare import diff_reports
    from gpuprof.diff.gate import judge, parse_threshold

    limit = None
    if threshold is not None:
        try:
            limit = parse_threshold(threshold)
        except ValueError as err:
            raise click.BadParameter(str(err), param_hint="--fail-on-regression") from None
    from gpuprof.diff.compare import METRICS

    if metric not in METRICS:  # before any trace is read
        raise click.BadParameter(f"unknown metric {metric!r} (one of: {', '.join(METRICS)})", param_hint="--metric")
    n = jobs or default_analyze_jobs()
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


def _trace_paths(doc: dict[str, Any]) -> list[str]:
    return [str(t.get("path")) for t in doc.get("traces", []) if isinstance(t, dict)]

"""``gpuprof diff BEFORE AFTER``: compare two runs (docs/diff.md)."""

from __future__ import annotations

import sys

import click

from gpuprof.cli.common import usage_errors
from gpuprof.errors import EXIT_FINDINGS, EXIT_OK

__all__ = ["diff_cmd"]

EPILOG = """\b
Exit codes:
  0  compared (and, with --fail-on-regression, no regression)
  1  --fail-on-regression: the metric got worse by more than the threshold and the noise
  2  bad input or usage (one line naming the file)
  3  internal gpuprof error
"""


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
@usage_errors
def diff_cmd(before: str, after: str, fmt: str, output: str | None, threshold: str | None, metric: str,
             html_out: str | None, jobs: int | None) -> None:
    """Compare two runs: BEFORE and AFTER are trace files, run directories or saved report.json files.

    Shows step time and every part of it before and after, the operators
    (by name and input shapes) and kernels that got slower or faster, and the
    findings fixed, new and changed, with each fixed finding's predicted
    saving against the measured change.
    """
    from gpuprof.cli.common import emit_text
    from gpuprof.commands.diff import compare, diff_json

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

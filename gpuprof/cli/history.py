"""``gpuprof history LOGDIR``: step time, utilisation, data loading, memory and findings over runs (docs/history.md)."""

from __future__ import annotations

import click

__all__ = ["history_cmd"]

EPILOG = """\b
Exit codes:
  0  shown
  2  bad input or usage (one line naming the directory)
  3  internal gpuprof error
"""


@click.command("history", epilog=EPILOG)
@click.argument("logdir", metavar="LOGDIR_OR_URL", type=click.Path(path_type=str))
@click.option("--format", "fmt", type=click.Choice(("terminal", "json")), default="terminal", show_default=True,
              help="json: runs in time order with their figures, change_points and finding_changes.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write the history to this file.")
@click.option("--html", "html_out", type=click.Path(dir_okay=False), metavar="HISTORY.html",
              help="Also write a chart of every figure over the runs as one standalone, offline HTML page.")
def history_cmd(logdir: str, fmt: str, output: str | None, html_out: str | None) -> None:
    """Show every run's saved report.json under LOGDIR (or a URL prefix) over time, marking change points.

    Per run: median step time, GPU utilisation, data-loading share, memory
    peak and finding codes; a change point is a run where a figure shifted
    by more than 4 times the runs' noise (pooled MAD), and each finding code
    is named at the run where it appeared or disappeared.
    """
    from gpuprof.cli.common import emit_text
    from gpuprof.history.render import history_dict, history_json, history_terminal
    from gpuprof.history.runs import read_history

    hist = read_history(logdir)
    text = history_json(hist) if fmt == "json" else history_terminal(hist)
    read = [rep for r in hist.runs for rep in r.reports]
    def page() -> str:
        from gpuprof.history.html import history_page

        return history_page(history_dict(hist))

    emit_text(text, output, "the history", read, html_out, page)

"""``--to wandb`` / ``--to mlflow`` of ``gpuprof analyze`` (and the check ``gpuprof run`` makes before launching).

A tracker whose package is missing is a usage error before any work (exit 2, one line naming what to
install); a tracker that fails while sending is one line on stderr and the command's exit code stays the
analysis's own: the report was made and shown, only its copy in the tracker is missing (docs/trackers.md).
"""

from __future__ import annotations

import os
import tempfile
from typing import TYPE_CHECKING, Any, Callable

import click

if TYPE_CHECKING:  # pragma: no cover - annotations only
    from gpuprof.report import Report

__all__ = ["to_option", "check_targets", "send_report"]

NAMES = ("wandb", "mlflow")  # gpuprof.trackers.TRACKERS's keys (not imported: `--help` stays light)


def to_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--to", "to", multiple=True, type=click.Choice(NAMES), metavar="TRACKER",
        help="Also send the findings table, the figures per step window and the report files to this "
             "experiment tracker: wandb or mlflow (repeatable; docs/trackers.md).")(fn)


def check_targets(to: tuple[str, ...]) -> tuple[str, ...]:
    """The trackers asked for, each once; a usage error (exit 2) when one's package is not installed."""
    if not to:  # before any import: `analyze` without --to loads nothing of gpuprof.trackers
        return ()
    from gpuprof.trackers import missing_package, parse_targets

    targets = parse_targets(to)
    for name in targets:
        line = missing_package(name)
        if line is not None:
            raise click.UsageError(f"--to {name}: {line}")
    return targets


def send_report(report: Report, targets: tuple[str, ...], html_out: str | None, sources: list[str]) -> None:
    """Send ``report`` to ``targets``: report.md, report.json and the HTML page (written to a temporary
    folder, removed after), the --html page when one was written, and the local trace files."""
    if not targets:  # before any import: `analyze` without --to loads nothing of this (tests/cli/test_start_imports.py)
        return
    import msgspec

    from gpuprof.htmlpage.page import report_page
    from gpuprof.render import render
    from gpuprof.render.jsonout import render_json
    from gpuprof.trackers.payload import Artefact
    from gpuprof.trackers.send import send

    doc = msgspec.json.decode(render_json(report))
    with tempfile.TemporaryDirectory(prefix="gpuprof-to-") as tmp:
        files = {"report.md": render(report, "markdown", color=False), "report.json": render_json(report)}
        if not html_out:
            files["report.html"] = report_page(report)
        artefacts = []
        for name, text in files.items():
            path = os.path.join(tmp, name)
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(text)
            artefacts.append(Artefact(path, "html" if name.endswith(".html") else "report"))
        if html_out:
            artefacts.append(Artefact(html_out, "html"))
        artefacts += [Artefact(t.path, "trace") for t in report.traces if os.path.isfile(t.path)]
        for sent in send(doc, targets, run_name(sources), artefacts):
            click.echo(f"gpuprof: {sent.line}", err=True)


def run_name(sources: list[str]) -> str:
    """The name of the run in the tracker: the first input's name (a run directory's, or a trace's stem)."""
    from gpuprof.redact import redact

    if not sources:
        return "gpuprof"
    if sources[0] == "-":
        return "stdin"
    first = redact(sources[0]).rstrip("/\\")
    name = os.path.basename(first) or first
    if name == "report.json":  # a capture's saved report: the run is its directory
        name = os.path.basename(os.path.dirname(first)) or name
    for suffix in (".json.gz", ".json", ".pt.trace", ".gz"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return name or "gpuprof"

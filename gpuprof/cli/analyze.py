"""``gpuprof analyze``: diagnose PyTorch profiler traces."""

from __future__ import annotations

import os
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Callable

import click

from gpuprof.atomic import names_a_directory, refuse_directory_name, refuse_input_as_output
from gpuprof.cli.common import emit_report, input_files, report_options, usage_errors
from gpuprof.cli.trackers import check_targets, send_report, to_option
from gpuprof.errors import InputError
from gpuprof.remote import TraceFile, Url, is_url

__all__ = ["analyze_cmd"]

# Files at least this big get a progress bar when stderr is a terminal.
PROGRESS_MIN_BYTES = 32 * 1024 * 1024


@click.command("analyze")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=str))
@report_options
@click.option("--option", "rule_options", multiple=True, metavar="CODE.NAME=VALUE",
              help="Set a rule threshold, e.g. GP101.min_utilization=0.6 (see `gpuprof explain CODE`).")
@click.option(
    "--annotate",
    type=click.Path(dir_okay=True, path_type=str),
    metavar="OUT.pt.trace.json.gz",
    help="Write the trace back with each finding on its own track (open in Perfetto). "
    "For a directory of traces or several paths, or an OUT ending in /, OUT is a directory: one annotated "
    "file per trace.",
)
@click.option("--html", "html_out", type=click.Path(dir_okay=False, path_type=str), metavar="REPORT.html",
              help="Also write the report as one standalone, offline HTML page (summary, step-time chart, findings, views).")
@click.option("--timeline", "with_timeline", is_flag=True, default=False,
              help="Keep each trace's timeline (traces[].timeline, the lanes the --html page draws) in the report "
                   "(--format json, -o): for a saved report.json that --html renders later. Built anyway for --html "
                   "and --to; left out otherwise (it costs ~0.15 s and ~40 MB per 200 MB of trace).")
@click.option("--progress/--no-progress", default=None, help="Progress bar for big files (default: on a terminal).")
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=None,
              help="Traces analysed at once, each in its own process (default: one per free CPU and per 16 MiB "
                   "of trace text, from 32 MiB in all; smaller jobs are read one by one, docs/distributed.md).")
@click.option("--dask", "dask", metavar="SCHEDULER", default=None,
              help="Analyse each trace on a Dask cluster's workers (e.g. tcp://host:8786); they read the traces "
              "themselves (URLs or a shared file system). See docs/distributed.md.")
@to_option
@usage_errors
def analyze_cmd(paths: tuple[str, ...], fmt: str, output: str | None, select: tuple[str, ...], ignore: tuple[str, ...],
                fail_on: str, rule_options: tuple[str, ...], annotate: str | None, html_out: str | None,
                with_timeline: bool, progress: bool | None, jobs: int | None, dask: str | None, to: tuple[str, ...]
                ) -> None:
    """Diagnose a trace file (.json/.json.gz), a directory of traces, or several of them.

    PATHS are what torch.profiler wrote: export_chrome_trace's files, or the
    log directory of tensorboard_trace_handler (a capture's run directory).
    When the traces are of more than one rank of a distributed job, a
    cross-rank section compares them (stragglers, waits, collectives).
    """
    from gpuprof.commands.analyze import analysis_report, is_saved_report

    targets = check_targets(to)  # a tracker's missing package: exit 2 before any work
    for name, what in ((output, "the report"), (html_out, "the HTML page")):
        if name:  # `-o out/`: one line, before any work (never a file named `out`)
            refuse_directory_name(name, what)
    saved = len(paths) == 1 and is_saved_report(paths[0])
    if saved and annotate:
        raise InputError(paths[0], "--annotate needs the traces; a saved report.json has only their summaries")
    for p in paths if annotate else ():
        if p == "-" or is_url(p) or not (os.path.isfile(p) or os.path.isdir(p)):
            # the annotator reads the trace a second time, which a pipe cannot give
            raise InputError(p, "--annotate needs local trace files or directories, "
                             "not a pipe, standard input or a URL")
    show_progress = progress if progress is not None else sys.stderr.isatty()
    with ExitStack() as stack:
        factory = _progress_factory(stack) if show_progress and not saved else None
        report = analysis_report(paths, select, ignore, rule_options, all_sections=fmt == "json", jobs=jobs,
                                 dask=dask, progress=factory, timeline=with_timeline or bool(html_out) or bool(targets),
                                 on_rank_done=_rank_counter() if show_progress and dask else None)
    sources = [paths[0]] if saved else input_files(report)
    if output:  # checked before --annotate or --html writes anything (a saved report's traces too), and only here
        refuse_input_as_output(output, [*sources, *input_files(report)] if saved else sources)
    if annotate:
        _annotate(report, annotate)
    if html_out:
        _html(report, html_out, sources)
    code = emit_report(report, fmt, output, fail_on, output_checked=True)
    send_report(report, targets, html_out, [paths[0]] if saved else list(paths))
    sys.exit(code)


def _rank_counter() -> Callable[[int, int], None]:
    """Progress of a ``--dask`` run on stderr: ranks done out of all, one line rewritten in place."""

    def show(done: int, total: int) -> None:
        click.echo(f"\rgpuprof: {done}/{total} traces analysed on the cluster", err=True, nl=done == total)

    return show


def _html(report: Any, out: str, sources: list[str]) -> None:
    """The report's HTML page (its findings finished already, --select/--ignore applied: gpuprof.flow)."""
    from gpuprof.atomic import write_output
    from gpuprof.htmlpage.page import report_page
    from gpuprof.render.safe import visible

    refuse_input_as_output(out, sources, "--html")
    write_output(out, report_page(report), "the HTML page")
    click.echo(f"gpuprof: HTML page written to {visible(out)}", err=True)


def _progress_factory(stack: ExitStack) -> Callable[[TraceFile], Any]:
    from rich.markup import escape
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

    from gpuprof.render.safe import visible

    bar = stack.enter_context(
        Progress(TextColumn("[bold]{task.description}"), BarColumn(), DownloadColumn(), TimeRemainingColumn(),
                 transient=True, console=_stderr_console())
    )

    def factory(path: TraceFile) -> Callable[[int, int], None] | None:
        if isinstance(path, Url):
            return None  # no cheap size: a remote read shows no bar
        try:
            size = path.stat().st_size
        except OSError:
            return None
        if size < PROGRESS_MIN_BYTES:
            return None
        # the description is read as rich markup: a file name may hold "[...]" and control characters
        task = bar.add_task(escape(visible(path.name)), total=size)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        return update

    return factory


def _stderr_console() -> Any:
    from rich.console import Console

    return Console(stderr=True)


def _annotate(report: Any, out: str) -> None:
    from gpuprof.render.annotate import annotate_trace, findings_of_trace
    from gpuprof.render.safe import visible

    traces = [t.path for t in report.traces]
    sources = input_files(report)
    as_dir = os.path.isdir(out) or names_a_directory(out)  # `annotated/`: into the directory, made if need be
    if len(traces) == 1 and not as_dir and len(report.inputs) == 1:
        refuse_input_as_output(out, sources, "--annotate")
        annotate_trace(traces[0], findings_of_trace(report.findings, traces[0], traces), out)
        click.echo(f"gpuprof: annotated trace written to {visible(out)}", err=True)
        return
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as err:
        raise InputError(out, f"cannot create the directory: {err.strerror or err}") from None
    dests = [(t, os.path.join(out, f"{name}.gpuprof.json.gz")) for t, name in zip(traces, _unique_stems(traces), strict=True)]
    for _, dest in dests:  # all checked before the first is written
        refuse_input_as_output(dest, sources, "--annotate")
    for t, dest in dests:
        annotate_trace(t, findings_of_trace(report.findings, t, traces), dest)
    click.echo(f"gpuprof: {len(traces)} annotated trace{'s' if len(traces) != 1 else ''} written to {visible(out)}",
               err=True)


def _unique_stems(traces: list[str]) -> list[str]:
    """One output name per trace: its stem, then ``-2``, ``-3``... for a stem already taken (rank0/t.json, rank1/t.json)."""
    taken: set[str] = set()
    out = []
    for t in traces:
        stem = name = _stem(t)
        n = 1
        while name in taken:
            n += 1
            name = f"{stem}-{n}"
        taken.add(name)
        out.append(name)
    return out


def _stem(trace: str) -> str:
    name = Path(trace).name
    for suffix in (".json.gz", ".json"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name

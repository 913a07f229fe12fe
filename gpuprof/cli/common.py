"""Options and output handling shared by the commands that produce a report."""

from __future__ import annotations

import functools
import os
import sys
from typing import TYPE_CHECKING, Any, Callable

import click

from gpuprof.atomic import refuse_input_as_output, write_output
from gpuprof.errors import EXIT_FINDINGS, EXIT_OK, UsageError
from gpuprof.findings import Severity
from gpuprof.render.safe import visible

if TYPE_CHECKING:  # pragma: no cover - annotations only: the report model (numpy) loads with a command, not for --help
    from gpuprof.report import Report

__all__ = ["report_options", "emit_report", "input_files", "option_settings", "usage_errors"]

FORMATS = ("terminal", "json", "markdown")


def usage_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A command's callback whose library path's :class:`gpuprof.errors.UsageError` becomes click's usage error
    (one line with ``(see 'gpuprof CMD --help')``, exit 2), raised inside the command so click names it."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except UsageError as err:
            if err.param_hint:
                raise click.BadParameter(err.message, param_hint=err.param_hint) from None
            raise click.UsageError(err.message) from None

    return wrapper


def option_settings(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Add ``--option CODE.NAME=VALUE`` (repeatable): a threshold of a code, as ``gpuprof explain CODE`` lists."""
    return click.option(
        "--option",
        "code_options",
        multiple=True,
        metavar="CODE.NAME=VALUE",
        help="Set a threshold of a code, e.g. GP510.capacity_threshold=0.8 (see `gpuprof explain CODE`).",
    )(fn)


NEVER = "never"  # --fail-on value: report only, never exit 1 for findings


def report_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Add --format/-o/--select/--ignore/--fail-on to a command."""
    options = [
        click.option("--format", "fmt", type=click.Choice(FORMATS), default="terminal", show_default=True,
                     help="Output format. json follows docs/report-schema.md."),
        click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write the report to this file."),
        click.option("--select", multiple=True, metavar="CODES", help="Only these codes or prefixes (GP1,GP203)."),
        click.option("--ignore", multiple=True, metavar="CODES", help="Drop these codes or prefixes."),
        click.option(
            "--fail-on",
            type=click.Choice([s.value for s in Severity] + [NEVER]),
            default="warning",
            show_default=True,
            help=f"Exit 1 when a finding at or above this severity remains ({NEVER}: exit 0 whatever is found).",
        ),
    ]
    for opt in reversed(options):
        fn = opt(fn)
    return fn


def input_files(report: Report) -> list[str]:
    """Every file the report was made from: the inputs as given and each trace found in a directory."""
    return list(report.inputs) + [t.path for t in report.traces]


def emit_report(report: Report, fmt: str, output: str | None, fail_on: str, *, output_checked: bool = False) -> int:
    """Render and write ``report`` (its findings finished already: gpuprof.flow.finish); return its exit code.

    ``output_checked``: the command refused an ``output`` that is one of the report's inputs already, before
    any work or other file (:func:`gpuprof.atomic.refuse_input_as_output`), so it is not checked again."""
    from gpuprof.render import render

    if fmt == "json":
        # written as the encoder's UTF-8 bytes: decoding a report of hostile 48 MiB names into a str (2 or 4 bytes a
        # character once one name holds a non-Latin-1 character, such as a cut name's "…") would double its memory
        from gpuprof.render.jsonout import report_json_bytes

        data = report_json_bytes(report) + b"\n"
        if output:
            if not output_checked:
                refuse_input_as_output(output, input_files(report))
            write_output(output, data, "the report")
            click.echo(f"gpuprof: report written to {visible(os.fspath(output))}", err=True)
        else:
            sys.stdout.flush()
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()
    elif output:
        if not output_checked:
            refuse_input_as_output(output, input_files(report))
        text = render(report, fmt, color=False)
        write_output(output, text, "the report")  # atomic: a full disk leaves the previous report intact
        click.echo(f"gpuprof: report written to {visible(os.fspath(output))}", err=True)
    else:
        text = render(report, fmt, color=None)
        sys.stdout.write(text)
        if not text.endswith("\n"):
            sys.stdout.write("\n")
    if fail_on == NEVER:  # a report wanted, not a gate (e.g. a CPU run whose findings vary with the load)
        return EXIT_OK
    bar = Severity.parse(fail_on)
    return EXIT_FINDINGS if report.count_at_or_above(bar) else EXIT_OK


def emit_text(text: str, output: str | None, what: str, sources: list[str],
              html_out: str | None = None, page: Callable[[], str] | None = None) -> None:
    """Write a command's ``text`` to ``output`` (atomically; never over one of its ``sources``) or stdout, and its
    HTML ``page`` to ``html_out``; each written file named in one line on stderr (``what``: "the diff")."""
    if html_out and page is not None:
        refuse_input_as_output(html_out, sources, "--html")
        write_output(html_out, page(), "the HTML page")
        click.echo(f"gpuprof: HTML page written to {visible(html_out)}", err=True)
    if output:
        refuse_input_as_output(output, sources)
        write_output(output, text, what)
        click.echo(f"gpuprof: {what.removeprefix('the ')} written to {visible(output)}", err=True)
    else:
        sys.stdout.write(text)

"""``gpuprof memory``: where the GPU memory went (snapshots and profiler traces).

``gpuprof memory FILE [options]`` analyses one snapshot pickle or trace;
``gpuprof memory diff A [B]`` ranks the allocation sites that grew. The
group routes a first argument that is not a subcommand name to ``show``, so
both spellings work without ``gpuprof memory show FILE``.
"""

from __future__ import annotations

import sys
from typing import Any, Callable

import click

from gpuprof.atomic import refuse_input_as_output
from gpuprof.cli.common import emit_report, option_settings, report_options, usage_errors

__all__ = ["memory_cmd"]


class _DefaultGroup(click.Group):
    """A group whose first argument, when not a subcommand, is handed to the ``show`` command."""

    default_cmd = "show"

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("-h", "--help"):
            args = [self.default_cmd, *args]
        return super().parse_args(ctx, args)

    def format_usage(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        formatter.write_usage(ctx.command_path, "FILE [FILE...] [OPTIONS] | diff A [B] [OPTIONS]")


def _size(_ctx: Any, _param: Any, value: str | None) -> int | None:
    from gpuprof.units import parse_bytes

    if value is None:
        return None
    try:
        return parse_bytes(value)
    except ValueError as err:
        raise click.BadParameter(str(err)) from None


@click.group("memory", cls=_DefaultGroup, invoke_without_command=False)
def memory_cmd() -> None:
    """Analyse a CUDA memory snapshot or a profiler trace with [memory] events.

    \b
    FILE: a snapshot pickle (torch.cuda.memory._dump_snapshot or gpuprof's
    capture), or a trace recorded with profile_memory=True. Snapshots are
    loaded with a restricted unpickler: a pickle that tries to import or
    call anything is rejected and nothing in it runs.
    \b
      gpuprof memory snapshot.pickle
      gpuprof memory snapshot.pickle --html memory.html
      gpuprof memory rank0.pickle rank1.pickle  (one cross-rank view)
      gpuprof memory diff before.pickle after.pickle
      gpuprof memory diff trace.json.gz        (first vs last profiler step)
    """


# Threshold flags kept from before the registry: each is a thin alias of one --option (no default of its own;
# the default is the option's, declared in gpuprof.memory.codes and shown by `gpuprof explain CODE`).
_SHOW_ALIASES = {"capacity_threshold": "GP510.capacity_threshold", "fragmentation_ratio": "GP511.fragmentation_ratio",
                 "fragmentation_min": "GP511.fragmentation_min_bytes", "pending_share": "GP513.pending_share"}
_DIFF_ALIASES = {"min_growth": "GP520.min_growth"}


def _alias(flag: str, target: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    return click.option(flag, metavar="VALUE", help=f"Alias of --option {target}=VALUE.")


def _settings(aliases: dict[str, str], given: dict[str, str | None], items: tuple[str, ...]) -> dict[str, Any]:
    """The --option settings, alias flags first (an explicit --option for the same threshold wins)."""
    from gpuprof.commands.options import parse_option_settings

    written = [f"{aliases[k]}={v}" for k, v in given.items() if v is not None]
    return parse_option_settings(tuple(written) + tuple(items), ("memory",), "gpuprof memory")


@memory_cmd.command("show")
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=str), metavar="FILE [FILE...]")
@report_options
@option_settings
@click.option("--html", "html_out", type=click.Path(dir_okay=False, path_type=str), metavar="OUT.html",
              help="Also write a self-contained HTML timeline (no network access needed).")
@click.option("--device-memory", callback=_size, metavar="SIZE",
              help="Device capacity (e.g. 80GiB) when the input does not record it.")
@_alias("--capacity-threshold", _SHOW_ALIASES["capacity_threshold"])
@_alias("--fragmentation-ratio", _SHOW_ALIASES["fragmentation_ratio"])
@_alias("--fragmentation-min", _SHOW_ALIASES["fragmentation_min"])
@_alias("--pending-share", _SHOW_ALIASES["pending_share"])
@click.option("--top", type=click.IntRange(1, 1000), default=10, show_default=True, help="Rows in holder tables.")
@click.option("--skip-frames", multiple=True, metavar="REGEX",
              help="More filename patterns to skip when looking for the first user frame.")
@usage_errors
def show_cmd(files: tuple[str, ...], fmt: str, output: str | None, select: tuple[str, ...], ignore: tuple[str, ...],
             fail_on: str, code_options: tuple[str, ...], html_out: str | None, device_memory: int | None,
             capacity_threshold: str | None, fragmentation_ratio: str | None, fragmentation_min: str | None,
             pending_share: str | None, top: int, skip_frames: tuple[str, ...]) -> None:
    """Analyse one snapshot or trace FILE; several FILEs (one per rank: S0 S1 S2 S3) also get one cross-rank view."""
    from gpuprof.commands.memory import memory_ranks_report, memory_report

    settings = _settings(_SHOW_ALIASES, {"capacity_threshold": capacity_threshold,
                                         "fragmentation_ratio": fragmentation_ratio,
                                         "fragmentation_min": fragmentation_min, "pending_share": pending_share},
                         code_options)
    if len(files) > 1:
        if html_out:
            raise click.UsageError("--html draws one file; give one FILE with it")
        if output:  # before any work, and only here
            refuse_input_as_output(output, list(files))
        report = memory_ranks_report(files, select, ignore, settings, device_memory, top, skip_frames)
        sys.exit(emit_report(report, fmt, output, fail_on, output_checked=True))
    file = files[0]
    report, data, analyses = memory_report(file, select, ignore, settings, device_memory, top, skip_frames)
    findings = report.findings
    if output:  # checked before --html writes anything
        refuse_input_as_output(output, [file])
    if html_out:
        from gpuprof.memory.html import write_html
        from gpuprof.render.safe import visible

        refuse_input_as_output(html_out, [file], "--html")
        write_html(data, analyses, findings, html_out)
        click.echo(f"gpuprof: memory timeline written to {visible(html_out)}", err=True)
    sys.exit(emit_report(report, fmt, output, fail_on, output_checked=True))


@memory_cmd.command("diff")
@click.argument("before", type=click.Path(path_type=str))
@click.argument("after", type=click.Path(path_type=str), required=False)
@report_options
@option_settings
@_alias("--min-growth", _DIFF_ALIASES["min_growth"])
@click.option("--top", type=click.IntRange(1, 1000), default=15, show_default=True, help="Rows in the growth table.")
@click.option("--skip-frames", multiple=True, metavar="REGEX",
              help="More filename patterns to skip when looking for the first user frame.")
@usage_errors
def diff_cmd(before: str, after: str | None, fmt: str, output: str | None, select: tuple[str, ...],
             ignore: tuple[str, ...], fail_on: str, code_options: tuple[str, ...], min_growth: str | None, top: int,
             skip_frames: tuple[str, ...]) -> None:
    """Rank the allocation sites that grew from BEFORE to AFTER (the leak finder).

    With one trace and no AFTER, compares the end of its first and last
    profiler steps.
    """
    from gpuprof.commands.memory import memory_diff_report

    settings = _settings(_DIFF_ALIASES, {"min_growth": min_growth}, code_options)
    report = memory_diff_report(before, after, select, ignore, settings, top, skip_frames)
    sys.exit(emit_report(report, fmt, output, fail_on))

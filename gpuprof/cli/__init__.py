"""The ``gpuprof`` command line: a click group, one module per command.

Library functions return data; this package prints it and maps errors to exit
codes (see ``gpuprof.errors``). No traceback reaches the user for bad input.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

import click

from gpuprof.version import __version__

if TYPE_CHECKING:  # pragma: no cover
    from gpuprof.errors import GpuprofError

# gpuprof's own error classes and the error lines' helpers (scrub: a URL's credentials masked; visible: control
# characters shown) are imported where an error is handled or a command runs: `gpuprof --help` needs neither

__all__ = ["main", "cli"]

EPILOG = """\b
Exit codes:
  0  no finding at or above the --fail-on bar
  1  findings at or above the --fail-on bar
  2  bad input or usage
  3  internal gpuprof error, including a rule that raised (its code is
     named; set GPUPROF_DEBUG=1 for the traceback): the analysis is incomplete
"""


class _Group(click.Group):
    """A group that turns gpuprof's own errors into one line and an exit code.

    The line names files found in directories (and so chosen by whoever wrote
    them): control characters in it are made visible, never sent to the terminal.
    """

    def main(self, args: Any = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:
        """Click's main, with a usage error as one line (click prints usage, a hint, a blank line, the error)."""
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.exceptions.NoArgsIsHelpError as err:  # bare "gpuprof": the help, as click prints it
            err.show()
            sys.exit(err.exit_code)
        except click.UsageError as err:
            from gpuprof.redact import scrub
            from gpuprof.render.safe import visible

            where = err.ctx.command_path if err.ctx is not None else (prog_name or "gpuprof")
            click.echo(f"gpuprof: error: {visible(scrub(err.format_message()))} (see '{visible(where)} --help')", err=True)
            sys.exit(err.exit_code)
        except click.ClickException as err:  # a bad file argument and the like: click's own one line
            err.show()
            sys.exit(err.exit_code)
        except click.exceptions.Abort:
            click.echo("Aborted!", err=True)
            sys.exit(1)
        # without standalone mode click returns ctx.exit()'s code instead of exiting with it
        sys.exit(rv if isinstance(rv, int) else 0)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*_COMMANDS, *self.commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in _COMMANDS:
            import importlib

            module, attr, _ = _COMMANDS[cmd_name]
            self.add_command(getattr(importlib.import_module(module), attr), cmd_name)
        return self.commands.get(cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list of ``gpuprof --help`` from each command's summary in ``_COMMANDS``, without importing
        the command modules (their options, and through them the analysis' modules, load only for their own
        help or a run). Click shortens a summary to the row exactly as it shortens the command's own help:
        each summary is the first paragraph of its command's help (``tests/cli/test_help_summaries.py``)."""
        names = self.list_commands(ctx)
        if not names:
            return
        limit = formatter.width - 6 - max(len(n) for n in names)
        rows = []
        for name in names:
            cmd = self.commands.get(name) or click.Command(name, help=_COMMANDS[name][2])
            if not cmd.hidden:
                rows.append((name, cmd.get_short_help_str(limit)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def invoke(self, ctx: click.Context) -> Any:
        from gpuprof.errors import EXIT_BAD_INPUT, EXIT_INTERNAL, GpuprofError
        from gpuprof.redact import scrub
        from gpuprof.render.safe import visible
        from gpuprof.torchdep import TORCH_HINT, is_torch_missing

        try:
            return super().invoke(ctx)
        except GpuprofError as err:
            if os.environ.get("GPUPROF_DEBUG"):
                _print_tracebacks(err)
            click.echo(f"gpuprof: error: {visible(scrub(str(err)))}", err=True)
            ctx.exit(err.exit_code)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise
        except KeyboardInterrupt:
            click.echo("gpuprof: interrupted", err=True)
            ctx.exit(130)
        except MemoryError:
            click.echo("gpuprof: error: out of memory while analysing the input", err=True)
            ctx.exit(EXIT_INTERNAL)
        except Exception as err:  # noqa: BLE001 - last line of defence, reported, not swallowed
            if is_torch_missing(err):
                # a command that captures, run where torch is not installed: what to install, not a traceback
                click.echo(f"gpuprof: error: {TORCH_HINT}", err=True)
                ctx.exit(EXIT_BAD_INPUT)
            if os.environ.get("GPUPROF_DEBUG"):
                # the traceback, then still exit 3: Python's own exit 1 would read as "findings"
                import traceback  # an error path's module: not imported by a run that goes well

                click.echo(scrub("".join(traceback.format_exception(err)).rstrip()), err=True)
            click.echo(
                f"gpuprof: internal error: {type(err).__name__}: {visible(scrub(str(err)))} "
                "(a gpuprof bug; rerun with GPUPROF_DEBUG=1 for the traceback)",
                err=True,
            )
            ctx.exit(EXIT_INTERNAL)


def _print_tracebacks(err: GpuprofError) -> None:
    """Under GPUPROF_DEBUG: the traceback of each rule that raised (other errors are the input's, not code's)."""
    from gpuprof.errors import RuleError
    from gpuprof.redact import scrub

    if isinstance(err, RuleError):
        import traceback

        for code, cause in err.failures:
            click.echo(f"gpuprof: traceback of rule {code}:", err=True)
            click.echo(scrub("".join(traceback.format_exception(cause)).rstrip()), err=True)


@click.group(cls=_Group, epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="gpuprof")
def cli() -> None:
    """Diagnose PyTorch profiler traces and CUDA memory snapshots."""


# name -> (module, attribute, summary): a command's module is imported when the command is run or asked for its
# own help, so `gpuprof analyze` never imports diff's, memory's or rules' code and `gpuprof --help` imports none
# (docs/performance.md, start-up). The summary is the first paragraph of the command's help, for the list.
_COMMANDS: dict[str, tuple[str, str, str]] = {
    "analyze": ("gpuprof.cli.analyze", "analyze_cmd",
                "Diagnose a trace file (.json/.json.gz), a directory of traces, or several of them."),
    "diff": ("gpuprof.cli.diff", "diff_cmd",
             "Compare two runs: BEFORE and AFTER are trace files, run directories or saved report.json files."),
    "explain": ("gpuprof.cli.rules", "explain_cmd",
                "Explain a finding code (or a name): what it detects, why it matters, its options and examples."),
    "export": ("gpuprof.cli.export", "export_cmd",
               "Write a run's tables, one file per table, from a trace file, a run directory or a saved report.json."),
    "history": ("gpuprof.cli.history", "history_cmd",
                "Show every run's saved report.json under LOGDIR (or a URL prefix) over time, marking change points."),
    "mcp": ("gpuprof.cli.mcp", "mcp_cmd",
            "Serve analyze, diff, memory, history, export, explain and rules to a coding agent over MCP (stdio)."),
    "memory": ("gpuprof.cli.memory", "memory_cmd",
               "Analyse a CUDA memory snapshot or a profiler trace with [memory] events."),
    "rules": ("gpuprof.cli.rules", "rules_cmd",
              "List every finding code: trace rules, memory findings and capture's runtime checks."),
    "run": ("gpuprof.cli.run", "run_cmd",
            "Run a training script or launcher job, unchanged, with gpuprof in every process."),
    "trigger": ("gpuprof.cli.trigger", "trigger_cmd",
                "Record the next N steps of the gpuprof capture running as PID, into a trace of its own."),
    "try": ("gpuprof.cli.trycmd", "try_cmd",
            "Run the unchanged job with each suggested setting and measure which one pays, on this machine."),
}


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point."""
    cli.main(args=argv, prog_name="gpuprof")


if __name__ == "__main__":  # pragma: no cover
    main(sys.argv[1:])

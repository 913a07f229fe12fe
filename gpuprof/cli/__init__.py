"""The ``gpuprof`` command line: a click group, one module per command.

Library functions return data; this package prints it and maps errors to exit
codes (see ``gpuprof.errors``). No traceback reaches the user for bad input.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from gpuprof.errors import EXIT_BAD_INPUT, EXIT_INTERNAL, GpuprofError, RuleError
from gpuprof.redact import scrub  # every line printed about an error: a URL's credentials masked
from gpuprof.render.safe import visible
from gpuprof.torchdep import TORCH_HINT, is_torch_missing
from gpuprof.version import __version__

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

            module, attr = _COMMANDS[cmd_name]
            self.add_command(getattr(importlib.import_module(module), attr), cmd_name)
        return self.commands.get(cmd_name)

    def invoke(self, ctx: click.Context) -> Any:
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
    if isinstance(err, RuleError):
        import traceback

        for code, cause in err.failures:
            click.echo(f"gpuprof: traceback of rule {code}:", err=True)
            click.echo(scrub("".join(traceback.format_exception(cause)).rstrip()), err=True)


@click.group(cls=_Group, epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="gpuprof")
def cli() -> None:
    """Diagnose PyTorch profiler traces and CUDA memory snapshots."""


# name -> (module, attribute): a command's module is imported when the command is run or listed (help),
# so `gpuprof analyze` never imports diff's, memory's or rules' code (docs/performance.md, start-up)
_COMMANDS = {
    "analyze": ("gpuprof.cli.analyze", "analyze_cmd"),
    "diff": ("gpuprof.cli.diff", "diff_cmd"),
    "explain": ("gpuprof.cli.rules", "explain_cmd"),
    "export": ("gpuprof.cli.export", "export_cmd"),
    "history": ("gpuprof.cli.history", "history_cmd"),
    "mcp": ("gpuprof.cli.mcp", "mcp_cmd"),
    "memory": ("gpuprof.cli.memory", "memory_cmd"),
    "rules": ("gpuprof.cli.rules", "rules_cmd"),
    "run": ("gpuprof.cli.run", "run_cmd"),
    "trigger": ("gpuprof.cli.trigger", "trigger_cmd"),
    "try": ("gpuprof.cli.trycmd", "try_cmd"),
}


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point."""
    cli.main(args=argv, prog_name="gpuprof")


if __name__ == "__main__":  # pragma: no cover
    main(sys.argv[1:])

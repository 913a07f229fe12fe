"""``gpuprof run``: run an unchanged training script (or a launcher: torchrun, accelerate launch) under gpuprof.

The command line is split by hand before click sees it: gpuprof's options
come first, then ``--`` and a command, ``-m MODULE`` and its arguments, or a
script and its arguments. Everything after that belongs to the user's program,
even words that look like gpuprof's options (``train.py --logdir x`` is the
script's ``--logdir``), as with ``python -m``.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import click

from gpuprof.cli.trackers import check_targets, to_option

__all__ = ["run_cmd"]

DEFAULT_LOGDIR = "gpuprof_logs"  # gpuprof.capture.config's, not imported: `--help` stays light (tests/run/test_run_cli.py)

_META = "gpuprof.run.command"

EPILOG = """\b
Forms:
  gpuprof run [OPTIONS] train.py [ARGS]          a Python script
  gpuprof run [OPTIONS] -m package.module [ARGS] a module, as python -m
  gpuprof run [OPTIONS] -- python train.py [ARGS]
  gpuprof run [OPTIONS] -- torchrun --nproc-per-node 2 train.py [ARGS]
  gpuprof run [OPTIONS] -- accelerate launch train.py [ARGS]

\b
Exit code: the command's own (a command killed by a signal: the same
signal, 128+N in a shell); 2 when the command cannot be started (no
such script, a program named without --, no command, a --to tracker
whose package is not installed).
"""


class _RunCommand(click.Command):
    """Splits off the user's command before click parses gpuprof's own options (``gpuprof run`` and ``gpuprof try``)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        own, kind, rest = _split(self, list(args))
        ctx.meta[_META] = (kind, tuple(rest))
        return super().parse_args(ctx, own)


def _split(cmd: click.Command, args: list[str]) -> tuple[list[str], str, list[str]]:
    """(gpuprof's options, kind of command, the command and its arguments)."""
    takes_value: set[str] = set()
    flags: set[str] = set()
    for p in cmd.params:
        if isinstance(p, click.Option):
            (flags if p.is_flag or p.count else takes_value).update([*p.opts, *p.secondary_opts])
    own: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            return own, "command", args[i + 1:]
        if a == "-m":
            return own, "module", args[i + 1:]
        if a.startswith("-m") and not a.startswith("--"):
            return own, "module", [a[2:], *args[i + 1:]]
        name = a.split("=", 1)[0]
        if name in takes_value:
            own.append(a)
            if "=" not in a and i + 1 < len(args):
                own.append(args[i + 1])
                i += 1
            i += 1
            continue
        if a in flags or (a.startswith("-") and a != "-"):
            own.append(a)  # a flag, or an unknown option: click names it in its usage error
            i += 1
            continue
        return own, "script", args[i:]
    return own, "script", []


@click.command("run", cls=_RunCommand, epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--logdir", default=DEFAULT_LOGDIR, show_default=True, metavar="DIR",
              help="Where each process writes its run directory.")
@click.option("--run-name", default=None, metavar="NAME",
              help="The run directory's name (default: a timestamp; under torchrun, the job's run id).")
@click.option("--step-function", default=None, metavar="MODULE:FUNCTION",
              help="Each call of this function is one step (for a script with no optimizer, or to choose "
                   "the step); __main__, the script's name or its path (train.py:step) for a function of the "
                   "script itself, outer.inner for a function defined in a function.")
@click.option("--hang-timeout", type=click.FloatRange(min=0), default=None, metavar="SECONDS",
              help="Write a hang report when no step ends for this long (0: off; default: the capture's).")
@click.option("--max-auto-windows", type=click.IntRange(min=0), default=None, metavar="N",
              help="Record at most N automatic windows when the steady state breaks (default: the capture's).")
@click.option("--no-trigger", is_flag=True, help="Do not record a window on demand (gpuprof trigger PID).")
@click.option("--no-watch", is_flag=True, help="No per-step watch over the whole job.")
@click.option("--verbose", is_flag=True,
              help="Print gpuprof's messages during the run (window summaries) on stderr, as they come; by "
                   "default they go to gpuprof.log in each run directory and one card is printed at the end.")
@click.option("--no-html", is_flag=True, help="Do not write report.html in the run directory at the end.")
@to_option
@click.pass_context
def run_cmd(ctx: click.Context, logdir: str, run_name: str | None, step_function: str | None,
            hang_timeout: float | None, max_auto_windows: int | None, no_trigger: bool, no_watch: bool,
            verbose: bool, no_html: bool, to: tuple[str, ...]) -> None:
    """Run a training script or launcher job, unchanged, with gpuprof in every process.

    Every Python process the command starts is profiled once it trains (its
    first optimizer step, or a Lightning / Hugging Face Trainer): one report
    per process or rank, and the cross-rank report, as gpuprof.profile
    writes them. The program's output, signals and exit code are its own.
    """
    # the launcher's modules only when a job is launched: `gpuprof --help` stays light (tests/test_package.py)
    from gpuprof.run.launch import (
        Command,
        RunUsageError,
        exit_like,
        launch,
        logdir_state,
        no_step_note,
        resolve,
        wrote_something,
    )
    from gpuprof.run.options import CaptureOptions, RunOptions, parse_step_function

    kind, rest = ctx.meta[_META]
    if step_function is not None:
        try:
            spec = parse_step_function(step_function)
        except ValueError as err:
            raise RunUsageError(f"{err}") from None
        if spec.path is not None and not os.path.isfile(spec.path):  # a FIFO or a directory is refused too
            from gpuprof.render.safe import visible

            what = "not a regular file" if os.path.exists(spec.path) else "no such file"
            raise RunUsageError(f"--step-function {visible(spec.path)}: {what}")
    if run_name is not None and run_name.strip() in ("", ".", ".."):
        raise RunUsageError(f"--run-name {run_name!r} names no directory under the logdir")
    targets = check_targets(to)  # a tracker's missing package: exit 2 before the job starts
    command: Command = resolve(kind, rest)
    capture = CaptureOptions(watch=not no_watch, trigger=not no_trigger, hang_timeout=hang_timeout,
                             max_auto_windows=max_auto_windows,
                             # the end-of-run report of rank 0 goes to them (gpuprof.capture.end.trackers)
                             to=",".join(targets) if targets else None)
    _say_unsupported(capture.given())
    opts = RunOptions(logdir=logdir, run=run_name, step_function=step_function, capture=capture, verbose=verbose)
    before = logdir_state(logdir)
    status = launch(command, opts)
    after = logdir_state(logdir)
    if status >= 0 and status != 130 and not wrote_something(before, after):
        click.echo(no_step_note(opts, command.argv, status), err=True)
    elif not verbose:
        _print_card(logdir, before, after, html=not no_html)
    ctx.exit(exit_like(status))


_DEFAULTS = {"watch": True, "trigger": True}


def _print_card(logdir: str, before: dict[str, int], after: dict[str, int], *, html: bool) -> None:
    """The end-of-run card (gpuprof.run.card), once, after the job's last line; a failure of ours is one line."""
    import sys

    from gpuprof.render.width import width_for  # not the terminal renderer: the card loads no rich, no numpy
    from gpuprof.run.card import end_card

    try:
        card = end_card(logdir, before, after, html=html, width=width_for(sys.stderr.isatty()))
    except Exception as err:  # noqa: BLE001 - the job's exit code is what matters; say it once
        from gpuprof.render.safe import one_line

        click.echo(f"gpuprof run: the end-of-run card failed ({type(err).__name__}: {one_line(str(err))}); "
                   f"the reports are in {logdir}", err=True)
        return
    if card is not None:
        click.echo(card, err=True)


def _say_unsupported(capture: dict[str, Any]) -> None:
    """Options asked for that this gpuprof's capture does not have yet: said once, then ignored."""
    asked = [k for k, v in capture.items() if _DEFAULTS.get(k) != v]
    if not asked:  # the defaults: CaptureConfig not imported (16 ms of the launcher's CPU)
        return
    from gpuprof.capture.config import CaptureConfig

    known = {f.name for f in dataclasses.fields(CaptureConfig)}
    missing = sorted(k for k in asked if k not in known)
    if missing:
        names = ", ".join("--" + k.replace("_", "-") if k not in _DEFAULTS else "--no-" + k for k in missing)
        click.echo(f"gpuprof run: this gpuprof's capture has no {names} yet; ignored", err=True)

"""``gpuprof trigger PID [--steps N]``: record the next N steps of a running capture (docs/run.md)."""

from __future__ import annotations

import click

from gpuprof.errors import GpuprofError

__all__ = ["trigger_cmd"]


def _int(text: str, what: str) -> int:
    try:
        return int(text.strip(), 10)
    except ValueError:
        raise GpuprofError(f"{what} {text!r} is not a whole number") from None


@click.command("trigger")
@click.argument("pid")
@click.option("--steps", "steps", default="5", show_default=True, metavar="N",
              help="Steps to record (1-1000), after one warm-up step.")
def trigger_cmd(pid: str, steps: str) -> None:
    """Record the next N steps of the gpuprof capture running as PID, into a trace of its own.

    PID may be any rank of a torchrun job, or the torchrun launcher: every rank of that run records. The
    window is analysed with the run's others and listed in report.json (job.windows, reason "trigger").
    """
    from gpuprof.capture.job.trigger import describe, trigger

    n, p = _int(steps, "--steps"), _int(pid, "PID")
    reached = trigger(p, n)  # TriggerError: one line, exit 2
    click.echo(f"gpuprof: asked {len(reached)} process{'es' if len(reached) != 1 else ''} to record the next {n} "
               f"step{'s' if n != 1 else ''}:")
    for reg in reached:
        click.echo(f"  {describe(reg)}")

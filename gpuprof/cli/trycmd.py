"""``gpuprof try``: run the unchanged job for a baseline and with each variant, and measure what pays (docs/try.md).

The command line is split as ``gpuprof run``'s (gpuprof/cli/run.py): gpuprof's options first, then a script,
``-m MODULE`` or ``--`` and a command, whose arguments are the job's own.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import click

from gpuprof.cli.run import _split

__all__ = ["try_cmd"]

_META = "gpuprof.try.command"

EPILOG = """\b
Forms:
  gpuprof try [OPTIONS] train.py [ARGS]
  gpuprof try [OPTIONS] -m package.module [ARGS]
  gpuprof try [OPTIONS] -- python train.py [ARGS]
  gpuprof try [OPTIONS] -- torchrun --nproc-per-node 2 train.py [ARGS]

\b
Exit codes:
  0    a variant was faster than the baseline beyond the noise
  1    none was
  2    bad usage (no such script, a bad --set...), or no baseline run measured a step
  3    internal gpuprof error
  130  interrupted (Ctrl-C): what was measured is printed and written
"""


class _TryCommand(click.Command):
    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        own, kind, rest = _split(self, list(args))
        ctx.meta[_META] = (kind, tuple(rest))
        return super().parse_args(ctx, own)


def _cuda() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:  # noqa: BLE001 - no torch, a broken driver: no CUDA variants
        return False


@click.command("try", cls=_TryCommand, epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--steps", type=click.IntRange(min=3, max=100000), default=20, show_default=True, metavar="N",
              help="Optimizer steps measured per trial, after the warm-up.")
@click.option("--warmup", type=click.IntRange(min=1, max=100000), default=3, show_default=True, metavar="K",
              help="Optimizer steps run before the measured ones (not timed).")
@click.option("--max-time", type=click.FloatRange(min=1), default=600.0, show_default=True, metavar="SECONDS",
              help="A trial running longer is stopped and reported as failed.")
@click.option("--baseline-runs", type=click.IntRange(min=2, max=20), default=2, show_default=True, metavar="R",
              help="Runs of the unchanged job (the first and the last trial, others between).")
@click.option("--variants", "which", default="auto", show_default=True, metavar="auto|none|NAME,...",
              help="The catalogue's variants to try: auto (those that apply on this machine), none (only --set), "
                   "or names from the catalogue.")
@click.option("--set", "sets", multiple=True, metavar="NAME=VALUE[,NAME=VALUE]",
              help="A variant of your own (repeatable): num_workers, persistent_workers, pin_memory, "
                   "prefetch_factor, matmul_precision, allow_tf32, cudnn_benchmark, zero_grad_set_to_none.")
@click.option("--logdir", default="gpuprof_logs", show_default=True, metavar="DIR",
              help="Where the try run directory is made (<logdir>/<run-name>/).")
@click.option("--run-name", default=None, metavar="NAME", help="The try run directory's name (default: try-<time>).")
@click.pass_context
def try_cmd(ctx: click.Context, steps: int, warmup: int, max_time: float, baseline_runs: int, which: str,
            sets: tuple[str, ...], logdir: str, run_name: str | None) -> None:
    """Run the unchanged job with each suggested setting and measure which one pays, on this machine.

    Each trial is a separate process, stopped after --warmup + --steps optimizer steps (the job's
    end-of-training work does not run); the baseline runs at least twice so the noise is measured.
    Writes try.json and try.md into the try run directory and prints the ranked table.
    """
    from gpuprof.render.safe import visible
    from gpuprof.run.launch import RunUsageError, resolve
    from gpuprof.run.options import TrialSettings
    from gpuprof.trials import measure, render
    from gpuprof.trials.runner import Outcome, run_trial
    from gpuprof.trials.variants import TryUsageError, Variant, catalogue, free_cores, parse_set, plan_trials

    kind, rest = ctx.meta[_META]
    try:
        command = resolve(kind, rest)
    except RunUsageError as err:
        raise TryUsageError(str(err).replace("gpuprof run", "gpuprof try")) from None
    name = run_name if run_name is not None else time.strftime("try-%Y%m%d-%H%M%S")
    if not re.fullmatch(r"[A-Za-z0-9_.+-]{1,128}", name) or name in (".", ".."):
        raise TryUsageError(f"--run-name {name!r}: use letters, digits, '.', '_', '+' or '-'")
    mine = [parse_set(s) for s in sets]
    cores = free_cores()
    every = {v.name: v for v in catalogue(True, cores)}
    names = [n.strip() for n in which.split(",") if n.strip()] if which not in ("auto", "none") else []
    bad = [n for n in names if n not in every]
    if bad or (which not in ("auto", "none") and not names):
        raise TryUsageError(f"--variants: unknown variant {(bad or [which])[0]!r} (auto, none, or names from the "
                            f"catalogue: {', '.join(every)})")
    if which == "none" and not mine:
        raise TryUsageError("no variant to try (--variants none without --set)")
    root = Path(logdir) / name
    if root.exists():
        raise TryUsageError(f"{root}: the try run directory exists already (choose another --run-name)")
    # torch only now (CUDA or not decides what auto tries): a usage error above costs no torch import
    cuda = _cuda()
    chosen = catalogue(cuda, cores) if which == "auto" else [every[n] for n in names]
    variants: list[Variant] = chosen + [v for v in mine if v.name not in {c.name for c in chosen}]
    root.mkdir(parents=True)

    plan = plan_trials(variants, baseline_runs)
    base: list[Outcome] = []
    done: list[tuple[Variant, Outcome]] = []
    interrupted = False
    total = len(plan)
    try:
        for i, (label, step) in enumerate(plan, 1):
            folder = root / "trials" / f"{i:02d}-{re.sub(r'[^A-Za-z0-9_.=+-]', '_', label)[:80]}"
            click.echo(f"gpuprof try: trial {i}/{total}: {visible(label)} ...", err=True, nl=False)
            out = run_trial(command, folder, step.settings if step is not None else TrialSettings(), warmup, steps,
                            max_time)
            click.echo(f" {out.wall_s:.1f} s" + (f": failed: {visible(out.error)}" if out.error else ""), err=True)
            if step is None:
                base.append(out)
            else:
                done.append((step, out))
    except KeyboardInterrupt:  # Ctrl-C: the trial running was stopped (run_trial); say what was measured
        click.echo(" interrupted", err=True)
        interrupted = True
    doc: dict[str, Any] = measure.build(list(command.argv), base, done, warmup, steps, cores, cuda, interrupted)
    from gpuprof.atomic import atomic_write

    atomic_write(root / "try.json", json.dumps(doc, indent=1, allow_nan=False, default=str) + "\n")
    atomic_write(root / "try.md", render.markdown(doc))
    click.echo(render.table(doc))
    click.echo(f"gpuprof try: wrote {root / 'try.json'} and {root / 'try.md'}", err=True)
    if interrupted:
        ctx.exit(130)
    if doc.get("error"):
        click.echo(f"gpuprof try: {doc['error']}", err=True)
        ctx.exit(2)
    ctx.exit(0 if any(v["verdict"] == "faster" for v in doc["variants"]) else 1)


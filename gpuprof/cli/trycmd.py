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

from gpuprof.cli.run import _META, _RunCommand

__all__ = ["try_cmd"]

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


def _cuda() -> tuple[bool, bool]:
    """(CUDA is available, the device autocast would use has bfloat16: a CPU has; a GPU when torch says so)."""
    try:
        import torch

        if not torch.cuda.is_available():
            return False, True
        return True, bool(torch.cuda.is_bf16_supported())
    except Exception:  # noqa: BLE001 - no torch, a broken driver: no CUDA variants
        return False, True


def _from_findings(command: Any, folder: Path, warmup: int, steps: int, max_time: float,
                   available: list[Any]) -> tuple[list[Any], dict[str, Any], dict[str, Any]]:
    """The analysis trial (the job under gpuprof run's capture, stopped as a trial, long enough for the capture's
    window), and what its findings suggest: (variants, the analysis document, predictions by variant name).
    Without a report (the job failed, the capture wrote none) every variant that applies is tried."""
    from gpuprof.errors import GpuprofError
    from gpuprof.run.options import TrialSettings
    from gpuprof.saved.read import read_report
    from gpuprof.trials.measure import ANALYSIS_STEPS
    from gpuprof.trials.runner import run_trial
    from gpuprof.trials.suggest import code_change_rows, suggest

    out = run_trial(command, folder, TrialSettings(), warmup, max(steps, ANALYSIS_STEPS - warmup), max_time,
                    analyze=True)
    reports = sorted(folder.glob("capture*/report.json")) + sorted(folder.glob("capture*/*/report.json"))
    doc: dict[str, Any] = {"directory": str(folder), "wall_s": round(out.wall_s, 3), "report": None, "error": None,
                           "findings": [], "needs_code_change": [], "notes": []}
    findings: list[Any] = []
    if reports:
        try:
            report = read_report(reports[0])
            findings = list(report.findings)
            doc["report"] = str(reports[0])
        except GpuprofError as err:
            doc["error"] = f"the analysis's report cannot be read: {err}"
    else:
        doc["error"] = out.error or "the analysis wrote no report"
    if doc["error"] is not None:
        doc["summary"] = f"no findings ({doc['error']}): every variant that applies is tried"
        return list(available), doc, {}
    picks = suggest(findings, available)
    doc["findings"] = [{"code": f.code, "cost_us_per_step": f.cost_us_per_step,
                        "what_if_saving_us": f.what_if_saving_us} for f in findings]
    doc["needs_code_change"] = code_change_rows(findings)
    codes = sorted({f.code for f in findings})
    doc["summary"] = (f"findings {', '.join(codes) or 'none'}: {len(picks)} variant(s) to try"
                      + (f", {len(doc['needs_code_change'])} change(s) only the code can make"
                         if doc["needs_code_change"] else "")
                      + ("" if picks else " (--variants all tries every variant that applies)"))
    predictions = {p.variant.name: {"codes": list(p.codes), "cost_us": p.cost_us, "what_if_us": p.what_if_us}
                   for p in picks}
    return [p.variant for p in picks], doc, predictions


@click.command("try", cls=_RunCommand, epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--steps", type=click.IntRange(min=3, max=100000), default=20, show_default=True, metavar="N",
              help="Optimizer steps measured per trial, after the warm-up.")
@click.option("--warmup", type=click.IntRange(min=1, max=100000), default=3, show_default=True, metavar="K",
              help="Optimizer steps run before the measured ones (not timed).")
@click.option("--max-time", type=click.FloatRange(min=1), default=600.0, show_default=True, metavar="SECONDS",
              help="A trial running longer is stopped and reported as failed.")
@click.option("--baseline-runs", type=click.IntRange(min=2, max=20), default=2, show_default=True, metavar="R",
              help="Runs of the unchanged job (the first and the last trial, others between).")
@click.option("--variants", "which", default="auto", show_default=True, metavar="auto|all|none|NAME,...",
              help="auto: what the findings of the baseline's analysis suggest (one analysis trial first), of the "
                   "variants that apply on this machine; all: every variant that applies; none: only --set; or "
                   "names from the catalogue.")
@click.option("--set", "sets", multiple=True, metavar="NAME=VALUE[,NAME=VALUE]",
              help="A variant of your own (repeatable): num_workers, persistent_workers, pin_memory, "
                   "prefetch_factor, matmul_precision, allow_tf32, cudnn_benchmark, zero_grad_set_to_none, "
                   "autocast (bf16, fp16), channels_last, compile, foreach, fused.")
@click.option("--combine/--no-combine", default=True, show_default=True,
              help="Run the faster compatible variants together as a final trial.")
@click.option("--html", "html", is_flag=True, help="Also write try.html (an offline page) in the try run directory.")
@click.option("--logdir", default="gpuprof_logs", show_default=True, metavar="DIR",
              help="Where the try run directory is made (<logdir>/<run-name>/).")
@click.option("--run-name", default=None, metavar="NAME", help="The try run directory's name (default: try-<time>).")
@click.pass_context
def try_cmd(ctx: click.Context, steps: int, warmup: int, max_time: float, baseline_runs: int, which: str,
            sets: tuple[str, ...], combine: bool, html: bool, logdir: str, run_name: str | None) -> None:
    """Run the unchanged job with each suggested setting and measure which one pays, on this machine.

    Each trial is a separate process, stopped after --warmup + --steps optimizer steps (the job's
    end-of-training work does not run); the baseline runs at least twice so the noise is measured.
    Writes try.json and try.md into the try run directory and prints the ranked table.
    """
    from gpuprof.pool import affinity_cpus
    from gpuprof.render.safe import visible
    from gpuprof.run.launch import RunUsageError, resolve
    from gpuprof.run.options import TrialSettings
    from gpuprof.trials import measure, render
    from gpuprof.trials.runner import Outcome, run_trial
    from gpuprof.trials.variants import (
        TryUsageError,
        Variant,
        catalogue,
        compile_unavailable,
        parse_set,
        plan_trials,
    )
    from gpuprof.trials.variants import combine as combined_of

    kind, rest = ctx.meta[_META]
    try:
        command = resolve(kind, rest)
    except RunUsageError as err:
        raise TryUsageError(str(err).replace("gpuprof run", "gpuprof try")) from None
    name = run_name if run_name is not None else time.strftime("try-%Y%m%d-%H%M%S")
    if not re.fullmatch(r"[A-Za-z0-9_.+-]{1,128}", name) or name in (".", ".."):
        raise TryUsageError(f"--run-name {name!r}: use letters, digits, '.', '_', '+' or '-'")
    mine = [parse_set(s) for s in sets]
    cores = affinity_cpus()
    every = {v.name: v for v in catalogue(True, cores)}
    named = which not in ("auto", "all", "none")
    names = [n.strip() for n in which.split(",") if n.strip()] if named else []
    bad = [n for n in names if n not in every]
    if bad or (named and not names):
        raise TryUsageError(f"--variants: unknown variant {(bad or [which])[0]!r} (auto, all, none, or names from the "
                            f"catalogue: {', '.join(every)})")
    if which == "none" and not mine:
        raise TryUsageError("no variant to try (--variants none without --set)")
    root = Path(logdir) / name
    if root.exists():
        raise TryUsageError(f"{root}: the try run directory exists already (choose another --run-name)")
    # torch only now (CUDA or not decides what applies): a usage error above costs no torch import
    cuda, bf16 = _cuda()
    no_compile = compile_unavailable(cuda) if which in ("auto", "all") else None
    available = catalogue(cuda, cores, compile_ok=no_compile is None, bf16_ok=bf16)
    root.mkdir(parents=True)
    count = 0

    def folder(label: str) -> Path:
        nonlocal count
        count += 1
        return root / "trials" / f"{count:02d}-{re.sub(r'[^A-Za-z0-9_.=+-]', '_', label)[:80]}"

    analysis: dict[str, Any] | None = None
    predictions: dict[str, Any] = {}
    interrupted = False
    try:
        if which == "auto":
            click.echo("gpuprof try: the baseline's analysis (gpuprof run's capture) ...", err=True, nl=False)
            chosen, analysis, predictions = _from_findings(command, folder("analysis"), warmup, steps, max_time,
                                                           available)
            click.echo(f" {analysis['wall_s']:.1f} s: " + visible(analysis["summary"]), err=True)
        elif which == "all":
            chosen = available
        else:
            chosen = [every[n] for n in names] if named else []
    except KeyboardInterrupt:
        click.echo(" interrupted", err=True)
        interrupted, chosen = True, []
    variants: list[Variant] = chosen + [v for v in mine if v.name not in {c.name for c in chosen}]
    if no_compile is not None and which in ("auto", "all"):
        note = f"torch.compile not tried: {no_compile}"
        analysis = {**(analysis or {}), "notes": [*(analysis or {}).get("notes", []), note]}

    plan = plan_trials(variants, baseline_runs) if variants and not interrupted else []
    base: list[Outcome] = []
    done: list[tuple[Variant, Outcome]] = []
    total = len(plan)

    def run_one(label: str, step: Variant | None, i: int, of: int) -> Outcome:
        click.echo(f"gpuprof try: trial {i}/{of}: {visible(label)} ...", err=True, nl=False)
        out = run_trial(command, folder(label), step.settings if step is not None else TrialSettings(), warmup, steps,
                        max_time)
        click.echo(f" {out.wall_s:.1f} s" + (f": failed: {visible(out.error)}" if out.error else ""), err=True)
        return out

    def build() -> dict[str, Any]:
        return measure.build(list(command.argv), base, done, warmup, steps, cores, cuda, interrupted,
                             predictions=predictions, analysis=analysis)

    try:
        for i, (label, step) in enumerate(plan, 1):
            out = run_one(label, step, i, total)
            if step is None:
                base.append(out)
            else:
                done.append((step, out))
        if combine and plan:
            faster = [v for v in build()["variants"] if v["verdict"] == "faster"]
            by_name = {v.name: v for v, _ in done}
            together = combined_of([by_name[r["name"]] for r in faster if r["name"] in by_name])
            if together is not None:
                done.append((together, run_one(together.name, together, total + 1, total + 1)))
    except KeyboardInterrupt:  # Ctrl-C: the trial running was stopped (run_trial); say what was measured
        click.echo(" interrupted", err=True)
        interrupted = True
    doc: dict[str, Any] = build()
    if not plan and not interrupted:  # nothing to try: the findings suggested no variant
        doc.pop("error", None)
    from gpuprof.atomic import atomic_write

    atomic_write(root / "try.json", json.dumps(doc, indent=1, allow_nan=False, default=str) + "\n")
    atomic_write(root / "try.md", render.markdown(doc))
    written = [root / "try.json", root / "try.md"]
    if html:
        atomic_write(root / "try.html", render.html(doc))
        written.append(root / "try.html")
    click.echo(render.table(doc))
    click.echo(f"gpuprof try: wrote {', '.join(str(p) for p in written)}", err=True)
    if interrupted:
        ctx.exit(130)
    if doc.get("error"):
        click.echo(f"gpuprof try: {doc['error']}", err=True)
        ctx.exit(2)
    ctx.exit(0 if any(v["verdict"] == "faster" for v in doc["variants"]) else 1)


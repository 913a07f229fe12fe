"""Weights & Biases: the findings table, the figures per step window and the files, into a W&B run.

When the process has an active run (the user's own ``wandb.init``), everything goes into it and it is left
open; otherwise gpuprof starts a run of its own in the project ``$GPUPROF_WANDB_PROJECT``, else
``$WANDB_PROJECT``, else ``gpuprof`` (entity: W&B's own ``$WANDB_ENTITY``), named after gpuprof's run, and
finishes it. W&B's own settings apply (``WANDB_MODE=offline`` writes the run to disk only, to be sent later
with ``wandb sync``). The figures are logged against their own x-axis, ``gpuprof/step`` (the window's
last training step), so they never clash with the steps of the user's own ``wandb.log`` calls.
"""

from __future__ import annotations

import os
import re
from typing import Any

from gpuprof.trackers.payload import FINDING_COLUMNS, PREFIX, Publication

__all__ = ["WandbTracker", "make", "DEFAULT_PROJECT"]

DEFAULT_PROJECT = "gpuprof"
STEP_KEY = PREFIX + "step"
TABLE_KEY = PREFIX + "findings_table"
LOGIN_TIMEOUT_S = 30.0


class WandbTracker:
    label = "W&B"

    def __init__(self, wandb: Any) -> None:
        self._wandb = wandb

    def publish(self, pub: Publication) -> str:
        wandb = self._wandb
        run = wandb.run
        own = run is None
        if own:
            project = os.environ.get("GPUPROF_WANDB_PROJECT") or os.environ.get("WANDB_PROJECT") or DEFAULT_PROJECT
            # silent, no console capture: nothing of W&B's reaches gpuprof's stdout (a --format json report);
            # a login prompt (a terminal, no key) gives up after LOGIN_TIMEOUT_S: never a run that hangs at its end
            run = wandb.init(project=project, name=pub.run_name, job_type="gpuprof",
                             settings=wandb.Settings(silent=True, console="off", login_timeout=LOGIN_TIMEOUT_S))
        try:
            if getattr(run, "disabled", False):
                raise RuntimeError("W&B is disabled (WANDB_MODE=disabled, or no login: run `wandb login` or set "
                                   "WANDB_API_KEY, or WANDB_MODE=offline to keep the run on disk)")
            run.define_metric(STEP_KEY, hidden=True)
            run.define_metric(PREFIX + "*", step_metric=STEP_KEY)
            table = wandb.Table(columns=list(FINDING_COLUMNS), data=[r.cells() for r in pub.findings])
            for i, w in enumerate(pub.windows):
                row: dict[str, Any] = {STEP_KEY: w.step, **{PREFIX + k: v for k, v in w.metrics.items()}}
                if i == len(pub.windows) - 1:
                    row[TABLE_KEY] = table
                run.log(row)
            if pub.artefacts:
                art = wandb.Artifact(artifact_name(pub.run_name), type="gpuprof-report",
                                     description="gpuprof's report of this run (report.md, report.json, HTML, traces)")
                taken: set[str] = set()
                for a in pub.artefacts:
                    art.add_file(a.path, name=_unique(_safe_name(os.path.basename(a.path)), taken))
                run.log_artifact(art)
            # the URL of an offline run is not asked for: W&B would print a warning of its own
            sync_dir = getattr(run.settings, "sync_dir", None) or run.dir
            where = f"offline run {run.id}, sync with: wandb sync {sync_dir}" if getattr(run, "offline", False) \
                else str(run.url)
            name = getattr(run, "name", None) or pub.run_name
        finally:
            if own:
                run.finish()
        return f"{name} ({where})"


def artifact_name(run_name: str) -> str:
    """A W&B artifact name for ``run_name``: letters, digits, ``-``, ``_`` and ``.`` only, at most 128."""
    clean = re.sub(r"[^A-Za-z0-9._-]+", "-", run_name).strip("-.") or "run"
    return ("gpuprof-" + clean)[:128]


def _safe_name(name: str) -> str:
    """A file's name inside the artifact: a trace found in a directory may be called anything (control
    characters, markup); W&B shows these names in its pages, so only plain characters are kept."""
    return re.sub(r"[^A-Za-z0-9._+-]+", "_", name).strip("._")[:200] or "file"


def _unique(name: str, taken: set[str]) -> str:
    stem, n, out = name, 1, name
    while out in taken:
        n += 1
        out = f"{n}-{stem}"
    taken.add(out)
    return out


def make() -> WandbTracker:
    import wandb

    return WandbTracker(wandb)

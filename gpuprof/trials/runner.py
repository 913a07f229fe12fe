"""Run one trial of ``gpuprof try``: the user's command, unchanged, in a process group of its own, with the
trial's options (gpuprof/run/trial.py) in ``GPUPROF_RUN_CONFIG``; its output into the trial's directory."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuprof.run.launch import Command, child_env
from gpuprof.run.options import RunOptions, TrialOptions, TrialSettings

__all__ = ["Outcome", "run_trial", "TRACKERS_OFF"]

#: trackers in a trial: W&B disabled, MLflow's runs into the trial's directory
TRACKERS_OFF = {"WANDB_MODE": "disabled", "WANDB_SILENT": "true"}
_TAIL = 2000


@dataclass
class Outcome:
    """What one trial gave: its result document (None when it wrote none), or why it failed."""

    directory: Path
    status: int | None = None  # the exit status (negative: a signal), None when it was stopped by us
    result: dict[str, Any] | None = None
    error: str | None = None
    wall_s: float = 0.0
    interrupted: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


def _tail(path: Path) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - _TAIL))
            text = fh.read().decode("utf-8", "replace")
    except OSError:
        return ""
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1].strip() if lines else ""


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:  # already gone
        pass


def run_trial(command: Command, directory: Path, settings: TrialSettings, warmup: int, steps: int,
              max_time: float, analyze: bool = False) -> Outcome:
    """Run the command once as a trial; never raises for what the job does (KeyboardInterrupt aside: the trial
    is stopped first, then it propagates with ``interrupted`` set on nothing: the caller records it).
    ``analyze``: the analysis trial (``gpuprof run``'s capture too; its run directory is ``directory/capture``)."""
    directory.mkdir(parents=True, exist_ok=True)
    result_path = directory / "result.json"
    log = directory / "output.log"
    opts = RunOptions(logdir=str(directory.resolve()), run="capture",
                      trial=TrialOptions(result=str(result_path.resolve()), warmup=warmup, steps=steps,
                                         settings=settings, analyze=analyze))
    env = child_env(opts)
    env.update(TRACKERS_OFF)
    env["WANDB_DIR"] = str(directory.resolve())
    env["MLFLOW_TRACKING_URI"] = (directory.resolve() / "mlruns").as_uri()
    out = Outcome(directory)
    t0 = time.monotonic()
    with open(log, "wb") as fh:
        try:
            child = subprocess.Popen(list(command.argv), env=env, stdin=subprocess.DEVNULL, stdout=fh,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as err:
            out.error = f"cannot start: {err.strerror or err}"
            return out
        try:
            out.status = child.wait(timeout=max_time)
        except subprocess.TimeoutExpired:
            _kill_group(child.pid)
            child.wait()
            out.error = f"timed out after {max_time:g} s (--max-time)"
        except KeyboardInterrupt:
            _kill_group(child.pid)
            child.wait()
            out.wall_s = time.monotonic() - t0
            raise
        finally:
            _kill_group(child.pid)  # the job's leftovers (DataLoader workers, a launcher's ranks)
    out.wall_s = time.monotonic() - t0
    try:
        with open(result_path, encoding="utf-8") as rf:
            doc = json.load(rf)
        out.result = doc if isinstance(doc, dict) else None
    except (OSError, ValueError):
        out.result = None
    if out.error is None:
        if out.status is not None and out.status != 0:
            why = f"killed by signal {-out.status}" if out.status < 0 else f"exit code {out.status}"
            last = _tail(log)
            out.error = f"the job failed ({why})" + (f": {last}" if last else "")
        elif out.result is None:
            out.error = "the job ended without an optimizer step gpuprof could see (no result)"
    return out

"""``gpuprof try``'s orchestration on a stand-in job (tests/trials/jobs/fake_trial.py, no torch: it writes the
trial's result from the options it is given): the faster variants are run together as a final trial with every
part's settings, measured against the same baseline; ``--no-combine`` leaves it out. Slow: the try command
imports torch to see whether CUDA is there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FAKE = Path(__file__).resolve().parent / "jobs" / "fake_trial.py"

pytestmark = pytest.mark.slow


def _try(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("GPUPROF_RUN_CONFIG", None)
    return subprocess.run([sys.executable, "-m", "gpuprof", "try", "--logdir", "L", "--steps", "6", "--warmup", "1",
                           "--variants", "none", "--set", "num_workers=2", "--set", "foreach=true",
                           "--set", "num_workers=1", *args, "--", sys.executable, str(FAKE)],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)


def test_the_faster_variants_run_together_as_a_final_trial(tmp_path: Path) -> None:
    proc = _try("--run-name", "c", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "L" / "c" / "try.json").read_text())
    by = {v["name"]: v for v in doc["variants"]}
    assert all(v["verdict"] == "faster" for v in doc["variants"])
    (combined,) = [v for v in doc["variants"] if v["combined"]]
    # the first worker count ranked (both are 7 ms: the order of the table) and foreach; never two worker counts
    assert combined["settings"]["optimizer_foreach"] is True and combined["settings"]["num_workers"] in (1, 2)
    assert len(combined["settings"]) == 2 and combined["applied"] == combined["settings"]
    assert combined["step_time_median_us"] < min(v["step_time_median_us"] for v in by.values() if not v["combined"])
    assert doc["variants"][0]["combined"]  # ranked first: the fastest
    trials = sorted(p.name for p in (tmp_path / "L" / "c" / "trials").iterdir())
    assert trials[-1].startswith("06-combined") and len(trials) == 6  # after the last baseline run
    assert "fused" not in combined["code_change"] and "foreach=True" in combined["code_change"]


def test_no_combine_leaves_it_out(tmp_path: Path) -> None:
    proc = _try("--run-name", "n", "--no-combine", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "L" / "n" / "try.json").read_text())
    assert len(doc["variants"]) == 3 and not any(v["combined"] for v in doc["variants"])


def test_auto_without_an_analysis_report_tries_every_variant_that_applies(tmp_path: Path) -> None:
    """The stand-in job never imports torch: the analysis trial has no capture and writes no report, so auto
    falls back to every variant that applies on this machine (none CUDA-only here) and says why."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "CUDA_VISIBLE_DEVICES": ""}
    env.pop("GPUPROF_RUN_CONFIG", None)
    proc = subprocess.run([sys.executable, "-m", "gpuprof", "try", "--logdir", "L", "--run-name", "a", "--steps", "4",
                           "--warmup", "1", "--no-combine", "--", sys.executable, str(FAKE)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "L" / "a" / "try.json").read_text())
    assert doc["analysis"]["error"] == "the analysis wrote no report" and doc["analysis"]["report"] is None
    assert doc["analysis"]["directory"].endswith("01-analysis")
    names = {v["name"] for v in doc["variants"]}
    assert {"num_workers=1", "foreach", "fused", "channels_last", "autocast=bf16", "zero_grad_set_to_none"} <= names
    assert not names & {"pin_memory", "matmul_precision=high", "cudnn_benchmark", "autocast=fp16"}
    assert all(v["suggested_by"] == [] for v in doc["variants"])
    assert "every variant that applies is tried" in proc.stdout

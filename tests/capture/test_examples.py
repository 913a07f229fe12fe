"""The CPU-capable examples end to end: each pathology is flagged, its baseline is not."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

# example -> (codes that must appear without --baseline, codes that must not appear with it)
CASES = {
    "dataloader_workers.py": ({"GP601"}, {"GP601", "GP102"}),
    "memory_leak.py": ({"GP640"}, {"GP640"}),
    "device_mismatch.py": ({"GP612", "GP613"}, {"GP610", "GP611", "GP612", "GP613"}),
    "step_habits.py": ({"GP840", "GP841"}, {"GP840", "GP841"}),
    "eval_without_no_grad.py": ({"GP843"}, {"GP843"}),
    "sampler_epoch.py": ({"GP712"}, {"GP712"}),
    "dtype_mismatch.py": ({"GP614"}, {"GP614"}),
    "debug_settings.py": ({"GP623", "GP624"}, {"GP623", "GP624"}),
}


def _start(script: str, logdir: Path, *extra: str) -> subprocess.Popen[str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    return subprocess.Popen(
        [sys.executable, str(EXAMPLES / script), "--logdir", str(logdir), "--run-name", "r", "--device", "cpu",
         "--steps", "20", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=str(EXAMPLES),
    )


def _finish(proc: subprocess.Popen[str], logdir: Path) -> tuple[subprocess.CompletedProcess[str], dict]:
    try:
        out, err = proc.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    report = json.loads((logdir / "r" / "report.json").read_text())
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), report


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(CASES))
def test_pathology_flagged_baseline_clean(script: str, tmp_path: Path) -> None:
    must, must_not = CASES[script]
    # the pathology and its baseline run side by side (two processes: CI has two cores)
    bad, good = _start(script, tmp_path / "bad"), _start(script, tmp_path / "good", "--baseline")
    try:
        _check(script, must, must_not, bad, good, tmp_path)
    finally:
        for p in (bad, good):
            if p.poll() is None:  # an assertion failed first: do not leave the other run behind
                p.kill()
                p.communicate()


def _check(script: str, must: set[str], must_not: set[str], bad: subprocess.Popen[str],
           good: subprocess.Popen[str], tmp_path: Path) -> None:
    proc, report = _finish(bad, tmp_path / "bad")
    codes = {f["code"] for f in report["findings"]}
    assert must <= codes, (codes, proc.stderr[-2000:])
    assert all(f["origin"] == "runtime" for f in report["findings"] if f["code"].startswith("GP6"))
    if script == "device_mismatch.py":
        assert proc.returncode == 1
        assert "DeviceMismatchError" in proc.stderr and "Net.encoder.0" in proc.stderr
    elif script == "dtype_mismatch.py":  # the user's own error, unchanged; gpuprof's explanation in the summary
        assert proc.returncode == 1
        assert "RuntimeError: mat1 and mat2 must have the same dtype, but got Double and Float" in proc.stderr
        assert "GP614" in proc.stderr and "Sequential.0" in proc.stderr
    else:
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert "gpuprof: " in proc.stderr and "tensorboard --logdir" in proc.stderr
    if script == "memory_leak.py":  # the statement that allocates what the leak keeps, not main()'s def line
        leak = next(f for f in report["findings"] if f["code"] == "GP640")
        lines = (EXAMPLES / script).read_text().splitlines()
        assert lines[leak["location"]["line"] - 1].strip() == "loss = loss_fn(model(x), y)", leak["location"]
    proc, report = _finish(good, tmp_path / "good")
    assert proc.returncode == 0, proc.stderr[-2000:]
    codes = {f["code"] for f in report["findings"]}
    assert not (codes & must_not), codes


@pytest.mark.slow
def test_train_example_runs(tmp_path: Path) -> None:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / "train.py"), "--logdir", str(tmp_path), "--run-name", "r", "--device", "cpu",
         "--steps", "20"],
        capture_output=True, text=True, timeout=240, env=env, cwd=str(EXAMPLES),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    run = tmp_path / "r"
    assert list(run.glob("*.pt.trace.json.gz")) and (run / "report.json").exists()
    assert list(run.glob("events.out.tfevents.*"))

"""The framework examples end to end (as tests/capture/test_examples.py runs the capture ones): the
pathology is flagged at the user's line; the DDP examples print one summary per job."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.frameworks

pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"

# example -> (package it needs, the DataLoader line's marker in the example)
CASES = {
    "lightning_train.py": ("lightning", "return DataLoader(Documents()"),
    "hf_trainer.py": ("transformers", "trainer.train()"),
}


def _env() -> dict[str, str]:
    return dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore",
                PYTHONPATH=f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")


def _start(script: str, logdir: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(EXAMPLES / script), "--logdir", str(logdir), "--run-name", "r", "--device", "cpu",
         "--steps", "12", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(), cwd=str(EXAMPLES),
    )


def _finish(proc: subprocess.Popen[str], logdir: Path) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    try:
        out, err = proc.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    assert proc.returncode == 0, err[-3000:]
    report = json.loads((logdir / "r" / "report.json").read_text())
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), report


def _line(script: str, marker: str) -> int:
    lines = (EXAMPLES / script).read_text().splitlines()
    return next(i for i, text in enumerate(lines, 1) if marker in text)


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(CASES))
def test_example_pathology_flagged_at_the_users_line(script: str, tmp_path: Path) -> None:
    """The pathology run (the clean twins run in-process in test_lightning.py/test_transformers.py: one
    process per example keeps this under the suite's time budget on 2 cores)."""
    package, marker = CASES[script]
    pytest.importorskip(package)
    proc, report = _finish(_start(script, tmp_path), tmp_path)
    f = next((f for f in report["findings"] if f["code"] == "GP601"), None)
    assert f is not None, ([f["code"] for f in report["findings"]], proc.stderr[-2000:])
    assert f["location"]["file"] == str(EXAMPLES / script) and f["location"]["line"] == _line(script, marker)
    assert "gpuprof: 12 steps" in proc.stderr  # the end-of-run summary


@pytest.mark.slow
def test_ddp_straggler_documented_command_prints_rank0s_summary(tmp_path: Path) -> None:
    """The documented ``torchrun ... --run-name ddp`` runs (``--run`` was ambiguous with torchrun's
    ``--run-path``) and the job prints one summary, rank 0's."""
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
         str(EXAMPLES / "ddp_straggler.py"), "--logdir", str(tmp_path), "--run-name", "ddp", "--steps", "4",
         "--sleep-ms", "1"],
        env=_env(), capture_output=True, text=True, timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout + proc.stderr
    assert out.count("gpuprof: 4 steps") == 1, out[-3000:]
    assert (tmp_path / "ddp" / "report.cross_rank.json").exists()


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("GPUPROF_TEST_DDP") != "1",
                    reason="a 2-process Lightning DDP run takes 20-40 s on 2 cores; set GPUPROF_TEST_DDP=1")
def test_lightning_ddp_one_report_per_rank_cross_rank_on_rank0(tmp_path: Path) -> None:
    pytest.importorskip("lightning")
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / "lightning_train.py"), "--logdir", str(tmp_path), "--device", "cpu",
         "--steps", "8", "--devices", "2"],
        env=_env(), capture_output=True, text=True, timeout=240, cwd=str(EXAMPLES),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert len(runs) == 1, runs  # the ranks agreed on rank 0's run name
    run = runs[0]
    for rank in (0, 1):
        rep = json.loads((run / f"rank{rank}" / "report.json").read_text())
        assert any(f["code"] == "GP601" for f in rep["findings"])
    assert (run / "report.cross_rank.json").exists()
    assert (proc.stdout + proc.stderr).count("gpuprof: 8 steps") == 1  # rank 0 prints, rank 1 does not

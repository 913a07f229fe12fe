"""``gpuprof run --to wandb --to mlflow``: an unchanged script's end-of-run report in both trackers (offline)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuprof_testing.trackerruns import read_mlflow_runs, wandb_offline_runs

pytest.importorskip("torch")
pytest.importorskip("wandb", reason="needs the wandb package (pip install wandb)")
pytest.importorskip("mlflow", reason="needs the mlflow package (pip install mlflow-skinny)")
pytestmark = pytest.mark.slow  # a training script under gpuprof run (about 15 s of CPU)

REPO = Path(__file__).resolve().parents[2]


def test_run_sends_rank_0s_report_to_both_trackers(offline: Path, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    env.pop("GPUPROF_RUN_CONFIG", None)
    proc = subprocess.run([sys.executable, "-m", "gpuprof", "run", "--logdir", "logs", "--run-name", "r", "--no-watch",
                           "--to", "wandb", "--to", "mlflow", str(REPO / "examples" / "plain_train.py"),
                           "--device", "cpu", "--steps", "12"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "gpuprof: results sent to W&B r (offline run" in proc.stderr
    assert "gpuprof: results sent to MLflow run" in proc.stderr
    assert "GpuprofWarning" not in proc.stderr
    (wb,) = wandb_offline_runs(offline / "wandb")
    (row,) = [h for h in wb.history if "gpuprof/step" in h]
    assert wb.name == "r" and row["gpuprof/step"] == 11  # the default window, steps 7-11
    (ml,) = read_mlflow_runs((offline / "mlruns").as_uri())
    assert ml.name == "r" and [s for s, _ in ml.metrics["gpuprof/step_time_ms"]] == [11]
    doc = json.loads((tmp_path / "logs" / "r" / "report.json").read_text(encoding="utf-8"))
    assert ml.table is not None and ml.table["code"] == [f["code"] for f in doc["findings"]]
    assert ml.metrics["gpuprof/step_time_ms"][0][1] == pytest.approx(row["gpuprof/step_time_ms"])

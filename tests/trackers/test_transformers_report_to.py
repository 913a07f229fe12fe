"""The Hugging Face ``Trainer`` with ``report_to=["mlflow"]`` and gpuprof's callback with ``to=("mlflow",)``:
the findings land in the Trainer's own MLflow run, which its callback ends before gpuprof's runs (the capture
remembers the run active at its start). A tiny BertConfig model, no download; MLflow's file store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.frameworks

pytest.importorskip("torch")
pytest.importorskip("mlflow", reason="needs the mlflow package (pip install mlflow-skinny)")
transformers = pytest.importorskip("transformers")

import torch  # noqa: E402
from torch.utils.data import Dataset  # noqa: E402

from gpuprof.capture import Schedule  # noqa: E402
from gpuprof.integrations.transformers import GpuprofCallback  # noqa: E402
from gpuprof_testing.trackerruns import read_mlflow_runs  # noqa: E402


class Tokens(Dataset[dict[str, Any]]):
    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> dict[str, Any]:
        g = torch.Generator().manual_seed(i)
        return {"input_ids": torch.randint(0, 64, (12,), generator=g), "labels": i % 2}


def test_the_findings_land_in_the_trainers_mlflow_run(offline: Path, no_network: list[object],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "hf-experiment")
    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                  intermediate_size=32, max_position_embeddings=16, num_labels=2)
    args = transformers.TrainingArguments(output_dir=str(offline / "out"), max_steps=6, per_device_train_batch_size=4,
                                          logging_steps=1, report_to=["mlflow"], run_name="hf-run",
                                          save_strategy="no", use_cpu=True, seed=0, disable_tqdm=True)
    cb = GpuprofCallback(offline / "logs", run="hf", to=("mlflow",), schedule=Schedule(wait=1, warmup=1, active=2),
                         watch=False, trigger=False, tensorboard=False, print_report=False)
    trainer = transformers.Trainer(model=transformers.BertForSequenceClassification(cfg), args=args,
                                   train_dataset=Tokens(), callbacks=[cb])
    trainer.train()
    assert cb.result is not None and cb.result.steps == 6
    (run,) = read_mlflow_runs((offline / "mlruns").as_uri(), "hf-experiment")  # one run: the Trainer's
    assert run.name == "hf-run" and "loss" in run.metrics  # the Trainer's own logging
    assert [s for s, _ in run.metrics["gpuprof/step_time_ms"]] == [3]
    assert run.table is not None and "gpuprof/report.json" in run.artifacts
    assert read_mlflow_runs((offline / "mlruns").as_uri()) == []  # no run of gpuprof's own
    assert no_network == []

"""Lightning's WandbLogger and gpuprof's callback with ``to=("wandb",)``: the findings land in the logger's
own run (W&B offline), beside the losses Lightning logs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.frameworks

pytest.importorskip("torch")
pytest.importorskip("wandb", reason="needs the wandb package (pip install wandb)")
L = pytest.importorskip("lightning.pytorch")

import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from gpuprof.capture import Schedule  # noqa: E402
from gpuprof.integrations.lightning import GpuprofCallback  # noqa: E402
from gpuprof_testing.trackerruns import wandb_offline_runs  # noqa: E402


class Tiny(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = nn.functional.cross_entropy(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self) -> DataLoader[Any]:
        g = torch.Generator().manual_seed(0)
        data = TensorDataset(torch.randn(96, 16, generator=g), torch.randint(0, 4, (96,), generator=g))
        return DataLoader(data, batch_size=8)


def test_the_findings_land_in_the_wandb_loggers_run(offline: Path, no_network: list[object]) -> None:
    from lightning.pytorch.loggers import WandbLogger

    L.seed_everything(0, verbose=False)
    logger = WandbLogger(project="users-project", name="lit-run", offline=True, save_dir=str(offline / "wandb"))
    cb = GpuprofCallback(offline / "logs", run="lit", to=("wandb",), schedule=Schedule(wait=1, warmup=1, active=2),
                         watch=False, trigger=False, tensorboard=False)
    trainer = L.Trainer(max_steps=8, callbacks=[cb], logger=logger, log_every_n_steps=1, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, accelerator="cpu", devices=1,
                        default_root_dir=str(offline))
    trainer.fit(Tiny())
    run_id = logger.experiment.id
    logger.experiment.finish()
    (run,) = wandb_offline_runs(offline / "wandb")  # one run: the logger's
    assert run.id == run_id and run.name == "lit-run"
    rows = [h for h in run.history if "gpuprof/step" in h]
    assert len(rows) == 1 and rows[0]["gpuprof/step"] == 3 and rows[0]["gpuprof/step_time_ms"] > 0
    assert sum("train_loss" in h for h in run.history) == 8  # Lightning's own logging, untouched
    assert any(a["type"] == "gpuprof-report" for a in run.artifacts)
    assert cb.result is not None and cb.result.steps == 8
    assert no_network == []

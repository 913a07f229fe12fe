"""Lightning with gpuprof's callback: a tiny classifier whose DataLoader loads in the training process.

    python examples/lightning_train.py                 # GP601 at the DataLoader(...) line (num_workers=0)
    python examples/lightning_train.py --baseline      # 2 persistent workers: no GP601
    python examples/lightning_train.py --devices 2     # DDP on CPU (gloo): a report per rank, cross-rank on rank 0

The pathology also reads the loss with ``.item()`` in every step: free on a
CPU, a host sync per step on a GPU (GP630 names the line there). Needs
``pip install lightning``; runs on CPU in well under a minute.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import lightning.pytorch as L  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, Dataset  # noqa: E402

from common import mlp, parse_args, pick_device, schedule  # noqa: E402
from gpuprof.integrations.lightning import GpuprofCallback  # noqa: E402


class Documents(Dataset):
    """Synthetic 'documents' turned into features in Python, as a tokenizer would: CPU work per sample."""

    def __len__(self) -> int:
        return 4096

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        text = f"document {i} " * 120
        counts = [0] * 64
        for word in text.split():
            counts[hash(word) % 64] += 1
        return torch.tensor(counts, dtype=torch.float32) / 120.0, i % 10


class Classifier(L.LightningModule):
    def __init__(self, baseline: bool) -> None:
        super().__init__()
        self.baseline = baseline
        self.net = mlp(width=64, depth=2)
        self.seen: list[float] = []

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = nn.functional.cross_entropy(self.net(x), y)
        if not self.baseline:
            self.seen.append(loss.item())  # the pathology: a host sync every step on a GPU
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)

    def train_dataloader(self) -> DataLoader:
        workers = 2 if self.baseline else 0  # the pathology: num_workers=0 (batches built in the training process)
        return DataLoader(Documents(), batch_size=32, shuffle=True, num_workers=workers, persistent_workers=workers > 0)


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], steps=30,
                      extra=[("--devices", {"type": int, "default": 1, "help": "processes (DDP on CPU when > 1)"})])
    device = pick_device(args.device)
    L.seed_everything(0, verbose=False)
    ddp = args.devices > 1
    trainer = L.Trainer(
        max_steps=args.steps, accelerator="gpu" if device.type == "cuda" else "cpu", devices=args.devices,
        strategy="ddp" if ddp else "auto", logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, num_sanity_val_steps=0,
        callbacks=[GpuprofCallback(args.logdir, run=args.run, schedule=schedule(args.steps))],
    )
    trainer.fit(Classifier(args.baseline))


if __name__ == "__main__":
    main()

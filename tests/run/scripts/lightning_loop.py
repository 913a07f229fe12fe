"""A Lightning module and Trainer that know nothing of gpuprof (tests/run)."""

import sys

import lightning.pytorch as pl
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Tiny(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))

    def training_step(self, batch, batch_idx):  # type: ignore[no-untyped-def]
        x, y = batch
        loss = nn.functional.cross_entropy(self.net(x), y)
        print("loss", repr(loss.item()), flush=True)
        return loss

    def configure_optimizers(self):  # type: ignore[no-untyped-def]
        return torch.optim.SGD(self.parameters(), lr=0.05)

    def train_dataloader(self) -> DataLoader:
        g = torch.Generator().manual_seed(0)
        data = TensorDataset(torch.randn(16 * 64, 32, generator=g), torch.randint(0, 4, (16 * 64,), generator=g))
        return DataLoader(data, batch_size=16, num_workers=0)


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 12
    torch.manual_seed(0)
    trainer = pl.Trainer(max_steps=steps, accumulate_grad_batches=2, accelerator="cpu", devices=1,
                         logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False)
    trainer.fit(Tiny())
    print("global_step", trainer.global_step, flush=True)


if __name__ == "__main__":
    main()

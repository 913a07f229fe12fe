"""Pathology: the DataLoader loads batches in the training process (``num_workers=0``).

    python examples/dataloader_workers.py              # GP601: the loop waits for every batch
    python examples/dataloader_workers.py --baseline   # 2 persistent workers prepare batches ahead

The dataset's ``__getitem__`` stands for decoding and augmentation (it
sleeps 0.25 ms per sample). In the main process that time adds to every
step; worker processes prepare the next batches while the model trains.
"""

from __future__ import annotations

import time

import needs_torch  # noqa: F401 - without torch: one line naming what to install, exit 2
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from common import gpuprof, mlp, parse_args, pick_device, schedule


class SlowDataset(Dataset):
    """Random samples that take ``cost_s`` each to "decode"."""

    def __init__(self, n: int, cost_s: float = 0.00025) -> None:
        self.n = n
        self.cost_s = cost_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        time.sleep(self.cost_s)
        g = torch.Generator().manual_seed(i)
        return torch.randn(256, generator=g), i % 10


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    device = pick_device(args.device)
    cuda = device.type == "cuda"
    batch = 16
    data = SlowDataset(args.steps * batch)
    if args.baseline:
        loader = DataLoader(data, batch_size=batch, num_workers=2, persistent_workers=True,
                            pin_memory=cuda, prefetch_factor=4)
    else:
        loader = DataLoader(data, batch_size=batch, num_workers=0, pin_memory=cuda)
    model = mlp().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    loss_fn = nn.CrossEntropyLoss()

    with gpuprof.profile(args.logdir, run=args.run, schedule=schedule(args.steps)) as prof:
        for x, y in loader:
            x = x.to(device, non_blocking=True)
            y = y.to(device, non_blocking=True)
            loss = loss_fn(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            prof.step()


if __name__ == "__main__":
    main()

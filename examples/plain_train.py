"""A plain PyTorch training script that knows nothing of gpuprof: run it with ``gpuprof run``.

    gpuprof run examples/plain_train.py --device cpu --steps 20
    gpuprof run --logdir gpuprof_logs --run-name first examples/plain_train.py

``gpuprof run`` counts one step per optimizer step, records steps 7-11 and
prints its report when the script exits. The DataLoader builds its batches in
the training process (``num_workers=0``) on purpose, with a dataset whose
samples cost a little host time each: gpuprof names it (GP601) and says what
it costs per step. ``--workers 2`` is the fix.
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Samples(Dataset):
    """Random samples, each decoded in 0.5 ms of host time (as an image decode or a tokenizer would take)."""

    def __init__(self, n: int) -> None:
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 256, generator=g)
        self.y = torch.randint(0, 10, (n,), generator=g)

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(0.0005)
        return self.x[i], self.y[i]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--workers", type=int, default=0, help="DataLoader workers (default 0: the planted problem)")
    args = p.parse_args()
    device = torch.device(args.device)
    torch.manual_seed(0)

    loader = DataLoader(Samples(args.steps * 32), batch_size=32, shuffle=True, num_workers=args.workers,
                        pin_memory=device.type == "cuda")
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 10)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    for i, (x, y) in enumerate(loader):
        loss = loss_fn(model(x.to(device, non_blocking=True)), y.to(device, non_blocking=True))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if (i + 1) % 10 == 0:
            print(f"step {i + 1}: loss {loss.item():.3f}")


if __name__ == "__main__":
    main()

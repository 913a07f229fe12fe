"""Planted jobs for the loader fix's what-if (docs/try.md, "The loader fix's what-if against `gpuprof try`").

    python loader_cores.py [--steps N] [--item-ms MS] [--threads T] [--width W] [--matmuls K]

``num_workers=0``; each item burns MS milliseconds of this thread's own CPU time (``time.thread_time``, not the
wall clock: on a busy machine the work still needs that much of a core, as a real decode does). The trainer's
compute is K matmuls of a W x W matrix per step on T intra-op threads:

* ``--threads 1 --matmuls 0`` (the default): a light trainer on one core; workers would have the other core free.
* ``--threads 2 --width 384 --matmuls 40``: the trainer's compute keeps both cores of a 2-core machine busy; the
  workers' loading could only take its CPU from the trainer (a CPU loop where more workers hurt).

Deterministic (the same losses every run).
"""

import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Heavy(Dataset):
    def __init__(self, n: int, item_s: float) -> None:
        self.n, self.item_s = n, item_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        end = time.thread_time() + self.item_s
        while time.thread_time() < end:  # CPU work, counted on this thread's own clock
            pass
        g = torch.Generator().manual_seed(i)
        return torch.randn(32, generator=g), i % 4


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--item-ms", type=float, default=2.0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--matmuls", type=int, default=0)
    args = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    loader = DataLoader(Heavy(args.steps * 8, args.item_ms / 1000), batch_size=8, num_workers=0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    a = torch.randn(args.width, args.width) / args.width ** 0.5
    for x, y in loader:
        h = a
        for _ in range(args.matmuls):  # the trainer's own compute, on its intra-op threads
            h = torch.tanh(h @ a)
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y) + 0.0 * h.mean()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()

"""A planted problem for ``gpuprof try`` (tests/trials): num_workers=0 with a CPU-heavy dataset item.

    python planted_loader.py [--steps N] [--item-ms MS] [--crash-with-workers] [--done FILE]

Each item busy-loops for MS milliseconds of CPU (not a sleep: the work competes for the cores, as a real
decode or augmentation does). The loader has no workers, so that work is the step's. Deterministic: every
run gives the same losses. At the end it writes FILE (its "checkpoint": a trial must never get there) and
prints the tracker mode it saw. ``--crash-with-workers`` raises when the loader got workers (a variant that
breaks the job).
"""

import argparse
import os
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
        end = time.perf_counter() + self.item_s
        while time.perf_counter() < end:  # CPU work, as a decode would be
            pass
        g = torch.Generator().manual_seed(i)
        return torch.randn(32, generator=g), i % 4


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--item-ms", type=float, default=2.0)
    p.add_argument("--crash-with-workers", action="store_true")
    p.add_argument("--done", default="checkpoint.txt")
    args = p.parse_args()
    print(f"WANDB_MODE={os.environ.get('WANDB_MODE')}", flush=True)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    loader = DataLoader(Heavy(args.steps * 8, args.item_ms / 1000), batch_size=8, num_workers=0)
    if args.crash_with_workers and loader.num_workers > 0:
        raise RuntimeError("planted: this job breaks with DataLoader workers")
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for x, y in loader:
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
    with open(args.done, "w") as fh:  # the end-of-training work a trial never reaches
        fh.write("trained\n")


if __name__ == "__main__":
    main()

"""A planted problem for ``gpuprof try`` (tests/trials) and the loader fix's what-if (docs/try.md):
num_workers=0 with a CPU-heavy dataset item.

    python planted_loader.py [--steps N] [--item-ms MS] [--clock wall|thread] [--threads T] [--width W]
                             [--matmuls K] [--crash-with-workers] [--done FILE]

Each item busy-loops for MS milliseconds (not a sleep: the work competes for the cores, as a real decode or
augmentation does). The loader has no workers, so that work is the step's. ``--clock``:

* ``wall`` (the default): MS of the wall clock (``time.perf_counter``); in a worker it finishes on the clock
  whether or not it gets a core, so its loading needs no CPU the model can count;
* ``thread``: MS of this thread's own CPU time (``time.thread_time``): on a busy machine the work still needs that
  much of a core, as a real decode does.

The trainer's compute is K matmuls of a W x W matrix per step on T intra-op threads:

* ``--threads 1 --matmuls 0`` (the default): a light trainer on one core; workers would have the other core free.
* ``--threads 2 --width 384 --matmuls 40``: the trainer's compute keeps both cores of a 2-core machine busy; the
  workers' loading could only take its CPU from the trainer (a CPU loop where more workers hurt).

Deterministic: every run gives the same losses. At the end it writes FILE (its "checkpoint": a trial must never
get there) and prints the tracker mode it saw. ``--crash-with-workers`` raises when the loader got workers (a
variant that breaks the job).
"""

import argparse
import os
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

CLOCKS = {"wall": time.perf_counter, "thread": time.thread_time}


class Heavy(Dataset):
    def __init__(self, n: int, item_s: float, clock: str) -> None:
        self.n, self.item_s, self.clock = n, item_s, CLOCKS[clock]

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        end = self.clock() + self.item_s
        while self.clock() < end:  # CPU work, as a decode would be
            pass
        g = torch.Generator().manual_seed(i)
        return torch.randn(32, generator=g), i % 4


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--item-ms", type=float, default=2.0)
    p.add_argument("--clock", choices=sorted(CLOCKS), default="wall")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--matmuls", type=int, default=0)
    p.add_argument("--crash-with-workers", action="store_true")
    p.add_argument("--done", default="checkpoint.txt")
    args = p.parse_args()
    print(f"WANDB_MODE={os.environ.get('WANDB_MODE')}", flush=True)
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    loader = DataLoader(Heavy(args.steps * 8, args.item_ms / 1000, args.clock), batch_size=8, num_workers=0)
    if args.crash_with_workers and loader.num_workers > 0:
        raise RuntimeError("planted: this job breaks with DataLoader workers")
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    # the trainer's matrix, drawn after the model (the default job draws nothing more)
    a = torch.randn(args.width, args.width) / args.width ** 0.5 if args.matmuls else None
    for x, y in loader:
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        if a is not None:  # the trainer's own compute, on its intra-op threads
            h = a
            for _ in range(args.matmuls):
                h = torch.tanh(h @ a)
            loss = loss + 0.0 * h.mean()
        loss.backward()
        opt.step()
    with open(args.done, "w") as fh:  # the end-of-training work a trial never reaches
        fh.write("trained\n")


if __name__ == "__main__":
    main()

"""A plain training loop that knows nothing of gpuprof (tests/run): prints each loss with repr.

    python plain_loop.py [--steps N] [--workers N] [--raise-at N] [--interrupt-at N] [--exit-code N]
                         [--sleep-at N] [--no-optimizer] [--accumulate K]
                         [--sample-cost-ms MS]
"""

import argparse
import os
import sys
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset


class SlowData(Dataset):
    """Each sample costs ``cost_s`` of host time: in the main process (num_workers=0) that is the step's."""

    def __init__(self, base: TensorDataset, cost_s: float) -> None:
        self.base, self.cost_s = base, cost_s

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, i: int):
        time.sleep(self.cost_s)
        return self.base[i]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=14)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--raise-at", type=int, default=-1)
    p.add_argument("--interrupt-at", type=int, default=-1)
    p.add_argument("--exit-code", type=int, default=None)
    p.add_argument("--sleep-at", type=int, default=-1, help="sleep (for a signal) at this step, printing 'ready'")
    p.add_argument("--no-optimizer", action="store_true")
    p.add_argument("--accumulate", type=int, default=1)
    p.add_argument("--sample-cost-ms", type=float, default=0.0, help="host time per sample (a slow dataset)")
    args = p.parse_args()

    torch.manual_seed(0)
    n = args.steps * args.accumulate * 16
    data = TensorDataset(torch.randn(n, 32), torch.randint(0, 4, (n,)))
    if args.sample_cost_ms:
        data = SlowData(data, args.sample_cost_ms / 1000)
    loader = DataLoader(data, batch_size=16, shuffle=True, num_workers=args.workers)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    loss_fn = nn.CrossEntropyLoss()
    for i, (x, y) in enumerate(loader):
        if i == args.raise_at:
            raise RuntimeError(f"planted failure at batch {i}")
        if i == args.interrupt_at:
            raise KeyboardInterrupt
        if i == args.sleep_at:
            print("ready", os.getpid(), flush=True)
            time.sleep(60)
        if args.no_optimizer:
            with torch.no_grad():
                loss = loss_fn(model(x), y)
        else:
            loss = loss_fn(model(x), y) / args.accumulate
            loss.backward()
            if (i + 1) % args.accumulate == 0:
                opt.step()
                opt.zero_grad()
        print("loss", repr(loss.item()), flush=True)
    if args.exit_code is not None:
        sys.exit(args.exit_code)


if __name__ == "__main__":
    main()

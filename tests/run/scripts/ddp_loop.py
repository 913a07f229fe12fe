"""A 2-rank DDP loop on gloo that knows nothing of gpuprof (tests/run): torchrun --nproc-per-node 2 ddp_loop.py."""

import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 12
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(rank)
    model = DistributedDataParallel(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for _ in range(steps):
        x, y = torch.randn(16, 32), torch.randint(0, 4, (16,))
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"rank {rank} loss", repr(loss.item()), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

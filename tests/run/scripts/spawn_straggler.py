"""A 2-rank gloo DDP job started by torch.multiprocessing.spawn (no RANK in the environment): rank 1's DataLoader
sleeps 20 ms more per batch than rank 0's, every step. Imports nothing of gpuprof.

Usage: python spawn_straggler.py STEPS PORT
"""

import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.utils.data import DataLoader, Dataset

STEPS, PORT = int(sys.argv[1]), sys.argv[2]


class Data(Dataset):
    def __init__(self, rank: int) -> None:
        self.rank = rank

    def __len__(self) -> int:
        return 10_000

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.randn(8), torch.randn(1)


def collate(rank: int):
    def fn(items):
        if rank == 1:
            time.sleep(0.02)  # the planted straggler: 20 ms more data loading per step
        return torch.stack([a for a, _ in items]), torch.stack([b for _, b in items])
    return fn


def main(rank: int, world: int) -> None:
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", PORT
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(Data(rank), batch_size=16, collate_fn=collate(rank))
    for step, (x, y) in enumerate(loader):
        if step == STEPS:
            break
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(0.01)
    print(f"rank {rank} done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(main, args=(2,), nprocs=2)

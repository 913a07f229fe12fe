"""A CPU job of 300 steps whose loader slows down at step SLOW_FROM (a planted sleep in __getitem__).

Usage: python slowdown_job.py LOGDIR [SLOW_FROM] [STEPS]. Prints nothing of its own; gpuprof writes
LOGDIR/job/report.json.
"""

import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset

import gpuprof

LOGDIR = sys.argv[1]
SLOW_FROM = int(sys.argv[2]) if len(sys.argv) > 2 else 150
STEPS = int(sys.argv[3]) if len(sys.argv) > 3 else 300
SLOW_S = 0.04  # the planted data wait from SLOW_FROM on
STEP_S = 0.01  # the steady step's own sleep: steps dominated by sleeps keep their times on a busy machine

torch.set_num_threads(1)
X, Y = torch.randn(16, 8), torch.randn(16, 1)


class Batches(Dataset):  # type: ignore[type-arg]
    def __len__(self) -> int:
        return STEPS

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if i >= SLOW_FROM:
            time.sleep(SLOW_S)  # the planted slowdown
        return X, Y


model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
with gpuprof.profile(LOGDIR, run="job", tensorboard=False, print_report=False) as prof:
    for x, y in DataLoader(Batches(), batch_size=None):
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(STEP_S)
        prof.step()

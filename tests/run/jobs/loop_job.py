"""A CPU job that steps until told to stop, writing its step count to PROGRESS after every step.

Usage: python loop_job.py LOGDIR PROGRESS [MAX_STEPS]. It stops when PROGRESS.stop exists (or after
MAX_STEPS). Under torchrun every rank runs it (gloo); rank 0 writes PROGRESS, every rank reads the stop file.
"""

import os
import sys
import time

import torch

import gpuprof

LOGDIR, PROGRESS = sys.argv[1], sys.argv[2]
MAX_STEPS = int(sys.argv[3]) if len(sys.argv) > 3 else 3000
distributed = "RANK" in os.environ
if distributed:
    import torch.distributed as dist

    dist.init_process_group("gloo")
rank = int(os.environ.get("RANK", "0"))
torch.set_num_threads(1)
X, Y = torch.randn(16, 8), torch.randn(16, 1)
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
with gpuprof.profile(LOGDIR, run="job", tensorboard=False, print_report=False, max_auto_windows=0) as prof:
    for _ in range(MAX_STEPS):
        loss = torch.nn.functional.mse_loss(model(X), Y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(0.01)
        prof.step()
        if rank == 0:
            with open(PROGRESS + ".tmp", "w") as fh:
                fh.write(str(prof.step_num))
            os.replace(PROGRESS + ".tmp", PROGRESS)
        if os.path.exists(PROGRESS + ".stop"):
            break
if distributed:
    dist.destroy_process_group()

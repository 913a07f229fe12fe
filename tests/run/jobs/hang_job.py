"""A 2-rank gloo job (torchrun) where rank 1 never reaches the barrier: the watchdog's planted hang.

Usage: torchrun --nproc-per-node 2 hang_job.py LOGDIR HANG_TIMEOUT. The lines below marked RANK0-WAITS and
RANK1-WAITS are where each rank waits; the test reads their numbers from this file.
"""

import sys
import time

import torch
import torch.distributed as dist

import gpuprof

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.set_num_threads(1)
X, Y = torch.randn(16, 8), torch.randn(16, 1)
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
with gpuprof.profile(sys.argv[1], run="job", tensorboard=False, print_report=False,
                     hang_timeout=float(sys.argv[2]), max_auto_windows=0) as prof:
    for _ in range(20):
        loss = torch.nn.functional.mse_loss(model(X), Y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        prof.step()
    if rank == 1:
        time.sleep(3600)  # RANK1-WAITS: never reaches the barrier
    dist.barrier()  # RANK0-WAITS
print(f"rank {rank} done")

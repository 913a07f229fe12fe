"""A 2-rank gloo loop that knows nothing of gpuprof, where rank 1 never reaches the all_reduce (tests/run).

Usage: torchrun --nproc-per-node 2 hang_loop.py STEPS PG_TIMEOUT_S. Each step all-reduces the loss; after
STEPS steps rank 1 sleeps (RANK1-IS-HERE) while rank 0 waits in the next all_reduce (RANK0-WAITS) until the
process group's own timeout fails it, and torchrun stops rank 1.
"""

import datetime
import sys
import time

import torch
import torch.distributed as dist

steps, pg_timeout = int(sys.argv[1]), float(sys.argv[2])
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=pg_timeout))
rank = dist.get_rank()
torch.set_num_threads(1)
torch.manual_seed(rank)
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
X, Y = torch.randn(16, 8), torch.randn(16, 1)
for step in range(steps + 1):
    loss = torch.nn.functional.mse_loss(model(X), Y)
    opt.zero_grad()
    loss.backward()
    if step == steps and rank == 1:
        time.sleep(pg_timeout + 120)  # RANK1-IS-HERE: never reaches the all_reduce
    total = loss.detach().clone()
    dist.all_reduce(total)  # RANK0-WAITS
    opt.step()
print(f"rank {rank} done", flush=True)

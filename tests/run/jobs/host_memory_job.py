"""A CPU training loop that knows nothing of gpuprof, with its host memory planted by MODE.

Usage: python host_memory_job.py MODE [STEPS]. MODE ``leak``: a logging helper adds each step's monitoring
loss to ``running_loss`` as a tensor, keeping its autograd graph (and the activations it saved) alive, about
0.6 MiB a step; ``cache``: a cache of 40 MiB is filled once at step 10, then memory stays flat; ``flat``:
nothing kept.
"""

import sys
import time

import torch

MODE = sys.argv[1]
STEPS = int(sys.argv[2]) if len(sys.argv) > 2 else 300
torch.set_num_threads(1)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
X, Y = torch.randn(256, 256), torch.randn(256, 1)
XV, YV = torch.randn(256, 256), torch.randn(256, 1)
running_loss = 0.0
cache = []


def log_step():
    global running_loss
    loss = torch.nn.functional.mse_loss(model(XV), YV)  # computed with grad on: the graph is kept
    running_loss += loss


for step in range(STEPS):
    loss = torch.nn.functional.mse_loss(model(X), Y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if MODE == "leak":
        log_step()
    elif MODE == "cache" and step == 10:
        cache.append(torch.ones(10 * 2**20))  # 40 MiB, once
    time.sleep(0.002)
print(f"done {MODE} {float(running_loss):.3f}")

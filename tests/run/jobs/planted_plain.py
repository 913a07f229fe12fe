"""A plain CPU training loop (no gpuprof code) with a planted problem, for `gpuprof run`.

Usage: python planted_plain.py STEPS SLOW_FROM. Each step trains a small model and burns about 1 ms of CPU,
then sleeps 5 ms; from step SLOW_FROM on (never when it is -1) it sleeps 80 ms instead: the job itself slows
down (by far more than a busy machine's noise). SLOW_FROM -1 and a step of CPU work only (``--cpu``) make a steady CPU-bound job.
"""

import sys
import time

import torch

steps, slow_from = int(sys.argv[1]), int(sys.argv[2])
cpu_only = "--cpu" in sys.argv
torch.set_num_threads(1)
model = torch.nn.Linear(32, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(64, 32), torch.randn(64, 1)
for i in range(steps):
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    t = time.thread_time()
    while time.thread_time() - t < (0.006 if cpu_only else 0.001):  # CPU work, the same whatever the load
        pass
    if not cpu_only:
        time.sleep(0.080 if 0 <= slow_from <= i else 0.005)
print("done", steps)

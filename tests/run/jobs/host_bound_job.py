"""A CPU training loop that knows nothing of gpuprof, planted by MODE.

Usage: python host_bound_job.py MODE [STEPS]. MODE ``tiny``: each step runs a small model one sample at a time
(hundreds of operators on 8-element tensors) and prints ``loss.item()``: the framework's dispatch is the step;
``matmul``: each step is a few large matrix products (compute-heavy).
"""

import sys

import torch

MODE = sys.argv[1]
STEPS = int(sys.argv[2]) if len(sys.argv) > 2 else 40
torch.set_num_threads(1)
torch.manual_seed(0)
if MODE == "tiny":
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    X, Y = torch.randn(32, 8), torch.randn(32, 1)
else:
    model = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1))
    X, Y = torch.randn(512, 1024), torch.randn(512, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(STEPS):
    opt.zero_grad()
    if MODE == "tiny":
        loss = torch.zeros(())
        for i in range(len(X)):  # one sample at a time
            loss = loss + (model(X[i]) - Y[i]).pow(2).mean()
    else:
        loss = torch.nn.functional.mse_loss(model(X), Y)
    loss.backward()
    opt.step()
    print(f"step {step} loss {loss.item():.4f}")

"""A plain loop that fails in its first step, before any optimizer step (tests/run): the seeds' commonest error.

    python early_error.py device|dtype|other

``device``: the batch is a ``meta`` tensor and the model on the CPU (the CPU stand-in for a CUDA model fed a
CPU batch); ``dtype``: a float64 NumPy batch into a float32 model; ``other``: an error gpuprof has nothing to
say about (a missing file).
"""

import sys

import numpy as np
import torch
from torch import nn


class Net(nn.Module):  # a class above the loop, as most scripts have
    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(64, 128), nn.ReLU())
        self.head = nn.Linear(128, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x))


def batch(kind: str) -> torch.Tensor:
    if kind == "device":
        return torch.randn(32, 64, device="meta")
    if kind == "dtype":
        return torch.from_numpy(np.random.default_rng(0).standard_normal((32, 64)))  # float64
    with open("no-such-dataset.bin", "rb") as fh:
        return torch.frombuffer(fh.read(), dtype=torch.float32)


def main() -> None:
    kind = sys.argv[1]
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    for _ in range(10):
        loss = nn.functional.cross_entropy(model(batch(kind)), torch.randint(0, 10, (32,)))
        opt.zero_grad()
        loss.backward()
        opt.step()
        print("loss", repr(loss.item()), flush=True)


if __name__ == "__main__":
    main()

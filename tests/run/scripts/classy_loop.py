"""An inference loop (tests/run) whose script defines a dataclass, a model class and a helper called at module
level above its step function, and a step function defined inside main(): every --step-function spelling."""
import sys
from dataclasses import dataclass

import torch
from torch import nn


@dataclass
class Config:
    steps: int = 6


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 2)

    def forward(self, x):
        return self.lin(x)


def helper():
    return Config(int(sys.argv[1]) if len(sys.argv) > 1 else 6)


torch.manual_seed(0)
cfg = helper()
model = Model()


def infer_step(x):
    with torch.no_grad():
        return model(x).sum()


def main():
    def nested_step(x):
        return infer_step(x)

    for _ in range(cfg.steps):
        print("out", float(nested_step(torch.randn(4, 8))))


if __name__ == "__main__":
    main()

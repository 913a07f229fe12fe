"""An inference loop with no optimizer (tests/run): ``infer_step`` is the step, for ``--step-function``."""

import sys

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))


def infer_step(x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(x).sum()


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 14
    for _ in range(steps):
        print("out", repr(infer_step(torch.randn(16, 32)).item()), flush=True)


if __name__ == "__main__":
    main()

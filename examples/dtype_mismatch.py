"""Pathology: a float64 NumPy batch into a float32 model (GP614): PyTorch's dtype error, explained.

    python examples/dtype_mismatch.py              # fails in step 0: "mat1 and mat2 must have the same dtype"
    python examples/dtype_mismatch.py --baseline   # torch.from_numpy(a).float()

NumPy arrays are float64 by default and ``torch.from_numpy`` keeps the dtype,
so the first ``nn.Linear`` raises PyTorch's dtype error, which names neither
the module nor the tensor. gpuprof lets the error through unchanged and
reports GP614 in report.json (and the printed summary): the module path, its
parameters' and the input's dtypes, the user's line, and the fix. CPU or GPU.
"""

from __future__ import annotations

import sys

import needs_torch  # noqa: F401 - without torch: one line naming what to install, exit 2
import numpy as np
import torch
from common import gpuprof, mlp, parse_args, pick_device, schedule
from torch import nn


def main() -> int:
    args = parse_args(__doc__.splitlines()[0], steps=20)
    device = pick_device(args.device)
    model = mlp(width=64).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    rng = np.random.default_rng(0)

    @gpuprof.profile_step(args.logdir, run=args.run, schedule=schedule(args.steps))
    def train_step(x: torch.Tensor, y: torch.Tensor) -> float:
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.item()

    try:
        for _ in range(args.steps):
            batch = torch.from_numpy(rng.standard_normal((32, 64)))  # float64
            x = batch.float() if args.baseline else batch
            train_step(x.to(device), torch.randint(0, 10, (32,), device=device))
    except RuntimeError as err:  # the user's own error, unchanged
        print(f"RuntimeError: {err}", file=sys.stderr)
        return 1
    train_step.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())

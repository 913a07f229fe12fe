"""Pathology: the model and the data are on different devices.

    python examples/device_mismatch.py              # fails in step 0, with gpuprof's explanation
    python examples/device_mismatch.py --baseline   # data moved to the model's device

On a GPU machine the model is on CUDA and the batch stays on the CPU; on a
CPU-only machine the batch is a ``meta`` tensor (a device with no data), which
fails the same way. PyTorch's error names neither the module nor the tensor;
gpuprof re-raises it as ``DeviceMismatchError`` naming the module path, the
parameter, its shape and device (the original error is chained), and reports
GP612 (input on another device) and GP613 (the error) in report.json.
"""

from __future__ import annotations

import sys

import needs_torch  # noqa: F401 - without torch: one line naming what to install, exit 2
import torch
from torch import nn

from common import gpuprof, parse_args, pick_device, schedule


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(64, 128), nn.ReLU())
        self.head = nn.Linear(128, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x))


def main() -> int:
    args = parse_args(__doc__.splitlines()[0], steps=20)
    device = pick_device(args.device)
    model = Net().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    wrong = torch.device("cpu") if device.type != "cpu" else torch.device("meta")
    data_device = device if args.baseline else wrong

    @gpuprof.profile_step(args.logdir, run=args.run, schedule=schedule(args.steps))
    def train_step(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.item()

    try:
        for _ in range(args.steps):
            x = torch.randn(32, 64, device=data_device)
            y = torch.randint(0, 10, (32,), device=device)
            train_step(model, x, y)
    except gpuprof.capture.DeviceMismatchError as err:
        print(f"DeviceMismatchError: {err}", file=sys.stderr)
        print(f"(original error: {type(err.__cause__).__name__}: {err.__cause__})", file=sys.stderr)
        return 1
    train_step.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())

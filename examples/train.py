"""A plain training script profiled with the decorator: each call of ``train_step`` is one step.

    python examples/train.py                  # CUDA when available, else CPU
    tensorboard --logdir gpuprof_logs         # scalars + findings (Text tab)
    gpuprof analyze gpuprof_logs/<run>        # the trace, analysed again

gpuprof records steps 7-11 (after start-up), checks the run as it goes and
prints a short report when the script exits.
"""

from __future__ import annotations

import needs_torch  # noqa: F401 - without torch: one line naming what to install, exit 2
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from common import gpuprof, mlp, parse_args, pick_device, schedule


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], steps=40)
    device = pick_device(args.device)
    cuda = device.type == "cuda"
    torch.manual_seed(0)

    data = TensorDataset(torch.randn(args.steps * 32, 256), torch.randint(0, 10, (args.steps * 32,)))
    loader = DataLoader(data, batch_size=32, shuffle=True, num_workers=2, persistent_workers=True,
                        pin_memory=cuda)
    model = mlp().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()

    @gpuprof.profile_step(args.logdir, run=args.run, schedule=schedule(args.steps))
    def train_step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda):
            loss = loss_fn(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.detach()

    running = torch.zeros((), device=device)
    for i, (x, y) in enumerate(loader):
        running += train_step(x.to(device, non_blocking=True), y.to(device, non_blocking=True))
        if (i + 1) % 20 == 0:
            print(f"step {i + 1}: mean loss {running.item() / 20:.3f}")
            running.zero_()
    train_step.finish()  # optional: it also finishes at exit


if __name__ == "__main__":
    main()

"""Pathology: float16 autocast without a GradScaler (GP860), or float16 weights (GP861, --half).

    python examples/fp16_without_scaler.py              # autocast(float16), plain loss.backward()
    python examples/fp16_without_scaler.py --half       # model.half(): the optimizer steps float16 weights
    python examples/fp16_without_scaler.py --baseline   # autocast(float16) with torch.amp.GradScaler

Float16 gradients below about 6e-8 flush to zero without loss scaling, and
float16 weights lose every update smaller than their rounding step. Both show
on CPU too (CPU autocast supports float16). On an Ampere-or-newer GPU the
baseline still gets GP862: bfloat16 would need no scaler at all.
"""

from __future__ import annotations

import needs_torch  # noqa: F401 - without torch: one line naming what to install, exit 2
import torch
from common import gpuprof, mlp, parse_args, pick_device, schedule
from torch import nn


def main() -> None:
    args = parse_args(__doc__.splitlines()[0],
                      extra=[("--half", {"action": "store_true", "help": "train float16 weights (model.half())"})])
    device = pick_device(args.device)
    width = 1024 if device.type == "cuda" else 128
    model = mlp(width=width, depth=4).to(device)
    if args.half and not args.baseline:
        model = model.half()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    scaler = torch.amp.GradScaler(device.type) if args.baseline else None
    loss_fn = nn.CrossEntropyLoss()
    dtype = torch.float16 if args.half and not args.baseline else torch.float32
    x = torch.randn(256 if device.type == "cuda" else 32, width, device=device, dtype=dtype)
    y = torch.randint(0, 10, (x.shape[0],), device=device)

    @gpuprof.profile_step(args.logdir, run=args.run, schedule=schedule(args.steps))
    def train_step() -> torch.Tensor:
        with torch.autocast(device.type, dtype=torch.float16):
            loss = loss_fn(model(x).float(), y)
        opt.zero_grad(set_to_none=True)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()     # small float16 gradients flush to zero
            opt.step()
        return loss.detach()

    for _ in range(args.steps):
        train_step()
    train_step.finish()


if __name__ == "__main__":
    main()

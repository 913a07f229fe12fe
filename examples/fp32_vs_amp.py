"""Pathology: FP32 training where mixed precision (AMP) would serve.

    python examples/fp32_vs_amp.py              # FP32 matmuls (and GP621 when TF32 is disabled on Ampere+)
    python examples/fp32_vs_amp.py --baseline   # torch.autocast(bfloat16): tensor cores

On an Ampere-or-newer GPU, FP32 matmuls without TF32 leave the tensor cores
idle; bf16 autocast runs them several times faster. The pathology also
disables TF32 (``torch.set_float32_matmul_precision("highest")``, the
default) so gpuprof's GP621 fires. On CPU the example runs without findings.
"""

from __future__ import annotations

import needs_torch  # noqa: F401 - without torch: one line naming what to install, exit 2
import torch
from torch import nn

from common import gpuprof, mlp, parse_args, pick_device, schedule


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    device = pick_device(args.device)
    cuda = device.type == "cuda"
    torch.set_float32_matmul_precision("highest")
    model = mlp(width=1024 if cuda else 256, depth=4).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    loss_fn = nn.CrossEntropyLoss()
    width = 1024 if cuda else 256
    x = torch.randn(512 if cuda else 32, width, device=device)
    y = torch.randint(0, 10, (x.shape[0],), device=device)
    amp = args.baseline and cuda

    @gpuprof.profile_step(args.logdir, run=args.run, schedule=schedule(args.steps))
    def train_step() -> torch.Tensor:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
            loss = loss_fn(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.detach()

    for _ in range(args.steps):
        train_step()
    train_step.finish()


if __name__ == "__main__":
    main()

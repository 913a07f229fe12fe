"""Pathology: debugging switches left on (GP623 CUDA_LAUNCH_BLOCKING=1, GP624 deterministic algorithms).

    python examples/debug_settings.py              # both switches on while training
    python examples/debug_settings.py --baseline   # neither

``CUDA_LAUNCH_BLOCKING=1`` makes every kernel launch wait for its kernel (no
queueing ahead of the GPU); ``torch.use_deterministic_algorithms(True)`` and
``cudnn.deterministic`` restrict kernels to deterministic, often slower, ones.
Both are warnings on a GPU; on a CPU-only run they change little and are
reported as info (so they are seen before the script moves to a GPU).
"""

from __future__ import annotations

import os

import needs_torch  # noqa: F401 - without torch: one line naming what to install, exit 2
import torch
from common import gpuprof, mlp, parse_args, pick_device, schedule
from torch import nn


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    if not args.baseline:
        os.environ["CUDA_LAUNCH_BLOCKING"] = "1"  # read by the CUDA runtime when it starts: set before any CUDA call
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS needs it
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.deterministic = True
    device = pick_device(args.device)
    model = mlp(width=128).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    x = torch.randn(64, 128, device=device)
    y = torch.randint(0, 10, (64,), device=device)
    with gpuprof.profile(args.logdir, run=args.run, schedule=schedule(args.steps)) as prof:
        for _ in range(args.steps):
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            prof.step()


if __name__ == "__main__":
    main()

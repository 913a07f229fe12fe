"""Pathology: evaluation with autograd on (GP843): every forward records a graph no backward will use.

    python examples/eval_without_no_grad.py              # model.eval() alone: autograd still records
    python examples/eval_without_no_grad.py --baseline   # the same loop under torch.inference_mode()

``model.eval()`` switches dropout and batch-norm to inference behaviour; it
does not stop autograd. Without ``torch.no_grad()``/``torch.inference_mode()``
each operator creates a graph node and keeps its inputs alive for a backward
that never comes: host time per operator and activation memory per batch.
Runs on CPU or GPU.
"""

from __future__ import annotations

import needs_torch  # noqa: F401 - without torch: one line naming what to install, exit 2
import torch
from common import gpuprof, mlp, parse_args, pick_device, schedule


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    device = pick_device(args.device)
    width = 1024 if device.type == "cuda" else 256
    model = mlp(width=width, depth=6).to(device)
    model.eval()
    batches = [torch.randn(64, width, device=device) for _ in range(4)]
    correct = torch.zeros((), device=device)

    def predict(x: torch.Tensor) -> torch.Tensor:
        return model(x).argmax(dim=1)

    @gpuprof.profile_step(args.logdir, run=args.run, schedule=schedule(args.steps))
    def eval_step(i: int) -> None:
        x = batches[i % len(batches)]
        if args.baseline:
            with torch.inference_mode():
                pred = predict(x)
        else:
            pred = predict(x)  # grad mode on: a graph per batch
        correct.add_((pred == 0).sum())

    for i in range(args.steps):
        eval_step(i)
    eval_step.finish()


if __name__ == "__main__":
    main()

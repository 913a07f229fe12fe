"""Pathology: a memory leak across steps (``total_loss += loss`` keeps every step's graph alive).

    python examples/memory_leak.py              # leaks: gpuprof reports GP640 memory-growth
    python examples/memory_leak.py --baseline   # total_loss += loss.item(): flat memory

Summing the loss *tensor* chains every step's autograd graph to the next.
Here, as often in real code, ``backward(retain_graph=True)`` (added to silence
"Trying to backward through the graph a second time") keeps each graph's
saved activations too, so memory grows by a step's activations every step.
``loss.item()`` (or ``loss.detach()``) keeps a number instead.
"""

from __future__ import annotations

import needs_torch  # noqa: F401 - without torch: one line naming what to install, exit 2
import torch
from torch import nn

from common import gpuprof, mlp, parse_args, pick_device, schedule


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    device = pick_device(args.device)
    torch.manual_seed(0)
    model = mlp(width=256).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    x = torch.randn(128, 256, device=device)
    y = torch.randint(0, 10, (128,), device=device)

    total_loss: torch.Tensor | float = 0.0
    with gpuprof.profile(args.logdir, run=args.run, schedule=schedule(args.steps)) as prof:
        for _ in range(args.steps):
            loss = loss_fn(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward(retain_graph=not args.baseline)
            opt.step()
            if args.baseline:
                total_loss += loss.item()
            else:
                total_loss = total_loss + loss  # the leak: a tensor with the whole history attached
            prof.step()
    print(f"mean loss {float(total_loss.detach() if torch.is_tensor(total_loss) else total_loss) / args.steps:.3f}")


if __name__ == "__main__":
    main()

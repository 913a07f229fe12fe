"""Pathology: ``.item()`` every step makes the CPU wait for the GPU.

    python examples/item_every_step.py              # GP630 (file:line of the .item()) and trace sync findings
    python examples/item_every_step.py --baseline   # losses summed on the GPU, read once at the end

``loss.item()`` copies a number to the host, so the host must wait until the
GPU has finished the step: the GPU then idles while Python prepares the next
one. On CUDA, gpuprof's host-sync locator names the line; on CPU there is no
asynchronous device, so the example runs but has nothing to report.
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
    model = mlp().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    x = torch.randn(64, 256, device=device)
    y = torch.randint(0, 10, (64,), device=device)
    losses: list[float] = []
    running = torch.zeros((), device=device)

    with gpuprof.profile(args.logdir, run=args.run, schedule=schedule(args.steps)) as prof:
        for _ in range(args.steps):
            loss = loss_fn(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if args.baseline:
                running += loss.detach()  # stays on the GPU: no sync
            else:
                losses.append(loss.item())  # host waits for the GPU every step
            prof.step()
    mean = running.item() / args.steps if args.baseline else sum(losses) / len(losses)
    print(f"mean loss {mean:.3f}")


if __name__ == "__main__":
    main()

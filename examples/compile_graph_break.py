"""Pathology: a graph break and changing batch sizes under torch.compile.

    python examples/compile_graph_break.py              # GP801 (the print's line), GP802, GP803; GP810/GP811
    python examples/compile_graph_break.py --baseline   # no print in forward, one batch size: none of them

A ``print`` inside the compiled ``forward`` breaks the graph: Dynamo compiles
the code before and after it separately and runs the print eagerly between
them. Batches of changing size fail Dynamo's shape guards, so ``forward`` is
compiled again in the middle of training. Both cost time silently; gpuprof
names the line of the break, the guard that failed and the compile time spent
inside steps. Runs on CPU (the "eager" backend keeps compilation short; the
diagnosis is the same with the default Inductor backend on a GPU).
"""

from __future__ import annotations

import needs_torch  # noqa: F401 - without torch: one line naming what to install, exit 2
import torch
from torch import nn

from common import gpuprof, parse_args, pick_device
from gpuprof.capture import Schedule


class Net(nn.Module):
    def __init__(self, chatty: bool) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(64, 128), nn.ReLU())
        self.head = nn.Linear(128, 10)
        self.chatty = chatty

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.encoder(x)
        if self.chatty:
            print(f"hidden {tuple(h.shape)}")  # graph break: Dynamo cannot put print in a graph
        return self.head(h)


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], steps=12, extra=[
        ("--backend", {"default": "eager", "help": "torch.compile backend (default: eager; inductor on a GPU)"})])
    device = pick_device(args.device)
    torch.manual_seed(0)
    net = Net(chatty=not args.baseline).to(device)
    model = torch.compile(net, backend=args.backend)
    opt = torch.optim.SGD(net.parameters(), lr=1e-2)
    loss_fn = nn.CrossEntropyLoss()
    # the bad loop's batches change size after a few steps (a last partial batch, variable-length data)
    sizes = [32 if args.baseline or i < args.steps // 2 else 32 - 8 * (i % 3) for i in range(args.steps)]
    # record from step 2 on: the recompilations happen inside the window
    with gpuprof.profile(args.logdir, run=args.run, schedule=Schedule(wait=1, warmup=1, active=min(args.steps - 2, 8))) as prof:
        for n in sizes:
            x = torch.randn(n, 64, device=device)
            y = torch.randint(0, 10, (n,), device=device)
            loss = loss_fn(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            prof.step()


if __name__ == "__main__":
    main()

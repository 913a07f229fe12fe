"""Pathology: host-to-device copies from pageable memory, blocking the host.

    python examples/pageable_copies.py              # pin_memory=False, .to(device): blocking pageable copies
    python examples/pageable_copies.py --baseline   # pin_memory=True, .to(device, non_blocking=True)

A copy from ordinary (pageable) host memory is staged by the driver and the
host waits for it; from pinned memory it runs asynchronously and overlaps
with compute. gpuprof reports GP602 (pin_memory=False while training on CUDA)
and the analyzer its pageable/blocking copy findings. Needs CUDA to show
anything: on CPU there is no copy, and the example just runs.
"""

from __future__ import annotations

import needs_torch  # noqa: F401 - without torch: one line naming what to install, exit 2
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from common import gpuprof, mlp, note_facts, parse_args, pick_device, schedule


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    device = pick_device(args.device)
    cuda = device.type == "cuda"
    n = args.steps * 256
    data = TensorDataset(torch.randn(n, 1024), torch.randint(0, 10, (n,)))
    pinned = args.baseline and cuda
    batch = 256
    note_facts(h2d_bytes_per_step=sum(t[:batch].nbytes for t in data.tensors))  # x and y of one batch
    loader = DataLoader(data, batch_size=batch, num_workers=2, persistent_workers=True, pin_memory=pinned)
    model = nn.Sequential(nn.Linear(1024, 256), nn.ReLU(), mlp()).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()

    with gpuprof.profile(args.logdir, run=args.run, schedule=schedule(args.steps)) as prof:
        for x, y in loader:
            x = x.to(device, non_blocking=pinned)
            y = y.to(device, non_blocking=pinned)
            loss = loss_fn(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            prof.step()


if __name__ == "__main__":
    main()

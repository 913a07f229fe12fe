"""Pathology: DistributedSampler.set_epoch() never called (GP712): every epoch shuffles in the same order.

    python examples/sampler_epoch.py              # the sampler's epoch stays 0: the same order every epoch
    python examples/sampler_epoch.py --baseline   # sampler.set_epoch(epoch) before each epoch

``DistributedSampler(shuffle=True)`` seeds its permutation with ``seed + epoch``;
without ``set_epoch`` the epoch stays 0, so every epoch visits the samples in
the same order (and each rank sees the same shard in the same order). The
sampler is built with ``num_replicas=1, rank=0`` so the example needs no
process group; under torchrun the default arguments behave the same. CPU or GPU.
"""

from __future__ import annotations

import needs_torch  # noqa: F401 - without torch: one line naming what to install, exit 2
import torch
from common import gpuprof, mlp, parse_args, pick_device, schedule
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    device = pick_device(args.device)
    torch.manual_seed(0)
    model = mlp(width=64).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    ds = TensorDataset(torch.randn(256, 64), torch.randint(0, 10, (256,)))
    sampler = DistributedSampler(ds, num_replicas=1, rank=0, shuffle=True)
    loader = DataLoader(ds, batch_size=32, sampler=sampler)
    epochs = max(args.steps // len(loader), 3)
    with gpuprof.profile(args.logdir, run=args.run, schedule=schedule(args.steps)) as prof:
        for epoch in range(epochs):
            if args.baseline:
                sampler.set_epoch(epoch)  # a new order each epoch
            for x, y in loader:
                loss = nn.functional.cross_entropy(model(x.to(device)), y.to(device))
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                prof.step()


if __name__ == "__main__":
    main()

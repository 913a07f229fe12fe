"""A 2-process DDP job on CPU (gloo) with a planted straggler, for ``torchrun``.

    torchrun --nproc_per_node=2 examples/ddp_straggler.py --logdir gpuprof_logs --run-name ddp
    gpuprof analyze gpuprof_logs/ddp

By default rank 1 sleeps in every step (a straggler: the other rank waits for
it in the all-reduce) and gradients are synchronised on every micro-batch of
a 4-way accumulation (no ``no_sync()``), and the DataLoader has no
``DistributedSampler`` (every rank reads the same samples). ``--baseline``
runs the fixed twin: no sleep, ``no_sync()`` on all but the last
micro-batch, a ``DistributedSampler``.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import needs_torch  # noqa: E402, F401 - without torch: one line, exit 2
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset  # noqa: E402

import gpuprof  # noqa: E402
from common import mlp, parse_args, schedule  # noqa: E402

ACCUMULATION = 4


def main() -> None:
    args = parse_args(
        __doc__.splitlines()[0], steps=8,
        extra=[("--sleep-ms", {"type": float, "default": 40.0, "help": "the straggler's sleep per step"})],
    )
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    # the pathology also searches for unused parameters every step (all are used: GP705)
    model = DDP(mlp(width=128, depth=2), bucket_cap_mb=25, find_unused_parameters=not args.baseline)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = torch.nn.CrossEntropyLoss()
    data = TensorDataset(torch.randn(16 * ACCUMULATION * 4, 128), torch.randint(0, 10, (16 * ACCUMULATION * 4,)))
    # the pathology also reads the same samples on every rank (no DistributedSampler: GP710)
    sampler = DistributedSampler(data, shuffle=False) if args.baseline else None
    loader = DataLoader(data, batch_size=16, sampler=sampler)
    straggler = not args.baseline and rank == 1

    @gpuprof.profile_step(args.logdir, run=args.run, schedule=schedule(args.steps), with_stack=False,
                          memory_history=False, tensorboard=False, print_report=False)
    def train_step() -> None:
        if straggler:
            time.sleep(args.sleep_ms / 1000)  # the planted slowness: host work only rank 1 does
        for i, (x, y) in enumerate(itertools.islice(loader, ACCUMULATION)):
            last = i == ACCUMULATION - 1
            # the fix: synchronise gradients once per optimizer step, not per micro-batch
            ctx = model.no_sync() if args.baseline and not last else contextlib.nullcontext()
            with ctx:
                loss_fn(model(x), y).backward()
        opt.step()
        opt.zero_grad()

    for _ in range(args.steps):
        train_step()
    train_step.finish()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""Pathology: host chores in every training step (GP840 zero-filled gradients, GP841 gc.collect and logging).

    python examples/step_habits.py              # zero_grad(set_to_none=False), gc.collect(), the weights logged every step
    python examples/step_habits.py --baseline   # zero_grad() (set_to_none), gc.freeze(), logging every 50 steps

Each habit is cheap to write and costs every step: zero-filling gradients runs
one fill per parameter tensor, a full garbage collection walks every Python
object, and formatting a weight matrix into every log record writes tens of
thousands of numbers. All three show on CPU as on a GPU; on a GPU, logging a CUDA tensor also
makes the host wait for the step's GPU work (GP203 names that call).
"""

from __future__ import annotations

import gc
import io
import logging

import needs_torch  # noqa: F401 - without torch: one line naming what to install, exit 2
import torch
from common import gpuprof, mlp, parse_args, pick_device, schedule
from torch import nn

log = logging.getLogger("step_habits")


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    log.addHandler(logging.StreamHandler(io.StringIO()))  # a handler that formats every record (in memory here)
    log.setLevel(logging.INFO)
    log.propagate = False
    device = pick_device(args.device)
    width = 1024 if device.type == "cuda" else 256
    model = mlp(width=width, depth=6).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    x = torch.randn(64, width, device=device)
    y = torch.randint(0, 10, (x.shape[0],), device=device)
    garbage = [{"i": i, "tags": [str(i)] * 4} for i in range(50_000)]  # a process with many live objects
    if args.baseline:
        gc.freeze()  # after set-up: long-lived objects leave the collector's generations

    state = {"step": 0}

    @gpuprof.profile_step(args.logdir, run=args.run, schedule=schedule(args.steps))
    def train_step() -> torch.Tensor:
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        step = state["step"] = state["step"] + 1
        if args.baseline:
            opt.zero_grad()                         # set_to_none=True: gradients dropped, not zero-filled
            if step % 50 == 0:
                log.info("step %d loss %.4f weights %s", step, loss.item(), model[0].weight.detach().tolist())
        else:
            opt.zero_grad(set_to_none=False)        # one zero-fill per gradient tensor
            gc.collect()                            # a full collection every step
            log.info("step %d loss %.4f weights %s", step, loss.item(), model[0].weight.detach().tolist())  # formats 65k floats
        return loss.detach()

    for _ in range(args.steps):
        train_step()
    train_step.finish()
    assert len(garbage) == 50_000


if __name__ == "__main__":
    main()

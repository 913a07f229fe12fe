"""An Accelerate loop with gradient accumulation that knows nothing of gpuprof (tests/run)."""

import sys

import torch
from accelerate import Accelerator
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 12
    accumulate = 2
    torch.manual_seed(0)
    accelerator = Accelerator(gradient_accumulation_steps=accumulate, cpu=True)
    data = TensorDataset(torch.randn(steps * accumulate * 16, 32), torch.randint(0, 4, (steps * accumulate * 16,)))
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    loader = DataLoader(data, batch_size=16, shuffle=True)
    model, opt, loader = accelerator.prepare(model, opt, loader)
    optimizer_steps = 0
    for x, y in loader:
        with accelerator.accumulate(model):
            loss = nn.functional.cross_entropy(model(x), y)
            accelerator.backward(loss)
            opt.step()
            opt.zero_grad()
            if accelerator.sync_gradients:
                optimizer_steps += 1
        print("loss", repr(loss.item()), flush=True)
    print("optimizer_steps", optimizer_steps, flush=True)


if __name__ == "__main__":
    main()

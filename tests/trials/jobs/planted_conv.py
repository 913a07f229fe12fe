"""A small convolutional job for ``gpuprof try``'s model and optimizer variants (tests/trials).

    python planted_conv.py [--steps N] [--device cpu|cuda] [--optimizer adam|sgd] [--raise-in-forward]

Seeded: every run gives the same losses. A per-step ``loss.item()`` (a host sync on CUDA: a change only the
code can make). At the end it writes ``checkpoint.pt`` beside itself (a trial must never get there).
``--raise-in-forward`` raises when the model runs under autocast (a variant that breaks the job).
"""

import argparse
import os

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self, fail_on_autocast: bool) -> None:
        super().__init__()
        self.fail_on_autocast = fail_on_autocast
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1))
        self.head = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fail_on_autocast and torch.is_autocast_enabled(x.device.type):
            raise RuntimeError("planted: this model breaks under autocast")
        return self.head(torch.flatten(self.features(x), 1))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--device", default="cpu")
    p.add_argument("--optimizer", default="adam", choices=["adam", "sgd"])
    p.add_argument("--raise-in-forward", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(1)
    data = TensorDataset(torch.randn(args.steps * 8, 3, 16, 16, generator=g),
                         torch.randint(0, 10, (args.steps * 8,), generator=g))
    loader = DataLoader(data, batch_size=8, shuffle=False)
    model = Net(args.raise_in_forward).to(args.device)
    if args.optimizer == "adam":
        opt: torch.optim.Optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    for step, (x, y) in enumerate(loader):
        x, y = x.to(args.device), y.to(args.device)
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        if step % 10 == 0:
            print(f"step {step} loss {loss.item():.4f}", flush=True)
    torch.save(model.state_dict(), os.path.join(os.path.dirname(os.path.abspath(__file__)), "checkpoint.pt"))


if __name__ == "__main__":
    main()

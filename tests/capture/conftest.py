"""Shared helpers for the capture tests (torch and tensorboard are optional: tests skip without them)."""

from __future__ import annotations

import glob
import json
import os
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(autouse=True)
def _small_threads() -> Any:
    torch = pytest.importorskip("torch")
    prev = torch.get_num_threads()
    torch.set_num_threads(1)  # 2-core CI machine: keep runs predictable
    yield
    torch.set_num_threads(prev)


def quick_schedule() -> Any:
    from gpuprof.capture import Schedule

    return Schedule(wait=1, warmup=1, active=3)


def run_dir(logdir: Path) -> Path:
    runs = [Path(p) for p in glob.glob(str(logdir / "*")) if os.path.isdir(p)]
    assert len(runs) == 1, runs
    return runs[0]


def traces(logdir: Path) -> list[Path]:
    return sorted(Path(p) for p in glob.glob(str(logdir / "**" / "*.pt.trace.json.gz"), recursive=True))


def report_json(rdir: Path) -> dict[str, Any]:
    return json.loads((rdir / "report.json").read_text())


def codes(report: dict[str, Any]) -> set[str]:
    return {f["code"] for f in report["findings"]}


def tiny_model() -> Any:
    from torch import nn

    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))


def train_step(model: Any, opt: Any, x: Any, y: Any) -> Any:
    from torch import nn

    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.detach()

"""Shared bits of the gpuprof examples: command line, device choice, a small model.

Every example runs the pathology by default and the clean version with
``--baseline``; ``--logdir`` and ``--steps`` keep CI runs small.
"""

from __future__ import annotations

import argparse
import json
import os

import needs_torch  # noqa: F401 - without torch: one line naming what to install, exit 2
import torch
from torch import nn

import gpuprof
from gpuprof.capture import Schedule


def parse_args(description: str, steps: int = 30, extra: list[tuple[str, dict]] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--baseline", action="store_true", help="run the clean version (no pathology)")
    p.add_argument("--logdir", default="gpuprof_logs", help="where gpuprof writes (default: gpuprof_logs)")
    # not --run: torchrun (torch 2.13) takes --run for an abbreviation of its own --run-path and stops
    p.add_argument("--run-name", dest="run", default=None, help="run name under logdir (default: a timestamp)")
    p.add_argument("--steps", type=int, default=steps, help=f"training steps (default: {steps})")
    p.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    for name, kw in extra or []:
        p.add_argument(name, **kw)
    return p.parse_args()


def pick_device(arg: str | None) -> torch.device:
    if arg:
        return torch.device(arg)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def mlp(width: int = 256, depth: int = 3, classes: int = 10) -> nn.Module:
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    layers.append(nn.Linear(width, classes))
    return nn.Sequential(*layers)


def schedule(steps: int) -> Schedule:
    """Record a few steps after start-up, within a run of ``steps`` steps."""
    if steps >= 16:
        return Schedule()  # gpuprof's default: steps 7-11 recorded
    return Schedule(wait=1, warmup=1, active=max(min(steps - 3, 5), 1))


def note_facts(**facts: object) -> None:
    """Tell examples/record_gpu_truth.py what this run knows (e.g. a batch's bytes), for its expectations.

    Writes ``facts`` as JSON to ``$GPUPROF_EXAMPLE_FACTS`` when that is set; does nothing otherwise.
    """
    path = os.environ.get("GPUPROF_EXAMPLE_FACTS")
    if path:
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(facts, fh)


_GPUPROF = gpuprof  # the real package, whatever ``gpuprof`` below becomes


class _NoCapture:
    """``gpuprof.profile(...)`` doing nothing (``GPUPROF_EXAMPLE_PLAIN=1``)."""

    def __enter__(self) -> "_NoCapture":
        return self

    def __exit__(self, *exc: object) -> bool:
        return False

    def step(self) -> None:
        pass

    def watch(self, *modules: object) -> "_NoCapture":
        return self


class _Plain:
    """The examples' own gpuprof lines turned off (``GPUPROF_EXAMPLE_PLAIN=1``): each example is then the plain
    script a user without gpuprof would write, for ``gpuprof run`` to profile with no code (the parity test,
    tests/run/test_examples_parity.py). Everything else is gpuprof's own."""

    def __getattr__(self, name: str) -> object:
        return getattr(_GPUPROF, name)

    @staticmethod
    def profile(*args: object, **kwargs: object) -> _NoCapture:
        return _NoCapture()

    @staticmethod
    def profile_step(*args: object, **kwargs: object):  # noqa: ANN205 - returns a decorator
        def plain(fn):  # noqa: ANN001, ANN202 - the function itself, with the decorator's finish()
            fn.finish = lambda: None
            return fn

        return plain


if os.environ.get("GPUPROF_EXAMPLE_PLAIN") == "1":
    gpuprof = _Plain()  # type: ignore[assignment]  # noqa: F811 - the same names, doing nothing

__all__ = ["parse_args", "pick_device", "mlp", "schedule", "note_facts", "gpuprof"]

"""Overhead of gpuprof's capture, as ratios measured in one run.

1. Outside the active window: the same training loop unwrapped vs inside
   ``gpuprof.profile`` whose schedule never reaches its window (target: within 1%).
   Blocks of steps alternate A/B/A/B so machine drift hits both sides alike;
   the ratio is of the median block times.
2. Recorded steps: gpuprof vs bare ``torch.profiler.profile`` with the same
   options (activities, shapes, stacks, memory) and the same schedule
   (target: within 10%); the ratio is of the median recorded-step times.

    python bench/bench_capture.py [--device cuda] [--out bench/out/capture.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

import gpuprof
from gpuprof.capture import Schedule


def make_step(device: torch.device, width: int) -> Callable[[], None]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                          nn.Linear(width, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(64, width, device=device)
    y = torch.randint(0, 10, (64,), device=device)

    def step() -> None:
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if device.type == "cuda":
            torch.cuda.synchronize()  # a step's time is its GPU time too

    return step


def block(step: Callable[[], None], n: int, after: Callable[[], None] | None) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        step()
        if after is not None:
            after()
    return time.perf_counter() - t0


def outside_window(step: Callable[[], None], logdir: str, blocks: int, per_block: int) -> dict[str, Any]:
    bare: list[float] = []
    wrapped: list[float] = []
    never = Schedule(wait=10**9, warmup=1, active=1)
    with gpuprof.profile(logdir, run="outside", schedule=never, print_report=False, analyze=False) as prof:
        for _ in range(blocks):
            bare.append(block(step, per_block, None))
            wrapped.append(block(step, per_block, prof.step))
    b, w = statistics.median(bare), statistics.median(wrapped)
    return {"bare_block_s": b, "wrapped_block_s": w, "ratio": w / b, "steps_per_block": per_block,
            "blocks": blocks, "target": "ratio <= 1.01"}


def recorded_steps(step: Callable[[], None], logdir: str, active: int, device: torch.device) -> dict[str, Any]:
    from torch.profiler import ProfilerActivity, profile, schedule

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    opts = dict(record_shapes=True, with_stack=True, profile_memory=True)

    def timed(step_fn: Callable[[], None], n: int) -> list[float]:
        out = []
        for _ in range(n):
            t0 = time.perf_counter()
            step()
            step_fn()
            out.append(time.perf_counter() - t0)
        return out

    results: dict[str, list[float]] = {"torch": [], "gpuprof": []}
    for rep in range(3):  # alternate the two
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with profile(activities=acts, schedule=schedule(wait=0, warmup=1, active=active),
                         on_trace_ready=lambda p, rep=rep: p.export_chrome_trace(f"{logdir}/bare{rep}.pt.trace.json.gz"),
                         **opts) as p:
                times = timed(p.step, active + 1)
        results["torch"] += times[1:-1]  # recorded steps only (the last one also exports the trace)
        with gpuprof.profile(logdir, run=f"recorded{rep}", schedule=Schedule(wait=0, warmup=1, active=active),
                             activities=acts, print_report=False, analyze=False, **opts) as prof:
            times = timed(prof.step, active + 1)
        results["gpuprof"] += times[1:-1]
    t, g = statistics.median(results["torch"]), statistics.median(results["gpuprof"])
    return {"torch_step_s": t, "gpuprof_step_s": g, "ratio": g / t, "steps": len(results["torch"]),
            "target": "ratio <= 1.10"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--blocks", type=int, default=10)
    ap.add_argument("--per-block", type=int, default=100)
    ap.add_argument("--active", type=int, default=30)
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (1: less noise on CPU)")
    ap.add_argument("--out", default="bench/out/capture.json")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    step = make_step(device, args.width)
    for _ in range(20):
        step()  # warm up allocator, kernels, caches
    with tempfile.TemporaryDirectory() as logdir:
        res = {
            "device": str(device),
            "torch": torch.__version__,
            "outside_window": outside_window(step, logdir, args.blocks, args.per_block),
            "recorded_steps": recorded_steps(step, logdir, args.active, device),
        }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=2))
    o, r = res["outside_window"], res["recorded_steps"]
    print(f"outside the window: wrapped/unwrapped = {o['ratio']:.4f} (target <= 1.01; "
          f"{o['bare_block_s'] / o['steps_per_block'] * 1e3:.3f} ms/step unwrapped)")
    print(f"recorded steps:     gpuprof/torch.profiler = {r['ratio']:.4f} (target <= 1.10; "
          f"{r['torch_step_s'] * 1e3:.3f} ms/step with torch.profiler)")
    print(f"written {args.out}")


if __name__ == "__main__":
    main()

"""The whole-job watch's overhead per step, in CPU seconds: watch on against off, paired rounds.

A CPU training-like loop of torch matmuls sized to about ``--step-ms`` (5 ms) of CPU per step runs under
``gpuprof.profile`` with ``watch=True`` and ``watch=False`` in each round (the order alternates between
rounds, so drift and warm-up hit both sides alike). Both sides run the same capture otherwise (the runtime
checks, the step clock, the DataLoader monitor, the memory samples), with a schedule whose recorded window is
never reached, so the difference is the watch alone: its sampler thread (a few /proc reads a second) and
copying its numbers at the end. The figure is the process's CPU time (``time.process_time()``: every thread,
the sampler's included) over the whole ``with`` block, per step; the ratio on/off per round and its median.
On a busy machine that difference is noisy (``--aa`` shows how much), so the sampler thread's own CPU time
(``time.thread_time()`` at its end) is reported too: the part of the watch that runs while the job trains.
Target (issue 33): at most 1% of a 5 ms step.

    python bench/bench_watch.py [--rounds 5] [--steps 600] [--step-ms 5] [--out bench/out/watch.json] [--aa]

``--aa`` runs both sides with the watch off: the spread of that ratio is the noise floor of the figure on the
machine at hand.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

import gpuprof
from gpuprof.capture import Schedule

NEVER = Schedule(wait=10**9, warmup=0, active=1)  # the recorded window is never reached


def _size_for(step_ms: float) -> int:
    """A square matmul size whose product takes about ``step_ms`` of CPU on one thread."""
    n = 64
    while True:
        a = torch.randn(n, n)
        t = time.process_time()
        for _ in range(5):
            a @ a
        took = (time.process_time() - t) / 5 * 1000
        if took >= step_ms or n > 4096:
            return n
        n = int(n * max(1.05, min(2.0, (step_ms / max(took, 1e-3)) ** (1 / 3))))


def _run(watch: bool, steps: int, n: int, logdir: str) -> tuple[float, float, float]:
    """(CPU seconds per step, wall seconds per step, the sampler thread's own CPU seconds per step) of one
    capture of ``steps`` steps."""
    from gpuprof.capture.checks.watch import WatchCheck

    a = torch.randn(n, n)
    c0, w0 = time.process_time(), time.perf_counter()
    with gpuprof.profile(logdir=logdir, schedule=NEVER, watch=watch, analyze=False, tensorboard=False,
                         print_report=False) as prof:
        for _ in range(steps):
            a = torch.tanh(a @ a)  # tanh keeps the values bounded
            prof.step()
    cpu, wall = (time.process_time() - c0) / steps, (time.perf_counter() - w0) / steps
    check = prof.live.find(WatchCheck)
    sampler_s = check.sampler.cpu_s if check is not None and check.sampler is not None else 0.0
    return cpu, wall, sampler_s / steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--step-ms", type=float, default=5.0)
    ap.add_argument("--out", default="bench/out/watch.json")
    ap.add_argument("--aa", action="store_true", help="both sides with the watch off: the noise floor of the figure")
    args = ap.parse_args()
    if args.rounds < 3:
        ap.error("--rounds must be at least 3 (paired rounds)")
    torch.set_num_threads(1)
    n = _size_for(args.step_ms)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        _run(True, 20, n, tmp)  # warm-up: imports, allocator, the first capture's one-off costs
        for r in range(args.rounds):
            order = (False, True) if r % 2 == 0 else (True, False)
            got = {w: _run(w and not args.aa, args.steps, n, f"{tmp}/r{r}{int(w)}") for w in order}
            off, on = got[False], got[True]
            rows.append({"round": r, "order": ["on" if w else "off" for w in order],
                         "cpu_off_ms": off[0] * 1e3, "cpu_on_ms": on[0] * 1e3, "cpu_ratio": on[0] / off[0],
                         "cpu_extra_us": (on[0] - off[0]) * 1e6, "wall_off_ms": off[1] * 1e3,
                         "wall_on_ms": on[1] * 1e3, "sampler_cpu_us": on[2] * 1e6,
                         "sampler_share": on[2] / off[0]})
            print(f"round {r}: CPU/step off {off[0] * 1e3:.3f} ms, on {on[0] * 1e3:.3f} ms, "
                  f"ratio {on[0] / off[0]:.4f} ({(on[0] - off[0]) * 1e6:+.1f} us); "
                  f"wall off {off[1] * 1e3:.2f} ms, on {on[1] * 1e3:.2f} ms; the sampler thread's own CPU "
                  f"{on[2] * 1e6:.2f} us/step ({on[2] / off[0]:.3%} of the step)", flush=True)
    res = {"matmul_n": n, "steps": args.steps, "rounds": rows,
           "median_cpu_ratio": statistics.median(r["cpu_ratio"] for r in rows),
           "median_cpu_extra_us": statistics.median(r["cpu_extra_us"] for r in rows),
           "median_cpu_off_ms": statistics.median(r["cpu_off_ms"] for r in rows),
           "median_sampler_share": statistics.median(r["sampler_share"] for r in rows),
           "target_ratio": 1.01, "aa": args.aa}
    print(f"matmul {n}x{n}: median CPU per step off {res['median_cpu_off_ms']:.3f} ms; watch on / off "
          f"{res['median_cpu_ratio']:.4f} (median extra {res['median_cpu_extra_us']:+.1f} us/step; target <= 1.01); "
          f"the sampler thread's own CPU {res['median_sampler_share']:.3%} of the step")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()

"""What the step that closes a recorded window costs, gpuprof vs bare torch.profiler, as paired ratios.

On a small CPU CNN, for ``with_stack`` and ``record_shapes`` on and off and two
window lengths, each repetition runs the same loop twice, alternately:

* **torch**: ``torch.profiler.profile`` with the same options and schedule
  (wait 1, warm-up 1, ``active`` recorded steps, once), its ``on_trace_ready``
  exporting a gzipped Chrome trace like gpuprof's; the closing cost is the
  ``step()`` that exports plus stopping the profiler (gpuprof stops its
  profiler at that step, the schedule records nothing more);
* **gpuprof**: ``gpuprof.profile`` with the same options and schedule
  (TensorBoard and the analysis on, the summary not printed); the closing
  cost is that ``prof.step()``. It runs twice: the window's analysis in its
  child process (the default) and on the report thread
  (``GPUPROF_REPORT_PROCESS=0``).

The ratio is gpuprof / torch per repetition, then the median. Then, per
configuration, the training steps that run while gpuprof's window report is
analysed in the background (those that end while it is still being
written) are timed against the steps after bare torch.profiler closed its
window (nothing in the background): the median ratio says whether the
analysis slows the training thread.

    python bench/bench_window_close.py [--reps 3] [--out bench/out/window_close.json]
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


def make_step(batch: int) -> Callable[[], None]:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    x = torch.randn(batch, 3, 32, 32)
    y = torch.randint(0, 10, (batch,))

    def step() -> None:
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return step


def run_torch(step: Callable[[], None], logdir: str, active: int, after: int, opts: dict[str, bool]) -> dict[str, Any]:
    from torch.profiler import ProfilerActivity, profile, schedule

    n_window = 2 + active  # wait 1, warm-up 1, active
    out = Path(logdir) / f"bare{time.perf_counter_ns()}.pt.trace.json.gz"
    times: list[float] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=active, repeat=1),
                    on_trace_ready=lambda tp: tp.export_chrome_trace(str(out)), profile_memory=True, **opts)
        p.start()
        for i in range(n_window):
            step()
            t0 = time.perf_counter()
            p.step()
            if i == n_window - 1:
                p.stop()  # gpuprof stops its profiler at the closing step too
            times.append(time.perf_counter() - t0)
    steps_after = timed_steps(step, after, None)
    return {"close_s": times[-1], "after_s": steps_after, "trace_bytes": out.stat().st_size}


def run_gpuprof(step: Callable[[], None], logdir: str, run: str, active: int, after: int,
                opts: dict[str, bool], in_child: bool = True) -> dict[str, Any]:
    import os

    os.environ["GPUPROF_REPORT_PROCESS"] = "1" if in_child else "0"
    n_window = 2 + active
    times: list[float] = []
    with gpuprof.profile(logdir, run=run, schedule=Schedule(wait=1, warmup=1, active=active, repeat=1),
                         activities=None, print_report=False, **opts) as prof:
        for _ in range(n_window):
            step()
            t0 = time.perf_counter()
            prof.step()
            times.append(time.perf_counter() - t0)
        t_bg = time.perf_counter()
        during: list[float] = []  # steps that ended while the window report was still being written
        idle: list[float] = []
        for _ in range(after):
            t0 = time.perf_counter()
            step()
            prof.step()
            (idle if prof.wait_for_report(0) else during).append(time.perf_counter() - t0)
        prof.wait_for_report(300)
        report_s = time.perf_counter() - t_bg
    return {"close_s": times[-1], "during_s": during, "idle_s": idle, "report_s": report_s}


def timed_steps(step: Callable[[], None], n: int, after: Callable[[], None] | None) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        step()
        if after is not None:
            after()
        out.append(time.perf_counter() - t0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--windows", default="3,10", help="recorded steps per window")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--after", type=int, default=20, help="steps timed after the window closed")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (1: less noise on CPU)")
    ap.add_argument("--out", default="bench/out/window_close.json")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    step = make_step(args.batch)
    for _ in range(10):
        step()
    rows = []
    with tempfile.TemporaryDirectory() as logdir:
        for active in [int(w) for w in args.windows.split(",")]:
            for stack in (True, False):
                for shapes in (True, False):
                    opts = {"with_stack": stack, "record_shapes": shapes}
                    ratios, after_ratios, bare, ours, bg, n_during = [], [], [], [], [], []
                    th_ratios: list[float] = []  # steps during the report with the analysis on the report's thread
                    th_during: list[int] = []
                    size = 0
                    for rep in range(args.reps):
                        t = run_torch(step, logdir, active, args.after, opts)
                        g = run_gpuprof(step, logdir, f"w{active}s{int(stack)}r{int(shapes)}-{rep}", active,
                                        args.after, opts)
                        th = run_gpuprof(step, logdir, f"w{active}s{int(stack)}r{int(shapes)}-{rep}-thread", active,
                                         args.after, opts, in_child=False)
                        if th["during_s"]:
                            th_ratios.append(statistics.median(th["during_s"]) / statistics.median(t["after_s"]))
                        th_during.append(len(th["during_s"]))
                        bare.append(t["close_s"])
                        ours.append(g["close_s"])
                        ratios.append(g["close_s"] / t["close_s"])
                        if g["during_s"]:
                            after_ratios.append(statistics.median(g["during_s"]) / statistics.median(t["after_s"]))
                        n_during.append(len(g["during_s"]))
                        bg.append(g["report_s"])
                        size = t["trace_bytes"]
                    row = {"active": active, **opts, "torch_close_ms": statistics.median(bare) * 1e3,
                           "gpuprof_close_ms": statistics.median(ours) * 1e3, "close_ratio": statistics.median(ratios),
                           "after_ratio": statistics.median(after_ratios) if after_ratios else None,
                           "steps_during_report": statistics.median(n_during),
                           "thread_after_ratio": statistics.median(th_ratios) if th_ratios else None,
                           "thread_steps_during_report": statistics.median(th_during),
                           "background_report_s": statistics.median(bg), "trace_kib": size / 1024}
                    rows.append(row)
                    print(f"active={active:>2} with_stack={stack!s:<5} record_shapes={shapes!s:<5} "
                          f"torch {row['torch_close_ms']:8.1f} ms  gpuprof {row['gpuprof_close_ms']:8.1f} ms  "
                          f"ratio {row['close_ratio']:.2f}  {row['steps_during_report']:g} steps during the report: "
                          f"{row['after_ratio'] or 0:.2f}x (on a thread: {row['thread_steps_during_report']:g} steps, "
                          f"{row['thread_after_ratio'] or 0:.2f}x)  "
                          f"report {row['background_report_s']:.2f} s  trace {row['trace_kib']:.0f} KiB", flush=True)
    res = {"torch": torch.__version__, "threads": args.threads, "batch": args.batch, "reps": args.reps, "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=2))
    print(f"written {args.out}")


if __name__ == "__main__":
    main()

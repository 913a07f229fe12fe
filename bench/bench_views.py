"""Benchmark: what the report's views (docs/views.md) add to ``gpuprof analyze``, as a ratio in one run.

For each trace (default: the three largest shared traces plus the V100
ResNet-50 sample), the trace is loaded once, then the end-to-end analysis
(metrics, rules, summary with its views) and the views alone
(:func:`gpuprof.views.build.trace_views`) are timed alternately in CPU
seconds of this process (``time.process_time``), best of ``--repeat``.
Alternating in one process and reading the CPU clock make the ratio robust
to a busy machine, which wall-clock times are not. Target: the views cost at most
15% of the analysis they are part of.

Usage: ``python bench/bench_views.py [TRACE ...] [--repeat 5]``.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(1, str(REPO / "tests" / "support"))  # the test helpers (gpuprof_testing) live in tests/support/, outside the package

TARGET = 0.15


def default_traces() -> list[Path]:
    from gpuprof_testing.realtraces import TRACES as root  # GPUPROF_SHARED_TRACES, default ../shared

    if not root.is_dir():
        return []
    found = sorted(root.rglob("*.json.gz"), key=lambda p: p.stat().st_size, reverse=True)[:3]
    v100 = root / "tbplugin" / "samples" / "resnet50_num_workers_0" / "worker0.1623143566756.pt.trace.json.gz"
    return found + ([v100] if v100.exists() and v100 not in found else [])


def main() -> int:
    from gpuprof.analysis import analyze_trace
    from gpuprof.trace.load import load_trace
    from gpuprof.trace.metrics import compute_metrics
    from gpuprof.views.build import trace_views

    ap = argparse.ArgumentParser()
    ap.add_argument("traces", nargs="*", type=Path)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    traces = args.traces or default_traces()
    if not traces:
        print("no traces (the shared traces folder is absent; set GPUPROF_SHARED_TRACES): nothing measured")
        return 0
    gc.disable()
    worst = 0.0
    print(f"{'trace':60} {'analysis CPU':>12} {'views CPU':>10} {'ratio':>7}")
    for path in traces:
        trace = load_trace(path)
        full, views = [], []
        for _ in range(args.repeat):
            t0 = time.process_time()
            m = compute_metrics(trace)
            analyze_trace(trace, metrics=m)
            t1 = time.process_time()
            trace_views(m)
            t2 = time.process_time()
            full.append(t1 - t0)
            views.append(t2 - t1)
        ratio = min(views) / min(full)
        worst = max(worst, ratio)
        print(f"{path.name[:60]:60} {min(full):11.3f}s {min(views):9.3f}s {ratio:7.1%}")
    print(f"largest share of the analysis spent in the views: {worst:.1%} (target <= {TARGET:.0%})")
    return 0 if worst <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())

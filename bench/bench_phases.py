"""Benchmark: in-process CPU seconds of each phase of ``gpuprof analyze`` on one trace.

Loads the trace once, then times (``time.process_time``, CPU of this process)
the metrics (:func:`gpuprof.trace.metrics.compute_metrics`), the summary and
every rule separately, in the order ``analyze`` runs them. ``--profile OUT``
also writes a cProfile of the metrics, summary and rules phases (read it with
``python -m pstats OUT``).

Usage: ``[BENCH_ROOT=OTHER_CHECKOUT] python bench/bench_phases.py FILE [--top 12] [--profile OUT]``.
It prints load, metrics, summary and rules CPU seconds, then the costliest rules.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import os
import sys
import time
from pathlib import Path

# BENCH_ROOT: another checkout to measure (e.g. the commit before a change), else this one
sys.path.insert(0, os.environ.get("BENCH_ROOT") or str(Path(__file__).resolve().parents[1]))

from gpuprof.rules.base import RuleContext, all_rules  # noqa: E402
from gpuprof.summarize import trace_summary  # noqa: E402
from gpuprof.trace.load import load_trace  # noqa: E402
from gpuprof.trace.metrics import compute_metrics  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file")
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--profile", type=Path)
    a = ap.parse_args(argv)
    gc.disable()  # as gpuprof.analysis.analyze does
    t0 = time.process_time()
    trace = load_trace(a.file)
    t_load = time.process_time() - t0
    prof = cProfile.Profile() if a.profile else None
    if prof:
        prof.enable()
    t0 = time.process_time()
    metrics = compute_metrics(trace)
    t_metrics = time.process_time() - t0
    t0 = time.process_time()
    trace_summary(metrics)
    t_summary = time.process_time() - t0
    per_rule: dict[str, float] = {}
    rules = all_rules()
    all_opts = {r.code: r.defaults() for r in rules}
    for r in rules:
        others = {c: o for c, o in all_opts.items() if c != r.code}
        t0 = time.process_time()
        list(r().check(RuleContext(trace, metrics, all_opts[r.code], others)))
        per_rule[f"{r.code} {r.__name__}"] = time.process_time() - t0
    if prof:
        prof.disable()
        prof.dump_stats(str(a.profile))
    t_rules = sum(per_rule.values())
    n = len(trace.ops) + len(trace.runtime) + len(trace.kernels)
    print(f"{Path(a.file).name}: {n} ops+runtime+kernels | CPU s: load {t_load:.2f}, metrics {t_metrics:.2f}, "
          f"summary {t_summary:.2f}, rules {t_rules:.2f}")
    for name, t in sorted(per_rule.items(), key=lambda kv: -kv[1])[: a.top]:
        print(f"  {t:6.3f}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

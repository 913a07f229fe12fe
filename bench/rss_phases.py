"""Where ``gpuprof analyze``'s peak memory and CPU time go: load, metrics, then each rule.

One process: after imports, after ``load_trace``, after ``compute_metrics``
and after each rule (rules run one at a time, as ``analyze_trace`` runs them),
the process's peak RSS (``ru_maxrss``) and the CPU seconds of the step. A
rule is printed when it raised the peak or took over 30 ms. The GC is off, as
in ``gpuprof analyze``.

Usage: ``[BENCH_ROOT=OTHER_CHECKOUT] python bench/rss_phases.py TRACE`` (e.g. a trace ``bench_floor.py`` built).
"""

from __future__ import annotations

import gc
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any

# BENCH_ROOT: another checkout to measure (as bench_phases.py), else this one
sys.path.insert(0, os.environ.get("BENCH_ROOT") or str(Path(__file__).resolve().parents[1]))


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3


def main(path: str) -> None:
    gc.disable()
    import gpuprof.analysis as analysis
    from gpuprof.trace.load import load_trace
    from gpuprof.trace.metrics import compute_metrics

    print(f"imports: peak {_peak_mb():.0f} MB")
    t = time.process_time()
    trace = load_trace(path)
    print(f"load_trace: peak {_peak_mb():.0f} MB, {time.process_time() - t:.2f} s CPU, {trace.kept_events} events kept")
    t = time.process_time()
    metrics = compute_metrics(trace)
    print(f"compute_metrics: peak {_peak_mb():.0f} MB, {time.process_time() - t:.2f} s CPU")
    run_all = analysis.run_units

    def one_by_one(units: list[Any], where: str, failures: Any) -> list[Any]:
        found: list[Any] = []
        for unit in units:
            before, t0 = _peak_mb(), time.process_time()
            found += run_all([unit], where, failures)
            cpu = time.process_time() - t0
            if _peak_mb() > before + 1 or cpu > 0.03:
                print(f"  rule {unit.code}: peak {_peak_mb():.0f} MB (+{_peak_mb() - before:.0f}), {cpu:.2f} s CPU")
        return found

    analysis.run_units = one_by_one  # type: ignore[assignment]
    t = time.process_time()
    analysis.analyze_trace(trace, metrics=metrics)
    print(f"rules: peak {_peak_mb():.0f} MB, {time.process_time() - t:.2f} s CPU")


if __name__ == "__main__":
    main(sys.argv[1])

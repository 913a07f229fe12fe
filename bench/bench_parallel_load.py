"""Does the two-process loader win? One process vs one process + helper, idle and busy.

For each trace, loads it in a fresh child process with ``jobs=1`` and with
``jobs=2`` (the helper forced on whatever the size), interleaved A/B/A/B so
that a change in the machine's load hits both alike, ``--runs`` pairs, first
on the machine as it is and then with one competing ``yes > /dev/null`` per
CPU. Prints the wall times and the median ratio jobs=2 / jobs=1 (below 1:
the helper wins).

    python bench/bench_parallel_load.py TRACE [TRACE ...] [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = """
import sys, time
import gpuprof.trace.load as L
L.PARALLEL_MIN_BYTES = 0
t0 = time.perf_counter()
tr = L.load_trace(sys.argv[1], jobs=int(sys.argv[2]))
print(time.perf_counter() - t0, tr.kept_events)
"""


def one(path: str, jobs: int) -> tuple[float, int]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", CHILD, path, str(jobs)], env=env, capture_output=True, text=True,
                         check=True, cwd=ROOT).stdout.split()
    return float(out[0]), int(out[1])


def series(path: str, runs: int) -> dict[int, list[float]]:
    times: dict[int, list[float]] = {1: [], 2: []}
    kept = set()
    for _ in range(runs):
        for jobs in (1, 2):  # A/B/A/B
            t, n = one(path, jobs)
            times[jobs].append(t)
            kept.add(n)
    assert len(kept) == 1, f"jobs=1 and jobs=2 kept different numbers of events: {kept}"
    return times


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("traces", nargs="+")
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    ncpu = len(os.sched_getaffinity(0))
    for busy in (False, True):
        hogs = []
        if busy:
            hogs = [subprocess.Popen(["yes"], stdout=subprocess.DEVNULL) for _ in range(ncpu)]
            time.sleep(0.5)
        try:
            for path in args.traces:
                t = series(path, args.runs)
                ratios = [b / a for a, b in zip(t[1], t[2])]
                wins = sum(r < 1 for r in ratios)
                print(f"{'busy' if busy else 'as is'} {Path(path).name}: jobs=1 {[f'{x:.2f}' for x in t[1]]} "
                      f"jobs=2 {[f'{x:.2f}' for x in t[2]]} median ratio {statistics.median(ratios):.2f}, "
                      f"helper faster in {wins} of {len(ratios)}", flush=True)
        finally:
            for h in hogs:
                h.terminate()
                h.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())

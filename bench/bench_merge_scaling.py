"""Benchmark: the cross-rank merge stays linear in ranks (CPU seconds per rank at K ranks).

What the client of a many-rank analysis does alone, whatever the number of workers: the cross-rank merge
and GP7xx rules (``gpuprof.distributed.analysis.cross_rank``) over K rank summaries, copies of one real
summary of a synthetic job (``bench_dask.make_job``: compute, an all-reduce, rank 1 slower). In one
process, ``--rounds`` paired rounds, the sizes in alternating order each round; each figure is CPU
seconds of this process (``time.process_time``) per rank, and the ratio of the largest size's to the
smallest's is taken per round, then the median. Target (issue 32): CPU per rank at 8,192 ranks <= 1.2x
that at 1,024.

``--root DIR`` measures another checkout (a ``git archive`` of it) in a fresh interpreter: a before/after.

Usage: ``python bench/bench_merge_scaling.py [--ranks 1024,8192] [--rounds 5] [--root DIR]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TARGET = 1.2


def measure(ranks: list[int], rounds: int) -> dict[int, list[float]]:
    """CPU µs per rank of ``cross_rank`` at each size, one entry per round."""
    import msgspec
    from bench_dask import make_job

    from gpuprof.analysis import _analyze_one
    from gpuprof.distributed.analysis import cross_rank

    with tempfile.TemporaryDirectory() as tmp:
        files = make_job(Path(tmp) / "job", 2, 5)
        base = _analyze_one(files[0], {}, [], [])[2]
    out: dict[int, list[float]] = {k: [] for k in ranks}
    for r in range(rounds):
        for k in ranks if r % 2 == 0 else ranks[::-1]:
            sums = [msgspec.structs.replace(base, rank=i, world_size=k) for i in range(k)]
            t0 = time.process_time()
            cross_rank(sums)
            out[k].append((time.process_time() - t0) / k * 1e6)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", default="1024,8192")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--root", type=Path, default=None, help="another checkout to measure (its gpuprof/ and bench/)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    ranks = sorted(int(x) for x in a.ranks.split(",") if x)
    if a.root is not None and not a.child:  # the other checkout's modules, in a fresh interpreter
        root = a.root.resolve()
        # run through -c: the script's own folder (this checkout's bench/, whose modules put this checkout
        # first on the path) must not come first; the other checkout's bench_dask puts that one first
        argv_child = [str(Path(__file__).resolve()), "--child", "--ranks", a.ranks, "--rounds", str(a.rounds)]
        code = f"import runpy, sys; sys.argv = {argv_child!r}; runpy.run_path(sys.argv[0], run_name='__main__')"
        cmd = [sys.executable, "-c", code]
        return subprocess.run(cmd, env=dict(os.environ, PYTHONPATH=f"{root}{os.pathsep}{root / 'bench'}"),
                              cwd=root).returncode
    if not a.child:
        sys.path[:0] = [str(REPO), str(REPO / "bench")]
    load = os.getloadavg()[0]
    got = measure(ranks, a.rounds)
    ratios = {k: [hi / lo for lo, hi in zip(got[ranks[0]], got[k])] for k in ranks[1:]}
    import gpuprof

    print(json.dumps({"gpuprof": str(Path(gpuprof.__file__).parent), "load_before": load, "load_after": os.getloadavg()[0],
                      "cpu_us_per_rank": {k: [round(statistics.median(v), 1), round(min(v), 1), round(max(v), 1)]
                                          for k, v in got.items()},
                      "ratio_per_round": {k: [round(x, 2) for x in v] for k, v in ratios.items()}}))
    for k, v in got.items():
        print(f"{k:6d} ranks: {statistics.median(v):7.1f} µs of CPU per rank (median of {len(v)}; "
              f"{min(v):.1f}-{max(v):.1f}), {statistics.median(v) * k / 1e6:.3f} s in all")
    for k, v in ratios.items():
        med = statistics.median(v)
        verdict = "met" if med <= TARGET else "NOT met"
        print(f"per rank at {k} / at {ranks[0]}: {med:.2f}x (median of paired rounds, {min(v):.2f}-{max(v):.2f}; "
              f"<= {TARGET}x: {verdict})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

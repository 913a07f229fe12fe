"""Benchmark: many ranks on a Dask cluster (``--dask``) against the local pool (``--jobs``), and a projection.

In one run, for N synthetic ranks (default 64 and 256; ``gpuprof_testing.write_ranks``: each rank
``--steps`` steps of compute and an all-reduce, rank 1 slower so that the cross-rank rules have
work), each in a fresh child process (wall time and peak RSS, ``bench_analyze.measure``):

* ``gpuprof analyze DIR --jobs 2 --format json`` (the local pool on this machine's 2 cores);
* ``gpuprof analyze DIR --dask ADDR --format json``, against a ``LocalCluster`` of 2 worker
  processes (1 thread each) on 127.0.0.1, started once, in its own process, before the runs; the
  figure is the client's: its wall time and its own peak RSS (the workers' memory is theirs).

Both reports are compared (identical apart from nothing: they must be equal).

Then, in this process, what the client does per rank that does not spread over workers: the
cross-rank merge and GP7xx rules (``gpuprof.distributed.analysis.cross_rank``) over K copies of a
real rank summary of the synthetic job, K = 64 .. 16,384 (measured, not projected), and the
bytes that travel back per rank (the pickled per-rank result).

The projection for 1,024 and 16,384 ranks: ``ranks x (worker seconds per rank) / workers`` +
the measured merge at that K + the client's fixed cost (connect, submit), each taken from this
run. It assumes ranks of the size benchmarked; for bigger traces scale the per-rank term by
bench_analyze.py's MB/s.

Usage: ``python bench/bench_dask.py [--ranks 64,256] [--steps 5] [--workdir bench/out]``.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO))
sys.path.insert(1, str(REPO / "tests" / "support"))  # the test helpers (gpuprof_testing) live in tests/support/, outside the package

from bench_analyze import measure  # noqa: E402

CLUSTER = """
import sys, time
from distributed import LocalCluster
c = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=":0",
                 silence_logs=40)
print(c.scheduler_address, flush=True)
sys.stdin.read()  # until the benchmark closes our stdin
c.close()
"""


def body(steps: int) -> Any:
    def fill(tb: Any, rank: int) -> None:
        for _ in range(steps):
            with tb.step():
                for _layer in range(6):
                    tb.gemm(us=200 + (150 if rank == 1 else 0))
                tb.nccl("AllReduce", us=800)
                tb.device_synchronize()

    return fill


def make_job(folder: Path, ranks: int, steps: int) -> list[Path]:
    from gpuprof_testing import write_ranks

    if folder.exists():
        shutil.rmtree(folder)
    return write_ranks(folder, ranks, body(steps))


def gpuprof_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "gpuprof", "analyze", *args]


def merge_rows(files: list[Path], counts: list[int]) -> tuple[list[dict[str, Any]], int]:
    import msgspec

    from gpuprof.analysis import _analyze_one
    from gpuprof.distributed.analysis import cross_rank

    one = _analyze_one(files[0], {}, [], [])
    travel = len(pickle.dumps(one))  # what one rank sends back to the client
    base = one[2]
    rows = []
    for k in counts:
        sums = [msgspec.structs.replace(base, rank=r, world_size=k) for r in range(k)]
        c0, t0 = time.process_time(), time.perf_counter()
        cross_rank(sums)
        cpu, dt = time.process_time() - c0, time.perf_counter() - t0
        rows.append({"ranks": k, "merge_s": dt, "us_per_rank": dt / k * 1e6, "merge_cpu_s": cpu,
                     "cpu_us_per_rank": cpu / k * 1e6})
    return rows, travel


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", default="64,256")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--workdir", default=str(REPO / "bench" / "out"))
    a = ap.parse_args(argv)
    work = Path(a.workdir)
    work.mkdir(parents=True, exist_ok=True)
    counts = [int(x) for x in a.ranks.split(",")]
    load = os.getloadavg()
    cluster = subprocess.Popen([sys.executable, "-c", CLUSTER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert cluster.stdout is not None and cluster.stdin is not None
    address = cluster.stdout.readline().strip()
    results: dict[str, Any] = {"load_before": load, "cpus": len(os.sched_getaffinity(0)), "runs": []}
    try:
        for n in counts:
            folder = work / f"dask_job_{n}"
            files = make_job(folder, n, a.steps)
            size = sum(f.stat().st_size for f in files)
            outs = {k: work / f"dask_{n}_{k}.json" for k in ("jobs2", "dask")}
            local = measure(gpuprof_cmd(str(folder), "--jobs", "2", "--format", "json", "-o", str(outs["jobs2"])))
            remote = measure(gpuprof_cmd(str(folder), "--dask", address, "--format", "json", "-o", str(outs["dask"])))
            same = json.loads(outs["jobs2"].read_text()) == json.loads(outs["dask"].read_text())
            results["runs"].append({"ranks": n, "bytes": size, "jobs2": local, "dask": remote, "same_report": same})
            print(f"{n:5d} ranks ({size / n / 1024:.0f} KB each): CPU (the command's process tree; the "
                  f"cluster's workers not counted) --jobs 2 {local['cpu_s']:.2f} s, --dask client "
                  f"{remote['cpu_s']:.2f} s")
            print(f"{n:5d} ranks ({size / n / 1024:.0f} KB each): --jobs 2 {local['wall_s']:.2f} s "
                  f"({local['wall_s'] / n * 1e3:.1f} ms/rank, peak {local['own_peak_rss'] / 2**20:.0f} MiB) | "
                  f"--dask {remote['wall_s']:.2f} s ({remote['wall_s'] / n * 1e3:.1f} ms/rank, client peak "
                  f"{remote['own_peak_rss'] / 2**20:.0f} MiB) | dask/jobs2 {remote['wall_s'] / local['wall_s']:.2f}x | "
                  f"same report: {same}")
        files = sorted((work / f"dask_job_{counts[0]}").glob("*.json"))
        rows, travel = merge_rows(files, [64, 256, 1024, 4096, 8192, 16384])
        results["merge"] = rows
        results["bytes_back_per_rank"] = travel
        for r in rows:
            print(f"cross-rank merge of {r['ranks']:6d} ranks: {r['merge_cpu_s']:.3f} s CPU "
                  f"({r['cpu_us_per_rank']:.0f} us/rank), {r['merge_s']:.3f} s wall")
        print(f"bytes sent back per rank: {travel:,}")
        # projection from this run: the worker part from the biggest run, less the merge at that size
        big = results["runs"][-1]
        merge_at = {r["ranks"]: r["merge_s"] for r in rows}
        n = big["ranks"]
        per_rank_worker = max(big["dask"]["wall_s"] - merge_at.get(n, 0.0), 0.0) / n * 2  # 2 workers did it
        results["projection"] = []
        for k, workers in ((1024, 2), (1024, 64), (16384, 64), (16384, 512)):
            t = k * per_rank_worker / workers + merge_at[k if k in merge_at else max(merge_at)]
            results["projection"].append({"ranks": k, "workers": workers, "seconds": t})
            print(f"projection: {k:6d} ranks on {workers:3d} workers ~ {t:.1f} s "
                  f"(worker {per_rank_worker * 1e3:.1f} ms/rank at this size, merge {merge_at.get(k, 0):.2f} s)")
    finally:
        cluster.stdin.close()
        cluster.wait(timeout=60)
    results["load_after"] = os.getloadavg()
    (work / "dask_results.json").write_text(json.dumps(results, indent=1))
    print(f"load average before {load[0]:.2f}, after {results['load_after'][0]:.2f}; written to {work / 'dask_results.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

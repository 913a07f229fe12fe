"""Benchmark: cross-rank analysis of N ranks x M MB, end to end, and the merge cost per rank.

Big rank traces are derived from the largest real NCCL training trace the
project has (HTA's ``df_index_resolver.json.gz``, rank 1 of a 2-rank V100
job, 53.7 MB of JSON): ``bench_analyze.build`` repeats it end to end to about
M MB (shifted times and ids), then each rank's file is that text with its
``distributedInfo`` rewritten (rank r of N); the rest is copied byte for
byte (the wait measure never compares clocks across ranks; the tests cover
time-shifted ranks). Small ranks
are made the same way from HTA's ``sampled_rank-0.json.gz`` (1.7 MB).

In one run it measures, each in a fresh child (wall time, CPU time, peak RSS
of the process tree, see ``bench_analyze.measure``):

* ``gpuprof analyze RANK_FILES... --format json`` with the default ``--jobs``
  (the pool's own choice by size and CPUs, :mod:`gpuprof.pool`), with
  ``--jobs J`` and with ``--jobs 1`` (end to end: every rank loaded and
  analysed, the summaries merged, GP7xx rules), ``--rounds`` times each,
  interleaved (A, B, C, A, B, C...: a shared machine's load falls on all
  alike); the table gives the medians;
* ``json.load`` of every rank file in one process, one after the other (the
  in-run baseline: reading the same JSON with the standard library);
* with ``--critical-path``: ``--jobs J``'s critical path in CPU seconds (the
  parent's own CPU plus the busiest worker's), against ``--jobs 1``'s CPU: the
  wall-time ratio J free CPUs would give, read from CPU clocks where the
  machine has no free CPUs to time it on.

CPU time is that of the whole process tree: each command runs under a small
child-subreaper wrapper (``PR_SET_CHILD_SUBREAPER``) that reaps the pool's
forkserver and workers when they exit and reports ``RUSAGE_CHILDREN``; it
also counts the processes still alive 30 s after the command returned
(``left``: must be 0, the pool leaves nothing behind).

Ranks of M < 54 MB are built from HTA's ``sampled_rank-0`` (1.7 MB, repeated)
instead of ``df_index_resolver`` (53.7 MB, the smallest it can make).

Usage: ``python bench/bench_distributed.py [--ranks 8] [--mb 200] [--small-ranks 64] [--jobs J] [--rounds 1]
[--no-json-load] [--no-merge] [--critical-path] [--workdir bench/out] [--hta /path/to/venv/bin/python] [--hta-timeout 900]``
(``--small-ranks 0``: no small set).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO))
sys.path.insert(1, str(REPO / "tests" / "support"))  # the test helpers (gpuprof_testing) live in tests/support/, outside the package

from bench_analyze import MB, _Template, ensure_trace, measure  # noqa: E402

from gpuprof_testing.realtraces import TRACES  # noqa: E402

SOURCE = TRACES / "hta" / "HolisticTraceAnalysis" / "tests" / "data" / "df_index_resolver" / "df_index_resolver.json.gz"
# the small ranks: HTA's sampled rank 0 of a 128-rank NCCL job (1.7 MB of JSON)
SMALL_SOURCE = SOURCE.parents[1] / "timeline_analysis" / "sampled_rank-0.json.gz"
_DIST = re.compile(r'"distributedInfo"\s*:\s*\{[^{}]*\}')


def rank_files(big: Path, workdir: Path, ranks: int, tag: str) -> list[Path]:
    """``big`` as ranks 0..N-1: distributedInfo rewritten (header edit), the body copied byte for byte."""
    out = []
    text_head = big.read_bytes()[:1 << 20].decode("utf-8", "replace")
    m = re.search(r'"traceEvents"\s*:\s*\[', text_head)
    assert m, "not a trace"
    for r in range(ranks):
        path = workdir / f"{tag}_rank{r}.json"
        out.append(path)
        if path.exists() and path.stat().st_size >= big.stat().st_size - 4096:
            continue
        with open(big, encoding="utf-8") as src, open(path, "w", encoding="utf-8") as dst:
            head = src.read(m.end())
            info = f'"distributedInfo": {{"backend": "nccl", "rank": {r}, "world_size": {ranks}}}'
            head = _DIST.sub(info, head) if _DIST.search(head) else head.replace("{", "{" + info + ", ", 1)
            dst.write(head)
            # the body as is (a byte copy: building 8 x 200 MB stays cheap); clock offsets between
            # ranks are covered by tests/distributed (time-shifted copies): waits never compare clocks
            shutil.copyfileobj(src, dst, 8 << 20)
    return out


def json_load_cmd(files: list[Path]) -> list[str]:
    code = "import json,sys\nfor f in sys.argv[1:]:\n    json.load(open(f))\n"
    return [sys.executable, "-c", code, *map(str, files)]


# Runs argv[2:], reaps every orphan of it (the pool's forkserver, workers, resource tracker come here, not
# to init), then writes the whole tree's CPU seconds and the count of processes left after 30 s to argv[1].
_REAPER = r"""
import ctypes, os, resource, subprocess, sys, time
ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
rc = subprocess.call(sys.argv[2:])
deadline = time.monotonic() + 30
left = 0
while True:
    try:
        pid, _ = os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        break
    if pid == 0:
        if time.monotonic() > deadline:
            left = len(open(f"/proc/{os.getpid()}/task/{os.getpid()}/children").read().split())
            break
        time.sleep(0.01)
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
open(sys.argv[1], "w").write(f"{ru.ru_utime + ru.ru_stime} {left}")
sys.exit(rc)
"""


def measure_tree(cmd: list[str], work: Path) -> dict[str, Any]:
    """``measure(cmd)`` plus the CPU seconds of its whole process tree and the processes it left (Linux)."""
    out = work / "reaper.txt"
    res = measure([sys.executable, "-c", _REAPER, str(out), *cmd])
    cpu, left = out.read_text().split()
    out.unlink()
    return {**res, "cpu_s": float(cpu), "left": int(left)}


def hta_cmd(python: str, files: list[Path], workdir: Path, tag: str, timeout_s: int) -> list[str]:
    """HTA's multi-rank load of ``files``: ``TraceAnalysis(trace_dir=...)`` on a folder of hard links to them."""
    folder = workdir / f"hta_{tag}"
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir()
    for f in files:
        os.link(f, folder / f.name)
    code = ("import sys\nfrom hta.trace_analysis import TraceAnalysis\n"
            "a = TraceAnalysis(trace_dir=sys.argv[1])\n"
            "assert len(a.t.traces) == int(sys.argv[2]), sorted(a.t.traces)\n")
    return ["timeout", str(timeout_s), python, "-c", code, str(folder), str(len(files))]


def merge_cost(files: list[Path], counts: list[int]) -> list[dict[str, Any]]:
    import msgspec

    from gpuprof.distributed.merge import merge
    from gpuprof.distributed.summary import summarize
    from gpuprof.trace.load import load_trace
    from gpuprof.trace.metrics import compute_metrics

    base = summarize(compute_metrics(load_trace(files[0])))
    rows = []
    for k in counts:
        sums = [msgspec.structs.replace(base, rank=r, world_size=k) for r in range(k)]
        c0, t0 = time.process_time(), time.perf_counter()
        merge(sums)
        cpu, dt = time.process_time() - c0, time.perf_counter() - t0
        rows.append({"ranks": k, "collectives_per_rank": len(base.inst_type), "merge_s": dt,
                     "us_per_rank": dt / k * 1e6, "merge_cpu_s": cpu, "cpu_us_per_rank": cpu / k * 1e6,
                     "summary_bytes": len(msgspec.msgpack.encode(base))})
    return rows


# gpuprof analyze in this child, with each worker's CPU per trace and the parent's own CPU written to stderr
_CRITICAL = r"""
import os, resource, sys, time, atexit
import gpuprof.analysis as a
orig = a._analyze_one
def timed(f, *args):
    t = time.process_time()
    r = orig(f, *args)
    print(f"@@worker {os.getpid()} {time.process_time() - t}", file=sys.stderr, flush=True)
    return r
a._analyze_one = timed
def done():
    ru = resource.getrusage(resource.RUSAGE_SELF)
    print(f"@@parent {ru.ru_utime + ru.ru_stime}", file=sys.stderr, flush=True)
atexit.register(done)
from gpuprof.cli import main
main(["analyze", *sys.argv[2:], "--jobs", sys.argv[1], "--format", "json", "-o", os.devnull, "--no-progress"])
"""


def critical_path(files: list[Path], jobs: int) -> dict[str, Any]:
    """CPU on the critical path of ``--jobs J``: the parent's own CPU plus the busiest worker's.

    What the wall time would be with J free CPUs (no other process competing), read from CPU clocks,
    which a loaded machine disturbs least.
    """
    import subprocess
    from collections import defaultdict

    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-c", _CRITICAL, str(jobs), *map(str, files)], env=env,
                          capture_output=True, text=True)
    workers: dict[str, float] = defaultdict(float)
    parent = 0.0
    for line in proc.stderr.splitlines():
        parts = line.split()
        if parts[:1] == ["@@worker"]:
            workers[parts[1]] += float(parts[2])
        elif parts[:1] == ["@@parent"]:
            parent = float(parts[1])
    return {"parent_cpu_s": parent, "worker_cpu_s": dict(workers),
            "critical_cpu_s": parent + max(workers.values(), default=0.0)}


def _median(xs: list[float]) -> float:
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def _analyze_cmd(files: list[Path], jobs: int | None) -> list[str]:
    cmd = [sys.executable, "-m", "gpuprof", "analyze", *map(str, files), "--format", "json", "-o", os.devnull,
           "--no-progress"]
    return cmd if jobs is None else [*cmd, "--jobs", str(jobs)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--mb", type=int, default=200)
    ap.add_argument("--small-ranks", type=int, default=64, help="copies of the 1.7 MB rank (0: no small set)")
    ap.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--rounds", type=int, default=1, help="interleaved runs of each gpuprof command (medians shown)")
    ap.add_argument("--no-json-load", action="store_true", help="leave out the json.load baseline")
    ap.add_argument("--no-merge", action="store_true", help="leave out the merge-cost rows")
    ap.add_argument("--critical-path", action="store_true",
                    help="also the CPU on --jobs J's critical path (parent + busiest worker) against --jobs 1's CPU")
    ap.add_argument("--workdir", default=str(REPO / "bench" / "out"))
    ap.add_argument("--hta", default="", help="a Python with HolisticTraceAnalysis (compared when given)")
    ap.add_argument("--hta-timeout", type=int, default=900, help="seconds before HTA's load is stopped")
    args = ap.parse_args(argv)
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    small_src = work / "dist_small_source.json"
    if not small_src.exists():
        import gzip

        small_src.write_bytes(gzip.decompress(SMALL_SOURCE.read_bytes()))
    source = SOURCE if args.mb >= 54 else SMALL_SOURCE  # df_index_resolver is 53.7 MB: no smaller copy of it
    big = ensure_trace(_Template(source), source, work, args.mb)
    big_ranks = rank_files(big, work, args.ranks, f"dist{args.mb}MB")
    results: dict[str, Any] = {"ranks": args.ranks, "mb": args.mb, "small_ranks": args.small_ranks,
                               "cpus": len(os.sched_getaffinity(0)), "loadavg_start": os.getloadavg(), "runs": []}
    sets = [(f"{args.ranks} x {big.stat().st_size / MB:.0f} MB", big_ranks, f"big{args.ranks}")]
    if args.small_ranks:
        small = rank_files(small_src, work, args.small_ranks, "dist_small")
        sets.append((f"{args.small_ranks} x {small_src.stat().st_size / MB:.1f} MB", small, f"small{args.small_ranks}"))
    for label, files, tag in sets:
        total = sum(f.stat().st_size for f in files)
        variants: dict[str, int | None] = {"default": None, str(args.jobs): args.jobs, "1": 1}
        runs: dict[str, list[dict[str, Any]]] = {k: [] for k in variants}
        for _ in range(args.rounds):
            for name, j in variants.items():
                runs[name].append(measure_tree(_analyze_cmd(files, j), work))
        for name, rs in runs.items():
            results["runs"].append({
                "set": label, "what": f"gpuprof analyze --jobs {name}", "bytes": total, "rounds": rs,
                "wall_s": _median([r["wall_s"] for r in rs]), "cpu_s": _median([r["cpu_s"] for r in rs]),
                "tree_peak_rss": max(r["tree_peak_rss"] for r in rs), "exit": rs[-1]["exit"],
                "left": max(r["left"] for r in rs)})
        if args.critical_path and args.jobs > 1:
            results.setdefault("critical", []).append({"set": label, "jobs": args.jobs, **critical_path(files, args.jobs)})
        if not args.no_json_load:
            res = measure_tree(json_load_cmd(files), work)
            results["runs"].append({"set": label, "what": "json.load, one by one", "bytes": total, **res})
        if args.hta:
            res = measure_tree(hta_cmd(args.hta, files, work, tag, args.hta_timeout), work)
            what = "HTA TraceAnalysis load" + (" (timed out)" if res["exit"] == 124 else "")
            results["runs"].append({"set": label, "what": what, "bytes": total, **res})
            shutil.rmtree(work / f"hta_{tag}", ignore_errors=True)
    results["loadavg_end"] = os.getloadavg()
    if not args.no_merge and args.small_ranks:
        results["merge"] = merge_cost(small, [64, 256, 1024])
    print(f"load average at start {results['loadavg_start'][0]:.2f}, at end {results['loadavg_end'][0]:.2f}; "
          f"{results['cpus']} usable CPUs")
    for r in results["runs"]:
        print(f"{r['set']:>16}  {r['what']:<28} wall {r['wall_s']:7.2f} s  CPU {r['cpu_s']:7.2f} s  "
              f"{r['bytes'] / MB / r['wall_s']:7.1f} MB/s  peak RSS (tree) {r['tree_peak_rss'] / MB:6.0f} MB  "
              f"exit {r['exit']}  left {r['left']}")
    base = {r["set"]: r for r in results["runs"] if r["what"] == "gpuprof analyze --jobs 1"}
    for r in results["runs"]:
        if r["what"].startswith("gpuprof") and r["set"] in base and r is not base[r["set"]]:
            b = base[r["set"]]
            print(f"{r['set']:>16}  {r['what']:<28} / --jobs 1: wall {r['wall_s'] / b['wall_s']:.2f}x, "
                  f"CPU {r['cpu_s'] / b['cpu_s']:.2f}x")
    for c in results.get("critical", []):
        b = base[c["set"]]
        print(f"{c['set']:>16}  --jobs {c['jobs']} critical path: parent {c['parent_cpu_s']:.2f} s CPU + busiest "
              f"worker {max(c['worker_cpu_s'].values(), default=0.0):.2f} s = {c['critical_cpu_s']:.2f} s, "
              f"{c['critical_cpu_s'] / b['cpu_s']:.2f}x --jobs 1's CPU ({b['cpu_s']:.2f} s): the wall ratio on "
              f"{c['jobs']} free CPUs")
    for r in results.get("merge", []):
        print(f"merge of {r['ranks']:5d} ranks ({r['collectives_per_rank']} collectives each): "
              f"{r['merge_cpu_s'] * 1e3:8.1f} ms CPU, {r['cpu_us_per_rank']:.0f} µs per rank "
              f"({r['merge_s'] * 1e3:.1f} ms wall); summary {r['summary_bytes']} bytes")
    (work / "distributed_results.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

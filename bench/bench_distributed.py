"""Benchmark: cross-rank analysis of N ranks x M MB, end to end, and the merge cost per rank.

Big rank traces are derived from the largest real NCCL training trace the
project has (HTA's ``df_index_resolver.json.gz``, rank 1 of a 2-rank V100
job, 53.7 MB of JSON): ``bench_analyze.build`` repeats it end to end to about
M MB (shifted times and ids), then each rank's file is that text with its
``distributedInfo`` rewritten (rank r of N); the rest is copied byte for
byte (the wait measure never compares clocks across ranks; the tests cover
time-shifted ranks). Small ranks
are made the same way from HTA's ``sampled_rank-0.json.gz`` (1.7 MB).

In one run it measures, each in a fresh child process (wall time, peak RSS of
the process tree, see ``bench_analyze.measure``):

* ``gpuprof analyze RANK_FILES... --format json --jobs J`` (end to end:
  every rank loaded and analysed, the summaries merged, GP7xx rules);
* the same with ``--jobs 1``;
* ``json.load`` of every rank file in one process, one after the other (the
  in-run baseline: reading the same JSON with the standard library).

* with ``--hta PYTHON`` (a Python with HolisticTraceAnalysis installed, e.g. a
  private venv), HTA's multi-rank load of the same files:
  ``TraceAnalysis(trace_dir=DIR)`` on a folder holding the set's rank files
  (hard links), in a fresh child under ``timeout --hta-timeout`` (exit 124:
  it ran out of time, the row says so).

The table shows each child's own peak RSS (``ru_maxrss``); the process-tree
figure (in the JSON) also counts every ``/dev/shm/gpuprof-load-*`` scratch
file on the machine, which on a shared machine includes other users' runs.

Then, in this process, the merge alone: ``gpuprof.distributed.merge`` of K
rank summaries (copies of the real rank's summary) for K = 64, 256, 1024,
reported as µs per rank, to check that it is linear.

Usage: ``python bench/bench_distributed.py [--ranks 8] [--mb 200] [--small-ranks 64] [--workdir bench/out]
[--hta /path/to/venv/bin/python] [--hta-timeout 900]``.
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

from bench_analyze import MB, _Template, ensure_trace, measure  # noqa: E402

from gpuprof.testing.realtraces import TRACES  # noqa: E402

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
        with open(big, "r", encoding="utf-8") as src, open(path, "w", encoding="utf-8") as dst:
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
        t0 = time.perf_counter()
        merge(sums)
        dt = time.perf_counter() - t0
        rows.append({"ranks": k, "collectives_per_rank": len(base.inst_type), "merge_s": dt,
                     "us_per_rank": dt / k * 1e6, "summary_bytes": len(msgspec.msgpack.encode(base))})
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--mb", type=int, default=200)
    ap.add_argument("--small-ranks", type=int, default=64)
    ap.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--workdir", default=str(REPO / "bench" / "out"))
    ap.add_argument("--hta", default="", help="a Python with HolisticTraceAnalysis (compared when given)")
    ap.add_argument("--hta-timeout", type=int, default=900, help="seconds before HTA's load is stopped")
    args = ap.parse_args(argv)
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    template = _Template(SOURCE)
    big = ensure_trace(template, SOURCE, work, args.mb)
    big_ranks = rank_files(big, work, args.ranks, f"dist{args.mb}MB")
    small_src = work / "dist_small_source.json"
    if not small_src.exists():
        import gzip

        small_src.write_bytes(gzip.decompress(SMALL_SOURCE.read_bytes()))
    small = rank_files(small_src, work, args.small_ranks, "dist_small")
    results: dict[str, Any] = {"ranks": args.ranks, "mb": args.mb, "small_ranks": args.small_ranks, "runs": []}
    sets = ((f"{args.ranks} x {args.mb} MB", big_ranks, f"big{args.ranks}"),
            (f"{args.small_ranks} x {small_src.stat().st_size / MB:.1f} MB", small, f"small{args.small_ranks}"))
    for label, files, tag in sets:
        total = sum(f.stat().st_size for f in files)
        for j in dict.fromkeys((args.jobs, 1)):
            cmd = [sys.executable, "-m", "gpuprof", "analyze", *map(str, files), "--format", "json", "-o", os.devnull,
                   "--jobs", str(j)]
            res = measure(cmd)
            results["runs"].append({"set": label, "what": f"gpuprof analyze --jobs {j}", "bytes": total, **res})
        res = measure(json_load_cmd(files))
        results["runs"].append({"set": label, "what": "json.load, one by one", "bytes": total, **res})
        if args.hta:
            res = measure(hta_cmd(args.hta, files, work, tag, args.hta_timeout))
            what = "HTA TraceAnalysis load" + (" (timed out)" if res["exit"] == 124 else "")
            results["runs"].append({"set": label, "what": what, "bytes": total, **res})
            shutil.rmtree(work / f"hta_{tag}", ignore_errors=True)
    results["merge"] = merge_cost(small, [64, 256, 1024])
    for r in results["runs"]:
        print(f"{r['set']:>16}  {r['what']:<26} {r['wall_s']:7.1f} s  {r['bytes'] / MB / r['wall_s']:7.1f} MB/s  "
              f"peak RSS (tree) {r['tree_peak_rss'] / MB:6.0f} MB  exit {r['exit']}")
    for r in results["merge"]:
        print(f"merge of {r['ranks']:5d} ranks ({r['collectives_per_rank']} collectives each): "
              f"{r['merge_s'] * 1e3:8.1f} ms, {r['us_per_rank']:.0f} µs per rank; summary {r['summary_bytes']} bytes")
    (work / "distributed_results.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

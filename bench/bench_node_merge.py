"""Benchmark: the memory a node-report merge (``gpuprof analyze node*.json``) costs, as a multiple of the files.

Builds two node reports from HTA's real rank 0 trace (its rank summary with
the collective instances repeated to about ``--mb`` MB per report, ranks 0-7
and 8-15), then measures in fresh child processes (peak RSS less that of a
child that only imports the same modules):

* ``load``: :func:`gpuprof.distributed.reports.summaries_from_report` of both
  files (decode and validation);
* ``json.loads``: the baseline, what the loader did before (``json.loads`` of
  the bytes, then ``msgspec.convert`` to the summaries);
* ``end to end``: ``gpuprof analyze A B --format json -o OUT`` (load, merge,
  GP7xx rules, the report written), whole-process peak RSS.

Each is printed as MB and as a ratio to the two files' size.

Usage: ``python bench/bench_node_merge.py [--mb 40] [--workdir DIR]``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(1, str(REPO / "tests" / "support"))  # the test helpers (gpuprof_testing) live in tests/support/, outside the package


def build(path: Path, mb: float, first_rank: int) -> None:
    import msgspec

    from gpuprof.distributed.summary import summarize
    from gpuprof.report import SCHEMA_VERSION
    from gpuprof.trace.load import load_trace
    from gpuprof.trace.metrics import compute_metrics
    from gpuprof_testing.realtraces import shared_path

    src = shared_path("hta", "HolisticTraceAnalysis", "tests", "data", "timeline_analysis", "sampled_rank-0.json.gz")
    d = msgspec.to_builtins(summarize(compute_metrics(load_trace(src))))
    per_instance = 40  # bytes of JSON text per collective instance, about
    rep = max(1, int(mb * 2**20 / 8 / per_instance / max(len(d["inst_type"]), 1)))
    ranks = []
    for r in range(8):
        x = dict(d, rank=first_rank + r, world_size=16, path=f"rank{first_rank + r}.json")
        for k in [k for k in d if k.startswith("inst_") and d[k]]:  # every per-collective list
            x[k] = d[k] * rep
        ranks.append(x)
    doc = {"schema_version": SCHEMA_VERSION, "command": "analyze", "traces": [], "findings": [], "notes": [],
           "failed_rules": [], "sections": [{"kind": "rank_summaries", "version": 1, "ranks": ranks}]}
    path.write_bytes(msgspec.json.encode(doc))


def child_rss_mb(code: str) -> float:
    out = subprocess.run([sys.executable, "-c", code + "\nimport resource\n"
                          "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"],
                         capture_output=True, text=True, check=True, env=dict(os.environ, PYTHONPATH=str(REPO)))
    return int(out.stdout.split()[-1]) / 1024


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, default=40.0)
    ap.add_argument("--workdir", type=Path, default=None)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        a, b = Path(tmp) / "node_a.json", Path(tmp) / "node_b.json"
        build(a, args.mb, 0)
        build(b, args.mb, 8)
        size = (a.stat().st_size + b.stat().st_size) / 2**20
        imports = "import gpuprof.distributed.reports, gpuprof.distributed.summary, numpy, msgspec, json"
        base = child_rss_mb(imports)
        load = child_rss_mb(f"{imports}\nfrom gpuprof.distributed.reports import summaries_from_report\n"
                            f"t = {{}}\ns = summaries_from_report({str(a)!r}, t) + summaries_from_report({str(b)!r}, t)")
        old = child_rss_mb(f"{imports}\nfrom gpuprof.distributed.summary import RankSummary\nimport pathlib\n"
                           f"s = []\nfor p in ({str(a)!r}, {str(b)!r}):\n"
                           "    d = json.loads(pathlib.Path(p).read_bytes())\n"
                           "    s += [msgspec.convert(r, RankSummary) for r in d['sections'][0]['ranks']]")
        cli = child_rss_mb("import sys\nfrom gpuprof.cli import cli\n"
                           f"sys.argv = ['gpuprof', 'analyze', {str(a)!r}, {str(b)!r}, '--format', 'json', "
                           f"'-o', {str(Path(tmp) / 'out.json')!r}]\n"
                           "try:\n    cli()\nexcept SystemExit:\n    pass")
        print(f"two node reports, {size:.1f} MB in all (16 ranks); RSS above a child that imports only: {base:.0f} MB")
        print(f"{'what':<34}{'MB':>8}{'x files':>9}")
        for name, mb in (("load (msgspec, validated)", load - base), ("json.loads + convert (before)", old - base),
                         ("end to end (gpuprof analyze)", cli)):
            print(f"{name:<34}{mb:>8.0f}{mb / size:>9.2f}")


if __name__ == "__main__":
    main()

"""Benchmark: the TensorBoard plugin's ``runs`` route on a logdir of many files, alone and 50 at once.

Builds a scratch logdir of ``--files`` empty files in directories of 5,000
(what a shared logdir full of other tools' output looks like) and one real
run (HTA's rank-0 sample trace), then, through werkzeug's test client (the
WSGI apps TensorBoard mounts):

* the first ``runs`` request (the walk);
* the median of five later ones (answered from the kept list);
* 50 requests at once from 50 threads (the page polls every 0.5 s per tab).

Target: a later request within 2% of the first (no walk per request), and
50 at once within 5x a single first request.

Usage: ``python bench/bench_tbplugin_logdir.py [--files 25000]``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(1, str(REPO / "tests" / "support"))  # the test helpers (gpuprof_testing) live in tests/support/, outside the package


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=25_000)
    args = ap.parse_args()
    from tensorboard.plugins.base_plugin import TBContext
    from werkzeug.test import Client

    from gpuprof.tbplugin.plugin import GpuprofPlugin
    from gpuprof_testing.realtraces import shared_path

    with tempfile.TemporaryDirectory() as tmp:
        logdir = Path(tmp)
        for d in range(max(1, args.files // 5000)):
            sub = logdir / f"other{d}"
            sub.mkdir()
            for i in range(5000):
                (sub / f"f{i}.txt").touch()
        (logdir / "real").mkdir()
        src = shared_path("hta", "HolisticTraceAnalysis", "tests", "data", "timeline_analysis", "sampled_rank-0.json.gz")
        shutil.copy(src, logdir / "real" / "w.pt.trace.json.gz")
        plugin = GpuprofPlugin(TBContext(logdir=str(logdir)))
        apps = plugin.get_plugin_apps()
        client = Client(lambda env, sr: apps[env["PATH_INFO"]](env, sr))
        t0, c0 = time.perf_counter(), time.process_time()
        runs = json.loads(client.get("/runs").get_data())
        first, first_cpu = time.perf_counter() - t0, time.process_time() - c0
        assert [r["name"] for r in runs["runs"]] == ["real"], runs
        later = []
        for _ in range(5):
            t0 = time.perf_counter()
            client.get("/runs")
            later.append(time.perf_counter() - t0)
        threads = [threading.Thread(target=lambda: client.get("/runs")) for _ in range(50)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        fifty = time.perf_counter() - t0
        med = statistics.median(later)
        print(f"{args.files} files: first runs {first * 1e3:.1f} ms ({first_cpu * 1e3:.1f} ms of CPU); later (median of 5) {med * 1e3:.2f} ms "
              f"({med / first:.1%} of the first; target 2%); 50 at once {fifty * 1e3:.0f} ms "
              f"({fifty / first:.2f}x the first; target 5x)")


if __name__ == "__main__":
    main()

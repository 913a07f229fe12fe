"""Benchmark: the TensorBoard plugin answers other requests while it analyses a run.

Copies the four V100 ResNet-50 tb_plugin samples (two runs) into a scratch
logdir, builds the plugin in-process and calls its routes through
werkzeug's test client (the same WSGI apps TensorBoard mounts):

* ``runs`` latency with nothing to do (the in-run baseline);
* ``runs`` latency while the worker analyses both runs (polled until done);
* the time until ``run`` and ``compare`` are ready, and a second ``run``
  (the cache: no analysis).

Target: the median ``runs`` latency during the analysis within 5x the idle
one (the worker shares the GIL with the request threads, so requests slow
down but never wait for an analysis), and a cached ``run`` answered in at
most 2% of the time the analysis took.

Usage: ``python bench/bench_tbplugin.py``.
"""

from __future__ import annotations

import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(1, str(REPO / "tests" / "support"))  # the test helpers (gpuprof_testing) live in tests/support/, outside the package


def main() -> None:
    from tensorboard.plugins.base_plugin import TBContext
    from werkzeug.test import Client

    from gpuprof.tbplugin.plugin import GpuprofPlugin
    from gpuprof_testing.realtraces import TRACES

    samples = TRACES / "tbplugin" / "samples"
    with tempfile.TemporaryDirectory() as tmp:
        logdir = Path(tmp)
        for run in ("resnet50_num_workers_0", "resnet50_num_workers_4"):
            shutil.copytree(samples / run, logdir / run)
        plugin = GpuprofPlugin(TBContext(logdir=str(logdir)))
        apps = plugin.get_plugin_apps()
        client = Client(lambda env, sr: apps[env["PATH_INFO"]](env, sr))

        def timed(url: str) -> tuple[float, dict]:
            t = time.perf_counter()
            body = json.loads(client.get(url).get_data(as_text=True))
            return time.perf_counter() - t, body

        idle = [timed("/runs")[0] for _ in range(30)]
        start, start_cpu = time.perf_counter(), time.process_time()
        timed("/compare?a=resnet50_num_workers_0&b=resnet50_num_workers_4")  # queues both runs
        busy = []
        while True:
            busy.append(timed("/runs")[0])
            dt, body = timed("/compare?a=resnet50_num_workers_0&b=resnet50_num_workers_4")
            if body["status"] != "pending":
                break
            time.sleep(0.05)
        ready = time.perf_counter() - start
        ready_cpu = time.process_time() - start_cpu  # the whole process: the analysis threads and the requests
        cached, _ = timed("/run?run=resnet50_num_workers_0")
        plugin._store.close()
    med_idle, med_busy = statistics.median(idle), statistics.median(busy)
    print(f"runs, idle:            median {med_idle * 1e3:.1f} ms over {len(idle)} requests")
    print(f"runs, while analysing: median {med_busy * 1e3:.1f} ms, max {max(busy) * 1e3:.1f} ms over {len(busy)} requests")
    print(f"ratio busy/idle:       {med_busy / med_idle:.2f}x (target <= 5x)")
    print(f"both runs analysed and compared after {ready:.2f} s ({ready_cpu:.2f} s of CPU); "
          f"cached run view in {cached * 1e3:.1f} ms")
    print(f"ratio cached/analysis: {cached / ready:.4f} (target <= 0.02)")


if __name__ == "__main__":
    main()

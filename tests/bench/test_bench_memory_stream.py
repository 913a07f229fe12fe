"""bench/bench_memory_stream.py runs end to end on a small snapshot and says what it measured: every command
on the same file, CPU and peak RSS per child, the ratios, and nothing left in its temporary folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_bench_measures_every_command_on_one_file(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, str(REPO / "bench" / "bench_memory_stream.py"), "--entries", "3000",
                           "--large-bytes", "0", "--no-torch", "--dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=300, env=env, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    small = out["small"]
    assert small["entries"] >= 3000 and small["file_bytes"] > 100_000
    for name in ("gpuprof_memory_show", "pickle_load", "gpuprof_whole_file_loader"):
        r = small[name]
        assert r["rc"] in (0, 1) and r["cpu_s"] > 0 and r["peak_rss_bytes"] > 0, (name, r)
    assert small["gpuprof_memory_show"]["html_page_bytes"] > 0
    assert set(small["ratios"]) == {"pickle_load_cpu_over_gpuprof", "pickle_load_rss_over_gpuprof",
                                    "gpuprof_whole_file_loader_cpu_over_gpuprof",
                                    "gpuprof_whole_file_loader_rss_over_gpuprof"}
    assert list(tmp_path.iterdir()) == []  # the snapshots and pages were removed

"""bench/bench_analyze.py builds big traces by repeating a real one: the copies must stay a valid trace."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from gpuprof.trace.load import load_trace
from gpuprof.trace.vocab import step_number
from gpuprof_testing.realtraces import shared_path

REPO = Path(__file__).resolve().parents[2]


def _bench_module():
    spec = importlib.util.spec_from_file_location("bench_analyze", REPO / "bench" / "bench_analyze.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("parts", [
    ("hta", "HolisticTraceAnalysis", "tests", "data", "critical_path", "cuda_event_sync", "event_sync_trace.json.gz"),
    ("tbplugin", "test_resources", "gpu_metrics_input.json"),
], ids=["modern", "2021"])
def test_repeated_trace_shifts_times_steps_and_ids(tmp_path: Path, parts: tuple[str, ...]) -> None:
    bench = _bench_module()
    src = shared_path(*parts)
    one = load_trace(src)
    template = bench._Template(src)
    out = tmp_path / "big.json"
    copies, size = bench.build(template, out, target_mb=4 * template.copy_bytes / bench.MB)
    assert copies == 4 and size == out.stat().st_size
    json.loads(out.read_bytes())  # valid JSON for any parser, not only ours
    big = load_trace(out)
    assert big.num_events == 4 * one.num_events
    assert len(big.kernels) == 4 * len(one.kernels)
    # each copy is a later stretch of the run: kernels never overlap earlier copies
    k = sorted(big.kernels, key=lambda e: e.ts)
    n = len(one.kernels)
    for c in range(1, 4):
        assert k[c * n].ts >= k[c * n - 1].ts
    span = max(e.end for e in one.kernels) - min(e.ts for e in one.kernels)
    assert k[-1].ts - k[0].ts >= 3 * span
    # ids stay unique: one launch per correlation id, as in the source
    corr = [r.corr for r in big.runtime if r.corr > 0]
    assert len(corr) == len(set(corr)) == 4 * len([r for r in one.runtime if r.corr > 0])
    steps = [step_number(e.name) for e in big.annotations + big.ops if step_number(e.name) is not None]
    assert len(steps) == len(set(steps)) == 4 * len(
        [e for e in one.annotations + one.ops if step_number(e.name) is not None])


def test_memory_is_summed_over_the_process_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The bench counts a helper process's memory: a parent and a child each holding 80 MB read as >= 160 MB.

    Both hold their 80 MB until the bench has sampled the tree once after both said they hold it (a file
    each), so the overlap does not depend on how fast a loaded machine starts the child.
    """
    import sys

    bench = _bench_module()
    release = tmp_path / "release"
    hold = ("import sys, time, pathlib; b = bytearray(80 << 20); b[::4096] = b'x' * len(b[::4096]); "
            "pathlib.Path(sys.argv[1] + '.' + sys.argv[2]).touch(); end = time.monotonic() + 120\n"
            "while not pathlib.Path(sys.argv[1]).exists() and time.monotonic() < end: time.sleep(0.01)")
    parent = (f"import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', {hold!r}, sys.argv[1], 'child']); "
              f"sys.argv[2:] = ['parent']; exec({hold!r}); p.wait()")
    real_tree_rss = bench._tree_rss

    def tree_rss(pid: int) -> int:
        both = all((tmp_path / f"release.{who}").exists() for who in ("child", "parent"))
        rss = real_tree_rss(pid)
        if both:  # this sample was taken with both holding their memory: let them go
            release.touch()
        return rss

    monkeypatch.setattr(bench, "_tree_rss", tree_rss)
    r = bench.measure([sys.executable, "-c", parent, str(release)], interval=0.01)
    assert r["exit"] == 0 and release.exists()  # released by a sample, not by the processes' guard
    assert r["own_peak_rss"] >= 80 << 20  # the child alone
    assert r["tree_peak_rss"] >= 160 << 20  # both at once
    assert r["peak_rss"] == max(r["own_peak_rss"], r["tree_peak_rss"])

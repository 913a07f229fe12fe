"""The critical path's GPU figures against an independent count from the raw events, on every shared trace.

``bench/critpath_truth.py`` reads a trace's JSON events itself (no gpuprof code): the steps' GPU busy share
(kernels, copies and memsets of the main device, their union) and how far the host ran ahead of the GPU (from each
queued event's launch call to its start). The path's GPU time can only be time the GPU ran (its share at most the
busy share, with the stream's own few-µs gaps), a GPU-bound trace's path runs mostly through its GPU work
(issue 42: it ran through launch gaps before), and the path's ``host_ahead_us`` is the launch queue the raw events
show.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from gpuprof.trace.critpath.path import critical_path
from gpuprof.trace.load import load_trace
from gpuprof.trace.metrics import compute_metrics
from gpuprof_testing.realtraces import TRACES, shared_path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "critpath_truth.py"


def _truth() -> ModuleType:
    spec = importlib.util.spec_from_file_location("critpath_truth", BENCH)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow  # analyses every shared trace whole
def test_path_gpu_share_agrees_with_the_raw_events_on_every_shared_trace() -> None:
    if not TRACES.exists():
        shared_path("traces")  # skips with the one-line reason
    truth = _truth().truth
    skip = {"benchmark_simple_add_et.json.gz"}
    files = sorted(p for p in TRACES.rglob("*") if p.is_file() and p.name.endswith((".json", ".json.gz"))
                   and p.name not in skip and "plugin_outputs" not in p.parts and "test_resources" not in p.parts)
    seen = bound = 0
    for p in files:
        t = truth(str(p))
        if t is None:
            continue
        m = compute_metrics(load_trace(str(p)))
        cp = critical_path(m)
        if cp is None or len(m.steps) != t["steps"]:
            continue
        seen += 1
        gpu = sum(x.us for x in cp.parts if x.kind in ("kernel", "copy")) / cp.length_us
        assert gpu <= t["busy_share"] + 0.02, (p, gpu, t)
        if t["busy_share"] >= 0.9:  # GPU-bound: the path runs mostly through the GPU's work
            bound += 1
            assert gpu >= 0.5, (p, gpu, t)
        if gpu >= 0.3 and t["queued_events"]:  # the launch queue the path crossed: the raw events' depth
            assert 0.5 * t["ahead_mean_us"] <= cp.host_ahead_us <= 2.0 * t["ahead_mean_us"], (p, cp.host_ahead_us, t)
    assert seen >= 20 and bound >= 4

"""GP306 gpu-time-outside-operators: graph replays and direct launches said, with their share (issue 37)."""

from __future__ import annotations

import gzip
import json

import pytest

from gpuprof.analysis import analyze
from gpuprof_testing.realtraces import shared_path, v100_samples


def _gp306(path: object) -> list:
    return [f for f in analyze(str(path)).findings if f.code == "GP306"]


def test_gp306_bad_real_vllm_graph_replay() -> None:
    path = shared_path("hta", "TraceLens", "tests", "traces", "inference", "vllm_decode_full", "graph_execution.json.gz")
    (f,) = _gp306(path)
    # independently: kernels whose launch is a graph launch, over the kernels inside the ProfilerStep windows
    with gzip.open(path, "rt") as fh:
        ev = [e for e in json.load(fh)["traceEvents"] if e.get("ph") == "X"]
    graph = {e["args"]["correlation"] for e in ev if e["name"] in ("hipGraphLaunch", "cudaGraphLaunch")}
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in ev if e["name"].startswith("ProfilerStep#")]
    # no ProfilerStep# markers here: the whole trace is the one step
    kernels = [e for e in ev if e.get("cat") == "kernel" and (not steps or any(a <= e["ts"] <= b for a, b in steps))
               and not any(w in e["name"].lower() for w in ("nccl", "rccl", "all_reduce", "allreduce"))]
    replayed = sum(e["dur"] for e in kernels if e["args"].get("correlation") in graph)
    assert f.evidence[0].extra["graph_replay"] == pytest.approx(replayed / sum(e["dur"] for e in kernels), abs=0.01)
    assert f.severity == "info" and "replayed from CUDA/HIP graphs" in f.message and "enforce_eager" in f.advice


def test_gp306_good_v100_training_steps_are_attributed() -> None:
    assert _gp306(v100_samples()[0]) == []

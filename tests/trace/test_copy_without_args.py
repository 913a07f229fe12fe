"""A memcpy written without ``args`` still has a direction and host memory kind (from its name).

mypy found that such a copy had no parsed kind, and the copy rules read
``kind.direction`` on every copy, so one arg-less ``Memcpy HtoD (Pageable ->
Device)`` made ``gpuprof analyze`` fail with exit 3.
"""

from __future__ import annotations

import json

from gpuprof.analysis import analyze
from gpuprof.trace.load import load_trace
from gpuprof.trace.metrics import compute_metrics


def test_argless_memcpy_gets_its_kind_from_the_name(tmp_path) -> None:
    ev = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0, "dur": 1000, "pid": 1, "tid": 1},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "ts": 10, "dur": 300, "pid": 1, "tid": 1,
         "args": {"correlation": 7}},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "ts": 20, "dur": 250,
         "pid": 0, "tid": 7},
        {"ph": "X", "cat": "kernel", "name": "k", "ts": 400, "dur": 100, "pid": 0, "tid": 7,
         "args": {"device": 0, "stream": 7, "correlation": 8}},
    ]
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": ev}))
    m = compute_metrics(load_trace(str(p)))
    assert [(c.kind.direction, c.kind.host_memory) for c in m.copies] == [("HtoD", "pageable")]
    report = analyze(str(p))  # strict rules in the tests: a crash would raise
    assert report.traces[0].num_steps == 1

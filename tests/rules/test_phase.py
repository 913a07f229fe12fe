"""Graph capture passes and serving engines' pre-allocated caches are said as such (issue 37, gpuprof.trace.phase)."""

from __future__ import annotations

import pytest

from gpuprof.analysis import analyze
from gpuprof.trace.load import load_trace
from gpuprof.trace.metrics import compute_metrics
from gpuprof.trace.phase import serving_engine, trace_phase
from gpuprof_testing.realtraces import shared_path, v100_samples

VLLM = ("hta", "TraceLens", "tests", "traces", "inference", "vllm_decode_full")


@pytest.mark.slow  # a real trace analysed whole / a bounded hostile wait: the slow pass
def test_real_vllm_capture_pass_is_said_and_gets_no_steady_state_advice() -> None:
    path = shared_path(*VLLM, "capture_traces", "graph_capture_rank_0.1773709742341309550.pt.trace.json.gz")
    m = compute_metrics(load_trace(path))
    phase = trace_phase(m)
    assert phase is not None and phase.kind == "graph-capture" and phase.share > 0.9 and phase.instantiations >= 1
    report = analyze(str(path))
    assert any("graph capture pass" in n for n in report.traces[0].notes)
    codes = {f.code: f for f in report.findings}
    assert not {"GP101", "GP203", "GP205"} & set(codes)  # no "GPU idle", "remove syncs", "graph instantiation" advice
    gp501 = codes["GP501"]  # 94% of a 192 GiB MI300X: vLLM's KV cache
    assert gp501.severity == "info" and "vLLM" in gp501.message and "gpu_memory_utilization" in gp501.advice


def test_replayed_graphs_and_training_steps_are_not_capture_passes() -> None:
    replay = compute_metrics(load_trace(shared_path(*VLLM, "graph_execution.json.gz")))
    assert trace_phase(replay) is None and serving_engine(replay) == "vLLM"
    v100 = compute_metrics(load_trace(v100_samples()[0]))
    assert trace_phase(v100) is None and serving_engine(v100) is None
    assert not any("capture pass" in n for n in analyze(str(v100_samples()[0])).traces[0].notes)

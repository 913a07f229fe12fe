"""GP810 compiled-regions and GP811 compile-in-steps on synthetic traces shaped like torch.compile's.

The same rules run on real compiled captures in tests/capture/test_compile.py.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from gpuprof.analysis import analyze
from gpuprof.rules.compiled import compiled_region
from gpuprof.trace.phase import is_compile_phase
from gpuprof_testing.realtraces import shared_path
from gpuprof_testing.tracegen import TraceBuilder


def _codes(path: Path, code: str, **options: object) -> list:
    return list(analyze(path, select=[code], options={code: options} if options else None).findings)


def _compiled_loop(tmp_path: Path, name: str, *, broken: bool, recompile_at: int | None = None,
                   steps: int = 4, stacks: bool = True) -> Path:
    """Steps that call compiled code; ``broken``: a graph break splits it into two regions (frames 0 and 1)."""
    tb = TraceBuilder()
    for i in range(steps):
        version = 1 if recompile_at is not None and i >= recompile_at else 0
        with tb.step():
            if recompile_at == i:
                with tb.op("_compile.compile_inner (dynamo_timed)", us=40_000):
                    with tb.op("entire_frame_compile", us=39_000):
                        pass
            with tb.frames(("train.py", 30, "train")):
                with tb.op(f"Torch-Compiled Region: 0/{version}", us=200):
                    tb.gemm(us=100)
                if broken:
                    tb.cpu(us=50, name="aten::_local_scalar_dense")
                    with contextlib.ExitStack() as stack:
                        if stacks:  # with_stack=True: Dynamo's resume function after the break is a frame
                            stack.enter_context(tb.python("model.py", 12, "torch_dynamo_resume_in_forward_at_12"))
                        with tb.op(f"Torch-Compiled Region: 1/{version}", us=200):
                            tb.gemm(us=100)
            tb.optimizer(ms=0.2)
    return tb.write(tmp_path / f"{name}.json")


def test_vocabulary() -> None:
    assert compiled_region("Torch-Compiled Region: 12/3") == (12, 3)
    assert compiled_region("Torch-Compiled Region") is None
    assert is_compile_phase("OutputGraph.call_user_compiler (dynamo_timed)") and is_compile_phase("entire_frame_compile")
    assert not is_compile_phase("CompiledFunction") and not is_compile_phase("aten::mm")


def test_gp810_bad(tmp_path: Path) -> None:
    (f,) = _codes(_compiled_loop(tmp_path, "broken", broken=True), "GP810")
    assert f.evidence[0].value == 2  # frames 0 and 1 in every step
    assert f.evidence[0].extra["graph_break_sites"] == ["model.py:12 (forward)"]
    assert (f.location.file, f.location.line, f.location.function) == ("model.py", 12, "forward")
    assert "line 12" in f.message


def test_gp810_bad_without_stacks_by_region_count(tmp_path: Path) -> None:
    path = _compiled_loop(tmp_path, "nostack", broken=True, stacks=False)
    assert _codes(path, "GP810") == []  # 2 frames could be 2 compiled functions: not a break by default
    (f,) = _codes(path, "GP810", min_regions=2)
    assert f.evidence[0].value == 2 and f.location is None and "several separately compiled" in f.message


def test_gp810_good(tmp_path: Path) -> None:
    assert _codes(_compiled_loop(tmp_path, "whole", broken=False), "GP810") == []


def test_gp811_bad(tmp_path: Path) -> None:
    (f,) = _codes(_compiled_loop(tmp_path, "recompiles", broken=False, recompile_at=2), "GP811")
    # one 40 ms compilation (the nested phase is inside it: counted once) over 4 steps
    assert f.evidence[0].value == 10_000.0
    assert f.evidence[0].extra["steps"] == [2] and f.evidence[0].extra["recompiled_versions"] == ["0/1"]
    assert f.cost_us_per_step == 10_000.0 and "0/1" in f.message


def test_gp811_good(tmp_path: Path) -> None:
    assert _codes(_compiled_loop(tmp_path, "steady", broken=False), "GP811") == []


# --------------------------------------------------------------------------- GP811 without ProfilerStep# markers
def _warmup_trace(tmp_path: Path, compile_us: float) -> Path:
    """A bare profile() around a compiled model's first calls: Dynamo compiles before any GPU work (the lead-in),
    then the compiled region runs; no ProfilerStep# markers."""
    tb = TraceBuilder()
    with tb.op("_compile.compile_inner (dynamo_timed)", us=compile_us):
        with tb.op("entire_frame_compile", us=compile_us * 0.9):
            pass
    for _ in range(3):
        with tb.op("Torch-Compiled Region: 0/0", us=200):
            tb.gemm(us=100)
    return tb.write(tmp_path / "warmup.json")


def test_gp811_bad_compile_in_a_trace_without_step_markers(tmp_path: Path) -> None:
    path = _warmup_trace(tmp_path, 40_000)
    report = analyze(path)
    (f,) = [f for f in report.findings if f.code == "GP811"]
    assert f.severity.value == "info" and f.cost_us_per_step is None  # a one-off warm-up, no per-step cost
    assert f.evidence[0].value == 40_000.0 and f.evidence[0].extra["step_markers"] is False
    assert "no ProfilerStep# markers" in f.message and "40 ms" in f.message
    assert "keep it" in f.advice and "schedule(" in f.advice  # never "remove the compilation / recording"
    t = report.traces[0]
    assert t.lead_in_us is not None and t.lead_in_us >= 40_000  # compiled before the first GPU work: the lead-in
    assert any("records torch.compile compiling (40 ms" in n for n in t.notes)


def test_gp811_good_short_compile_without_step_markers(tmp_path: Path) -> None:
    report = analyze(_warmup_trace(tmp_path, 500))
    assert [f for f in report.findings if f.code == "GP811"] == []
    assert not any("torch.compile compiling" in n for n in report.traces[0].notes)


@pytest.mark.parametrize("parts", [
    ("hta", "TraceLens", "tests", "traces", "b200", "eager_trace.json.gz"),
    ("hta", "TraceLens", "tests", "traces", "inference", "vllm_decode_full", "capture_traces",
     "graph_capture_rank_0.1773709742341309550.pt.trace.json.gz"),
    ("hta", "TraceLens", "tests", "traces", "inference", "vllm_prefilldecode_piecewise", "graph_execution.json.gz"),
    pytest.param(("hta", "TraceLens", "tests", "traces", "inference", "xdit_sd_3.5", "profile_trace_rank_0.json.gz"),
                 marks=pytest.mark.slow),  # 62 MB
])
@pytest.mark.slow  # whole real traces analysed: out of the README's fast command
def test_gp811_good_real_traces_running_compiled_code_are_not_compiling(parts: tuple[str, ...]) -> None:
    """Real traces whose Python frames run Dynamo/Inductor code (eval_frame, output_code, the compile worker
    pool's reader thread) without compiling: no GP811 and no warm-up note, steps or not."""
    report = analyze(str(shared_path(*parts)))
    assert [f for f in report.findings if f.code == "GP811"] == []
    assert not any("torch.compile compiling" in n for n in report.traces[0].notes)


@pytest.mark.slow
def test_gp811_bad_real_cpu_capture_of_a_first_compiled_call(tmp_path: Path) -> None:
    """A real torch.profiler capture (no schedule, so no ProfilerStep#) around a compiled model's first calls."""
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    model = torch.compile(torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2)),
                          backend="aot_eager")  # no C++ toolchain needed
    x = torch.randn(4, 16)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(3):
            model(x).sum().backward()
    path = tmp_path / "first_calls.pt.trace.json"
    prof.export_chrome_trace(str(path))
    report = analyze(path)
    (f,) = [f for f in report.findings if f.code == "GP811"]
    assert f.severity.value == "info" and "no ProfilerStep# markers" in f.message
    assert f.evidence[0].value > 1000  # compiling takes far more than 1 ms
    assert any("torch.compile compiling" in n for n in report.traces[0].notes)


def _recording_trace(tmp_path: Path, markers: bool) -> Path:
    """torch.compile(mode="reduce-overhead")'s first call: Inductor's cudagraph trees record a graph (30 ms),
    then the graph replays; with or without ProfilerStep# markers."""
    tb = TraceBuilder()
    for i in range(4):
        with tb.step() if markers else contextlib.nullcontext():
            with tb.op("Torch-Compiled Region: 0/0", us=200):
                if i == 0:
                    with tb.python("torch/_inductor/cudagraph_trees.py", 2048, "record"):
                        with tb.python("torch/_inductor/cudagraph_trees.py", 1014, "CUDAGraphNode.record"):
                            tb.cpu(us=30_000, name="aten::mm")
                tb.gemm(us=100)
            tb.optimizer(ms=0.2)
    return tb.write(tmp_path / f"record_{markers}.json")


def test_gp811_bad_inductor_cuda_graph_recording_without_step_markers(tmp_path: Path) -> None:
    report = analyze(_recording_trace(tmp_path, markers=False))
    (f,) = [f for f in report.findings if f.code == "GP811"]
    assert f.severity.value == "info" and "Inductor recording CUDA graphs 30 ms" in f.message
    assert f.evidence[0].value == pytest.approx(30_000.0, abs=50)
    assert "keep it" in f.advice and "remove" not in f.advice.lower()


def test_gp811_bad_inductor_cuda_graph_recording_inside_steps(tmp_path: Path) -> None:
    (f,) = _codes(_recording_trace(tmp_path, markers=True), "GP811")
    assert "Inductor recorded CUDA graphs inside 1 of 4 recorded steps" in f.message
    advice = " ".join(f.advice.split())
    assert 'mode="reduce-overhead" needs: keep it' in advice and f.evidence[0].extra["steps"] == [0]
    assert "recompiled" not in advice  # recording alone is no recompilation

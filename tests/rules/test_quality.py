"""GP901 (step outliers / warm-up), GP902 (GPU activity missing), GP903 (trace too large)."""

from __future__ import annotations

import math

import pytest

from gpuprof.analysis import analyze
from gpuprof.findings import Severity
from gpuprof.trace.load import load_trace
from gpuprof_testing.realtraces import shared_path
from gpuprof_testing.tracegen import TraceBuilder, simple_training

HTA = ("hta", "HolisticTraceAnalysis", "tests", "data")


def _found(path, code, **options):
    return analyze(path, select=[code], options={code: options}).findings


# ---------------------------------------------------------------------- GP901


def test_gp901_bad(tmp_path):
    # A profiler schedule without warm-up: the first step (cuDNN autotuning, allocator growth) is 4x slower.
    path = simple_training(TraceBuilder(), steps=6, warmup_steps=1, warmup_factor=4.0).write(tmp_path / "w.json")
    (f,) = _found(path, "GP901")
    # severity follows cost (one policy, gpuprof.codespec.severity_for_cost): a third of the steps' time is a warning
    assert f.cost_share is not None and f.cost_share > 0.2 and f.severity is Severity.WARNING
    ev = f.evidence[0]
    assert ev.extra["step_ids"] == [0]
    assert 3.0 < ev.value < 5.0  # about warmup_factor times the median
    assert ev.events[0].name == "ProfilerStep#0"
    assert "Warm-up" in f.message and "#0" in f.message
    assert "warmup=3" in f.advice  # one slow step recorded: two more warm-up steps than that
    assert f.cost_us_per_step > 0


def test_gp901_bad_outlier_step(tmp_path):
    # Step 3 saves a checkpoint: 60 ms of host work the profiler records no operator for.
    tb = TraceBuilder()
    for i in range(6):
        with tb.step():
            for _ in range(10):
                tb.gemm("bf16", us=1000)
            tb.stream_synchronize()
            if i == 3:
                tb.idle(ms=60)
    (f,) = _found(tb.write(tmp_path / "o.json"), "GP901")
    assert f.severity is Severity.WARNING
    ev = f.evidence[0]
    assert ev.extra["step_ids"] == [3]
    assert ev.value == pytest.approx(7.0, rel=0.1)  # (10 + 60) ms against 10 ms
    assert ev.extra["grew"] == "other" and ev.extra["grew_us"] == pytest.approx(60_000, rel=0.02)
    assert "#3" in f.message and "untraced host time" in f.message
    assert f.cost_us_per_step == pytest.approx(60_000 / 6, rel=0.05)
    assert "checkpoint" in f.advice and "gc.freeze()" in f.advice


def test_gp901_good(tmp_path):
    path = simple_training(TraceBuilder(), steps=6).write(tmp_path / "g.json")
    assert _found(path, "GP901") == []


def test_gp901_good_too_few_steps(tmp_path):
    path = simple_training(TraceBuilder(), steps=2, warmup_steps=1).write(tmp_path / "two.json")
    assert _found(path, "GP901") == []


# ---------------------------------------------------------------------- GP902


def _without_gpu_events(tb: TraceBuilder) -> TraceBuilder:
    """What a trace looks like when CUPTI recorded the runtime calls but lost the GPU activities."""
    tb.events = [e for e in tb.events if e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset")]
    return tb


def test_gp902_bad(tmp_path):
    tb = _without_gpu_events(simple_training(TraceBuilder(), steps=3))
    path = tb.write(tmp_path / "nogpu.json")
    (f,) = _found(path, "GP902")
    assert f.severity is Severity.WARNING
    extra = f.evidence[0].extra
    assert extra["launch_calls"] == 3 * (8 * 3 + 2)  # 24 GEMMs + 2 optimizer kernels per step
    assert extra["devices"] == 1
    assert f.evidence[0].events[0].name == "cudaLaunchKernel"
    assert "NVIDIA A100-SXM4-80GB" in f.message and "78 kernel launches" in f.message
    assert "ProfilerActivity.CUDA" in f.advice


def test_gp902_bad_cpu_activity_only(tmp_path):
    # activities=[ProfilerActivity.CPU] on a GPU machine: deviceProperties, no runtime calls, no GPU events.
    tb = TraceBuilder()
    for _ in range(3):
        with tb.step():
            tb.cpu(ms=2, name="aten::mm")
    (f,) = _found(tb.write(tmp_path / "cpuact.json"), "GP902")
    assert f.severity is Severity.INFO
    assert f.evidence[0].extra["runtime_calls"] == 0


def test_gp902_good(tmp_path):
    cpu = TraceBuilder(device=None)
    for _ in range(3):
        with cpu.step():
            cpu.cpu(ms=2, name="aten::mm")
    assert _found(cpu.write(tmp_path / "cpu.json"), "GP902") == []
    gpu = simple_training(TraceBuilder(), steps=2).write(tmp_path / "gpu.json")
    assert _found(gpu, "GP902") == []


def test_gp902_real_cpu_only_trace_does_not_fire():
    path = shared_path(*HTA, "cpu_only", "rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz")
    assert _found(path, "GP902") == []


def test_gp902_real_cupti_range_profiler_trace_fires():
    # HTA's cupti_profiler sample: CUPTI counter ranges instead of activities, so no kernel events
    # although the host launched kernels.
    path = shared_path(*HTA, "cupti_profiler", "benchmark_result_924719_1679055439_trace.json.gz")
    (f,) = _found(path, "GP902")
    assert f.severity is Severity.WARNING
    assert f.evidence[0].extra["launch_calls"] > 0


# ---------------------------------------------------------------------- GP903


def test_gp903_bad(tmp_path):
    tb = simple_training(TraceBuilder(), steps=8)
    path = tb.write(tmp_path / "big.json")
    trace = load_trace(path)
    per_step = trace.json_bytes / 8
    limit_mib = 2.5 * per_step / (1 << 20)  # room for two and a half steps
    (f,) = _found(path, "GP903", max_json_mib=limit_mib)
    assert f.severity is Severity.INFO
    size, events = f.evidence
    assert size.value == trace.json_bytes
    assert events.value == trace.num_events
    assert events.extra["suggested_active"] == 2
    assert "active=2" in f.advice and "--annotate" in f.advice
    assert "record_shapes=True" in f.advice  # the builder records input types
    assert "8 steps" in f.message


def test_gp903_bad_by_event_count(tmp_path):
    path = simple_training(TraceBuilder(), steps=4).write(tmp_path / "ev.json")
    n = load_trace(path).num_events
    (f,) = _found(path, "GP903", max_events=n // 2)
    assert f.evidence[1].extra["suggested_active"] == math.floor((n // 2) / (n / 4))
    (w,) = _found(path, "GP903", max_events=n // 2, warn_json_mib=0.0)
    assert w.severity is Severity.WARNING


def test_gp903_good(tmp_path):
    path = simple_training(TraceBuilder(), steps=3).write(tmp_path / "small.json")
    assert _found(path, "GP903") == []


@pytest.mark.slow  # slow pass: a real trace (or job) analysed whole; the README's fast command stays under 300 CPU s on a 2-core VM
def test_gp903_real_v100_sample_schedule_suggestion():
    path = shared_path("tbplugin", "samples", "resnet50_num_workers_0", "worker0.1623143089861.pt.trace.json.gz")
    assert _found(path, "GP903") == []  # 35 MB: fine for Perfetto
    trace = load_trace(path)
    (f,) = _found(path, "GP903", max_json_mib=20.0)
    expected = int(20.0 * (1 << 20) / (trace.json_bytes / 6))  # six profiled steps
    assert f.evidence[1].extra["suggested_active"] == expected
    assert f"active={expected}," in f.advice
    assert "profile_memory=True" in f.advice  # the sample was recorded with profile_memory


def test_gp903_names_compilation_inside_the_steps(tmp_path):
    tb = TraceBuilder()
    for i in range(4):
        with tb.step():
            tb.gemm(us=500)
            if i == 2:  # a recompilation: Dynamo's phase with its Python frames inside
                with tb.op("entire_frame_compile (dynamo_timed)", us=50):
                    for _ in range(60):
                        with tb.python("torch/_dynamo/convert_frame.py", 900, "_compile"):
                            tb.cpu(us=1)
    path = tb.write(tmp_path / "compiling.json")
    n = load_trace(path).num_events
    (f,) = _found(path, "GP903", max_events=n // 2)
    share = f.evidence[0].extra["share_in_compilation"]
    assert share > 0.5 and f.advice.startswith(f"{share:.0%} of the host events are torch.compile compiling")
    # without the compilation the advice is the plain one
    plain = simple_training(TraceBuilder(), steps=4).write(tmp_path / "plain.json")
    (g,) = _found(plain, "GP903", max_events=load_trace(plain).num_events // 2)
    assert g.evidence[0].extra["share_in_compilation"] == 0 and "torch.compile" not in g.advice


def test_gp901_warmup_in_gpuprofs_own_window_names_gpuprofs_schedule(tmp_path):
    # A capture chose the recorded steps (its default Schedule): the user wrote no torch.profiler schedule, so the
    # fix is gpuprof's schedule= (a later window), not torch.profiler.schedule's warm-up.
    from gpuprof.capture.config import Schedule
    from gpuprof.capture.end.analyse import own_schedule_advice

    path = simple_training(TraceBuilder(), steps=6, warmup_steps=1, warmup_factor=4.0).write(tmp_path / "w.json")
    (f,) = _found(path, "GP901")
    (g,) = own_schedule_advice([f], Schedule())
    assert "torch.profiler.schedule" not in g.advice and "gpuprof's recording window (steps 7-11 recorded" in g.advice
    assert "Schedule(wait=8, warmup=2, active=5)" in g.advice  # one warm-up step seen: start 3 steps later
    assert (g.code, g.message, g.cost_us_per_step, g.evidence) == (f.code, f.message, f.cost_us_per_step, f.evidence)
    # the user's own torch.profiler.schedule callable: the rule's advice is theirs to follow
    assert own_schedule_advice([f], lambda step: None) == [f]

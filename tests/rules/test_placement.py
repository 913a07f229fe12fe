"""GP401 dataparallel and GP402 cpu-compute-with-gpu: synthetic and real traces."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuprof.analysis import analyze
from gpuprof.rules.placement import is_heavy_compute_op
from gpuprof_testing.realtraces import shared_path
from gpuprof_testing.tracegen import TraceBuilder, simple_training

HTA = ("hta", "HolisticTraceAnalysis", "tests", "data")


def _run(path, code, **options):
    return [f for f in analyze(path, select=[code], options={code: options} if options else None).findings]


# ------------------------------------------------------------------ GP401


def _dp_loop(tmp_path: Path, devices: int = 2, dialect: str = "modern") -> Path:
    tb = TraceBuilder(num_devices=devices, dialect=dialect)
    for _ in range(3):
        with tb.step():
            with tb.frames(("train.py", 60, "train")):
                tb.copy_h2d(16 << 20, pageable=False, blocking=False)
                tb.data_parallel(devices=devices, param_bytes=100 << 20, batch_bytes=16 << 20)
            tb.optimizer(ms=0.5, kernels=2)
    return tb.write(tmp_path / f"dp_{devices}_{dialect}.json")


def test_gp401_bad(tmp_path):
    found = _run(_dp_loop(tmp_path), "GP401")
    assert len(found) == 1, found
    f = found[0]
    ev = f.evidence[0]
    assert f.severity.value == "warning"
    assert ev.extra["gpus_active"] == 2
    assert ev.extra["marks"]["annotation"] == 3  # one DataParallel.forward per step
    assert ev.extra["marks"]["python_frames"] > 0
    assert ev.extra["marks"]["autograd_functions"] == 9  # Scatter, Broadcast, Gather per step
    assert ev.extra["forwards_per_step"] == 1
    # parameters (100 MiB) + half the batch + the gathered output, copied GPU to GPU every step
    assert ev.extra["peer_copy_bytes_per_step"] == (100 << 20) + (8 << 20) + (16 << 20) // 64
    assert f.cost_us_per_step and f.cost_us_per_step > 1000  # replicate+scatter+gather wait on the copies
    assert "on 2 GPUs" in f.message and "1 DataParallel forward per step" in f.message
    assert "DistributedDataParallel" in f.advice and "torchrun" in f.advice
    assert f.location is not None and (f.location.file, f.location.line) == ("train.py", 60)


def test_gp401_bad_2021_dialect(tmp_path):
    # 2021 traces: record_function ranges are operators, Python stacks only a "Call stack" string
    found = _run(_dp_loop(tmp_path, dialect="2021"), "GP401")
    assert len(found) == 1
    assert found[0].evidence[0].extra["marks"]["annotation"] == 3


def test_gp401_bad_single_gpu_is_info(tmp_path):
    found = _run(_dp_loop(tmp_path, devices=1), "GP401")
    assert len(found) == 1
    assert found[0].severity.value == "info"
    assert "single GPU" in found[0].message and "drop the wrapper" in found[0].advice


def test_gp401_good(tmp_path):
    # DistributedDataParallel: its own annotation and frames, an NCCL all-reduce; no DataParallel marks.
    tb = TraceBuilder(rank=0, world_size=2)
    for _ in range(3):
        with tb.step():
            with tb.python("torch/nn/parallel/distributed.py", 1515, "forward"):
                with tb.annotate("DistributedDataParallel.forward"):
                    for _ in range(4):
                        tb.gemm(us=500)
            with tb.python("torch/nn/parallel/distributed.py", 1300, "_pre_forward"):
                tb.cpu(us=50)
            tb.nccl("AllReduce", nbytes=50 << 20, us=800)
            with tb.op("Gather"):  # a user's own autograd Function named Gather is not DataParallel
                tb.kernel("gather_kernel", us=20)
    path = tb.write(tmp_path / "ddp.json")
    assert _run(path, "GP401") == []


@pytest.mark.slow  # slow pass: a real trace (or job) analysed whole; the README's fast command stays under 300 CPU s on a 2-core VM
def test_gp401_good_real_ddp_traces():
    # Real DistributedDataParallel traces (HTA test data) must not be mistaken for DataParallel.
    for parts in (("nccl_parser_config", "nccl_data.json.gz"),
                  ("trace_diff", "control", "control.json.gz"),
                  ("ns_resolution_trace", "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"),
                  ("timeline_analysis", "sampled_rank-0.json.gz")):
        path = shared_path(*HTA, *parts)
        assert _run(path, "GP401") == [], path
    path = shared_path("hta", "TraceLens", "tests", "traces", "mi300", "resnet_act_checkpoint.json.gz")
    assert _run(path, "GP401") == []


# ------------------------------------------------------------------ GP402


def _cpu_head_loop(tmp_path: Path, on_gpu: bool, dialect: str = "modern") -> Path:
    """GPU backbone; the head (aten::linear > aten::addmm) runs on the CPU unless ``on_gpu``."""
    tb = TraceBuilder(dialect=dialect)
    for _ in range(4):
        with tb.step():
            for _ in range(4):
                tb.gemm(us=1000, name="aten::conv2d")
            tb.copy_d2h(4 << 20, pageable=True, blocking=True)
            with tb.frames(("model.py", 88, "forward")):
                with tb.op("aten::linear", input_types=["float", "float", "float"]):
                    if on_gpu:
                        tb.gemm(us=300, name="aten::addmm")
                    else:
                        with tb.op("aten::addmm", input_types=["float", "float", "float"], us=6000):
                            pass
            tb.optimizer(ms=0.3, kernels=2)
    return tb.write(tmp_path / f"head_{on_gpu}_{dialect}.json")


@pytest.mark.parametrize("dialect", ["modern", "2021"])
def test_gp402_bad(tmp_path, dialect):
    found = _run(_cpu_head_loop(tmp_path, on_gpu=False, dialect=dialect), "GP402")
    assert len(found) == 1, found
    f = found[0]
    ev = f.evidence[0]
    # the nested aten::addmm is inside the outer aten::linear: counted once
    assert ev.extra["ops_per_step"] == {"aten::linear": 1.0}
    assert 6000 <= ev.value < 6100
    assert ev.extra["share_of_step"] > 0.3
    assert 5900 < f.cost_us_per_step <= ev.value  # the GPU has nothing queued meanwhile
    assert "aten::linear" in f.message and "GPU 0 is in use" in f.message
    assert "model.to('cuda')" in f.advice
    assert f.location is not None and (f.location.file, f.location.line) == ("model.py", 88)


def test_gp402_good(tmp_path):
    assert _run(_cpu_head_loop(tmp_path, on_gpu=True), "GP402") == []
    assert _run(simple_training(TraceBuilder(), steps=4).write(tmp_path / "good.json"), "GP402") == []


def test_gp402_good_cpu_only_training(tmp_path):
    # No GPU in the trace: CPU matmuls are the only option, not a placement mistake.
    path = simple_training(TraceBuilder(device=None), steps=3).write(tmp_path / "cpu.json")
    assert _run(path, "GP402") == []
    real = shared_path(*HTA, "cpu_only", "rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz")
    assert _run(real, "GP402") == []


@pytest.mark.slow  # analyzes several real GPU traces (about 2 s)
def test_gp402_real_gpu_traces_run_their_matmuls_on_the_gpu(v100_samples):
    paths = list(v100_samples) + [
        shared_path("hta", "TraceLens", "tests", "traces", "h100", "gaunernst_bert-small-uncased__1016001.json.gz"),
        shared_path(*HTA, "df_index_resolver", "df_index_resolver.json.gz"),
    ]
    for path in paths:
        # even with no thresholds: not a single heavy operator ran on the CPU
        assert _run(path, "GP402", min_us_per_step=0.0, min_share=0.0) == [], path


def test_heavy_op_names():
    for name in ("aten::conv2d", "aten::convolution_backward", "aten::linear", "aten::addmm", "aten::bmm",
                 "aten::matmul", "aten::mm", "aten::baddbmm", "aten::scaled_dot_product_attention", "aten::einsum"):
        assert is_heavy_compute_op(name), name
    for name in ("aten::add", "aten::convert_element_type", "aten::relu", "aten::copy_", "aten::mean"):
        assert not is_heavy_compute_op(name), name


def test_gp401_bad_cpu_run_says_cpu_not_zero_gpus(tmp_path):
    """A real CPU capture of nn.DataParallel (no GPU: it only calls the module): named as such, not 'on 0 GPUs'."""
    torch = pytest.importorskip("torch")
    import gpuprof
    from gpuprof.capture import Schedule

    model = torch.nn.DataParallel(torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Linear(16, 2)))
    with gpuprof.profile(tmp_path, run="dp", schedule=Schedule(wait=0, warmup=1, active=2), print_report=False,
                         tensorboard=False, analyze=False, with_stack=True) as prof:
        for _ in range(3):
            model(torch.randn(4, 16)).sum().backward()
            prof.step()
    (f,) = _run(prof.traces[0].path, "GP401")
    assert "wraps a CPU model (no GPU work in the trace" in f.message and "0 GPU" not in f.message
    assert f.severity.value == "info" and "Without a GPU it does nothing but call the module" in f.advice

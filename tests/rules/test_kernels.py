"""GP301 (launch-bound: many tiny kernels, the GPU waiting on launches)."""

from __future__ import annotations

from gpuprof.analysis import analyze
from gpuprof_testing.realtraces import shared_path
from gpuprof_testing.tracegen import KERNELS, TraceBuilder, simple_training

TRACELENS = ("hta", "TraceLens", "tests", "traces")


def _gp301(path, **options):
    found = [f for f in analyze(path, select=["GP301"], options={"GP301": options}).findings]
    assert len(found) <= 1
    return found[0] if found else None


def _tiny_kernel_loop(tmp_path, queued: bool = False, graphed: int = 0, batches: tuple[int, ...] = ()):
    """Five steps of 200 element-wise kernels of 3 µs plus a non-fused optimizer.

    ``queued`` puts a 5 ms GEMM in front of each step's small kernels, so the
    host launches them while the GPU is busy and they then run back to back.
    ``graphed``: that many of the adds are replayed from a CUDA graph (``cudaGraphLaunch``).
    ``batches``: each step also runs an ``aten::mm`` whose recorded ``Input Dims`` have the step's batch size.
    """
    tb = TraceBuilder(launch_us=6.0, gap_us=4.0)
    for step in range(5):
        with tb.step():
            if batches:
                with tb.op("aten::mm", input_types=["float", "float"], input_dims=[[batches[step], 64], [64, 64]]):
                    tb.kernel(KERNELS["elementwise"], us=3.0)
            if queued:
                tb.gemm("bf16", us=5000)
            for i in range(200):
                with tb.op("aten::add", input_types=["float", "float", "Scalar"]):
                    tb.kernel(KERNELS["elementwise"], us=3.0,
                              launch="cudaGraphLaunch" if i < graphed else "cudaLaunchKernel")
            if graphed < 200:
                tb.optimizer(ms=0.1, kernels=40, kernel_us=2.0)
    return tb.write(tmp_path / f"tiny_{queued}_{graphed}_{len(set(batches))}.json")


def test_gp301_bad(tmp_path):
    f = _gp301(_tiny_kernel_loop(tmp_path))
    assert f is not None
    tiny, launch = f.evidence
    assert tiny.value > 0.95  # every kernel is 2-3 µs
    assert tiny.extra["kernels_per_step"] == 240  # 200 adds + 40 optimizer kernels
    assert tiny.extra["median_kernel_us"] < 10
    assert tiny.extra["optimizer_tiny_kernels"] == 5 * 40
    assert tiny.extra["top_ops"]["aten::add"] == 5 * 200
    assert tiny.events  # points at tiny kernels
    # the GPU is idle while the host is in cudaLaunchKernel: 6 µs of each 10 µs launch cycle, minus the kernel
    assert 0.2 < launch.value < 0.7
    assert f.cost_us_per_step > 500
    assert "240 kernels per step" in f.message
    assert "fused=True" in f.advice and "reduce-overhead" in f.advice
    assert "aten::add" in f.advice


def test_gp301_static_shapes_make_a_cuda_graph_candidate(tmp_path):
    f = _gp301(_tiny_kernel_loop(tmp_path, batches=(32,) * 5))
    assert f is not None and f.evidence[0].extra["static_shapes"] is True
    assert f.evidence[0].extra["shape_ratio"] == 1.0
    assert "CUDA-graph candidate" in f.advice and "same in each of the 5 steps" in f.advice
    assert "reduce-overhead" in f.advice and "torch.cuda.graph" in f.advice


def test_gp301_changing_shapes_need_padding_first(tmp_path):
    f = _gp301(_tiny_kernel_loop(tmp_path, batches=(32, 17, 32, 29, 8)))
    assert f is not None and f.evidence[0].extra["static_shapes"] is False
    assert f.evidence[0].extra["shape_ratio"] == 4.0  # 4 distinct batch sizes, one matmul per step
    assert "Shapes change from step to step (4 distinct" in f.advice and "Pad or bucket" in f.advice
    assert "CUDA-graph candidate" not in f.advice


def test_gp301_without_input_dims_says_what_graphs_need(tmp_path):
    f = _gp301(_tiny_kernel_loop(tmp_path))
    assert f is not None and f.evidence[0].extra["static_shapes"] is None
    assert "which needs static shapes" in f.advice


def test_gp301_good_graphed_steps(tmp_path):
    # the same tiny kernels, replayed from CUDA graphs: no launch per kernel, not launch-bound
    assert _gp301(_tiny_kernel_loop(tmp_path, graphed=200)) is None


def test_gp301_bad_partly_graphed_names_the_graphs(tmp_path):
    f = _gp301(_tiny_kernel_loop(tmp_path, graphed=100))
    assert f is not None
    tiny = f.evidence[0]
    assert tiny.extra["graph_kernels"] == 5 * 100 and tiny.extra["kernels_per_step"] == 140  # 100 adds + 40 optimizer
    assert "already replay CUDA graphs" in f.advice and "outside the graphs" in f.advice


def test_gp301_good(tmp_path):
    path = simple_training(TraceBuilder(), steps=5).write(tmp_path / "good.json")
    assert _gp301(path) is None


def test_gp301_good_when_tiny_kernels_are_queued_behind_work(tmp_path):
    # Same 240 tiny kernels per step, but launched while a long GEMM runs: the GPU never waits on them.
    path = _tiny_kernel_loop(tmp_path, queued=True)
    assert _gp301(path) is None
    # ... while the tiny-kernel share alone would have matched: the launch overhead is what decides
    assert _gp301(path, min_launch_share=0.0, max_utilization=1.01) is not None


def test_gp301_option_overrides_threshold(tmp_path):
    path = _tiny_kernel_loop(tmp_path)
    assert _gp301(path, tiny_us=1.0) is None  # no kernel is shorter than 1 µs


def test_gp301_real_bert_small_is_launch_bound():
    f = _gp301(shared_path(*TRACELENS, "h100", "gaunernst_bert-small-uncased__1016001.json.gz"))
    assert f is not None
    tiny, launch = f.evidence
    assert tiny.value >= 0.95  # SOURCES.md: 97% of the 60 kernels < 10 us
    assert tiny.extra["kernels"] == 60
    assert launch.extra["gpu_utilization"] < 0.1  # GPU ~7% busy


def test_gp301_real_b200_eager_is_launch_bound():
    f = _gp301(shared_path(*TRACELENS, "b200", "eager_trace.json.gz"))
    assert f is not None
    assert f.evidence[0].value > 0.7  # 76% of all kernels (84% of compute kernels) < 10 us
    assert f.evidence[1].extra["gpu_utilization"] < 0.2


def test_gp301_real_healthy_trace_is_not_launch_bound():
    path = shared_path(
        "hta", "HolisticTraceAnalysis", "tests", "data", "ns_resolution_trace",
        "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
    )
    assert _gp301(path) is None  # GPU ~97% busy


def test_gp301_location_is_the_users_line(tmp_path):
    tb = TraceBuilder(launch_us=6.0, gap_us=4.0)
    for _ in range(3):
        with tb.step(), tb.python("train.py", 42, "train_step"):
            for _ in range(100):
                with tb.op("aten::mul", input_types=["float", "float"]):
                    tb.kernel(KERNELS["elementwise"], us=2.0)
    f = _gp301(tb.write(tmp_path / "stack.json"))
    assert f is not None and f.location is not None
    assert (f.location.file, f.location.line) == ("train.py", 42)


def _small_host_bound_model(tmp_path, kernels: int = 8, kernel_us: float = 3.0):
    """A small model: a few tiny kernels per step, each launched after some Python work (host-bound)."""
    tb = TraceBuilder(launch_us=8.0, gap_us=4.0)
    for _ in range(6):
        with tb.step():
            for _ in range(kernels):
                with tb.op("aten::linear", input_types=["float", "float"]):
                    tb.kernel(KERNELS["elementwise"], us=kernel_us)
    return tb.write(tmp_path / f"small_{kernels}_{kernel_us:g}.json")


def test_gp301_bad_small_model_with_few_kernels_is_launch_bound(tmp_path):
    # 8 kernels per step: the old 20-kernels-per-step floor never called this launch-bound
    f = _gp301(_small_host_bound_model(tmp_path))
    assert f is not None
    tiny, launch = f.evidence
    assert tiny.extra["kernels_per_step"] == 8
    assert tiny.extra["median_kernel_us"] < tiny.extra["launch_interval_us"]
    assert launch.value >= 0.05
    assert "8 kernels per step" in f.message


def test_gp301_good_when_kernels_outlast_the_launch_cadence(tmp_path):
    # 9 µs kernels (tiny by the 10 µs threshold) launched every ~12 µs... but make them longer than the cadence
    tb = TraceBuilder(launch_us=2.0, gap_us=0.5)
    for _ in range(6):
        with tb.step():
            for _ in range(200):
                tb.kernel(KERNELS["elementwise"], us=9.0)
    path = tb.write(tmp_path / "queued_small.json")
    # the launch-gap and utilisation tests alone would report it
    assert _gp301(path, max_utilization=1.01, min_launch_share=0.0) is None


def test_gp301_good_one_slow_first_launch_is_not_launch_overhead():
    # MI250 toy training: 7 kernels per step, GPU 2% busy (Python-bound), and one hipLaunchKernel of 6.5 ms
    # (the kernel's module loaded on first use). Without the kernel-count floor that one call alone
    # made 71% of the step "launch overhead"; ordinary launches (5-12 µs) are ~1% of the step.
    path = shared_path("hta", "HolisticTraceAnalysis", "tests", "data", "amd_trace",
                       "mi250_minitoy_train_ROCm6_2_kineto.json.gz")
    assert _gp301(path) is None
    f = _gp301(path, max_launch_us=1e9, min_launch_share=0.0)
    assert f is not None and f.evidence[1].value > 0.5  # the one-off call is what made the figure
    small = _gp301(path, min_launch_share=0.0)
    assert small is not None and small.evidence[1].value < 0.03


def test_gp301_real_graph_replays_are_recognised():
    # HTA's trace_diff sample (V100): 6 steps, each replaying 2 CUDA graphs (cudaGraphLaunch) besides eager kernels
    from gpuprof.rules.kernels import launch_stats
    from gpuprof.trace.load import load_trace
    from gpuprof.trace.metrics import compute_metrics

    path = shared_path("hta", "HolisticTraceAnalysis", "tests", "data", "trace_diff", "test", "test.json.gz")
    m = compute_metrics(load_trace(str(path)))
    st = launch_stats(m, 10.0, 100.0)
    assert m.num_steps == 6 and st.graph_launches == 12
    assert st.graph_kernels == 4464  # kernels replayed from the graphs: left out of the launch figures
    assert len(st.kernels) == len(m.step_kernels) - st.graph_kernels

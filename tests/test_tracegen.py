"""The synthetic trace builder writes traces that load and keep their relations."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from gpuprof.trace.load import load_trace
from gpuprof.trace.model import (
    DTYPE_BF16,
    DTYPE_FLOAT,
    DTYPE_HALF,
    Trace,
    copy_kind,
    memory_totals,
    op_call_stack,
    op_dtypes,
)
from gpuprof.trace.vocab import step_number
from gpuprof_testing import KERNELS, NCCL_STREAM, TraceBuilder, gemm_kernel, simple_training, write_ranks

DIALECTS = ["modern", "2021"]


def _example(dialect: str, steps: int = 5) -> TraceBuilder:
    tb = TraceBuilder(device="NVIDIA A100-SXM4-80GB", cc=(8, 0), total_memory=80 << 30, dialect=dialect)
    for _ in range(steps):
        with tb.step():
            tb.dataloader(ms=20, single_process=True)
            tb.copy_h2d(nbytes=19267584, pageable=True, blocking=True)
            with tb.op("aten::conv2d", input_types=["float", "float"]):
                tb.kernel("volta_sgemm_128x64_nn", us=900)
            tb.cpu(ms=5)
            tb.sync_item(line=("train.py", 42))
            tb.optimizer(ms=3)
            tb.memory(alloc=1 << 20)
    return tb


def _load(tb: TraceBuilder, path: Path, compact: bool = False) -> Trace:
    return load_trace(tb.write(path, compact=compact))


def _steps(t: Trace) -> list:
    # 2021 traces record ProfilerStep#N as operators, modern ones as annotations
    return [e for e in t.annotations + t.ops if step_number(e.name) is not None]


@pytest.mark.parametrize("dialect", DIALECTS)
def test_example_loads_with_expected_counts(tmp_path: Path, dialect: str) -> None:
    t = _load(_example(dialect), tmp_path / "w.pt.trace.json.gz")
    steps = sorted(_steps(t), key=lambda e: e.ts)
    assert [step_number(s.name) for s in steps] == [0, 1, 2, 3, 4]
    assert len(t.kernels) == 5
    assert len(t.memcpys) == 10  # one HtoD batch copy + one DtoH .item() copy per step
    htod = [m for m in t.memcpys if copy_kind(m).direction == "HtoD"]
    assert all(m.nbytes == 19267584 and copy_kind(m).host_memory == "pageable" for m in htod)
    assert len(htod) == 5
    assert len(t.memory) == 5
    assert t.devices and t.devices[0].name == "NVIDIA A100-SXM4-80GB"
    assert t.devices[0].compute_capability == (8, 0)
    assert t.devices[0].total_memory == 80 << 30
    syncs = [r for r in t.runtime if r.name == "cudaStreamSynchronize"]
    assert len(syncs) == 10
    if dialect == "modern":
        assert len(t.gpu_syncs) == 10
        assert t.with_stack and t.profile_memory
        assert memory_totals(t.memory[-1]) == (5 << 20, 6 << 20)  # running Total Allocated / Reserved
    else:
        assert t.gpu_syncs == []  # 2021 Kineto had no cuda_sync events
        assert all(isinstance(e.tid, str) for e in t.ops + t.runtime + t.kernels)
        assert all(e.tid == "stream 7" for e in t.kernels)
        assert memory_totals(t.memory[-1]) is None  # 2021 [memory] events carry only Bytes


@pytest.mark.parametrize("dialect", DIALECTS)
def test_correlation_links_launch_and_gpu_work(tmp_path: Path, dialect: str) -> None:
    t = _load(_example(dialect), tmp_path / "w.json")
    by_corr = {r.corr: r for r in t.runtime}
    assert len(by_corr) == len(t.runtime)  # correlation ids are unique
    ops_by_ext = {o.ext: o for o in t.ops}
    for g in t.kernels + t.memcpys:
        rt = by_corr[g.corr]
        assert rt.name == ("cudaLaunchKernel" if g in t.kernels else "cudaMemcpyAsync")
        assert g.ts >= rt.ts  # GPU work never starts before its launch
        assert g.ext == rt.ext and g.ext > 0
        op = ops_by_ext[g.ext]  # the operator that launched it encloses the launch
        assert op.ts <= rt.ts and rt.end <= op.end
    conv = [ops_by_ext[k.ext] for k in t.kernels if ops_by_ext[k.ext].name == "aten::conv2d"]
    assert len(conv) == 5
    for op in conv:  # dtype flags (2021 ops carry (flags, call stack) when a stack was open)
        flags = op_dtypes(op)
        assert flags == DTYPE_FLOAT


@pytest.mark.parametrize("dialect", DIALECTS)
def test_gpu_work_inside_step_windows_and_streams_serialise(tmp_path: Path, dialect: str) -> None:
    t = _load(_example(dialect), tmp_path / "w.json")
    steps = sorted(_steps(t), key=lambda e: e.ts)
    for s, nxt in zip(steps, steps[1:]):
        assert s.end <= nxt.ts  # steps do not overlap
    gpu = sorted(t.kernels + t.memcpys, key=lambda e: e.ts)
    for g in gpu:
        # every step ends with .item(), so all GPU work of a step ends inside it
        assert any(s.ts <= g.ts and g.end <= s.end for s in steps), g
    for a, b in zip(gpu, gpu[1:]):
        assert a.end <= b.ts + 1e-6  # one stream: no overlap
    # the host waits in .item(): the sync ends no earlier than the last GPU work before it
    for sync in (r for r in t.runtime if r.name == "cudaStreamSynchronize"):
        before = [g for g in gpu if g.ts < sync.ts]
        assert sync.end >= max(g.end for g in before) - 1e-6


def test_python_frames_and_call_stacks(tmp_path: Path) -> None:
    t = _load(_example("modern"), tmp_path / "m.json")
    frames = [p for p in t.python if p.name == "train.py(42): train_step"]
    items = [o for o in t.ops if o.name == "aten::item"]
    assert len(frames) == 5 and len(items) == 5
    for f, it in zip(sorted(frames, key=lambda e: e.ts), sorted(items, key=lambda e: e.ts)):
        assert f.ts <= it.ts and it.end <= f.end
    lsd = [o for o in t.ops if o.name == "aten::_local_scalar_dense"]
    assert len(lsd) == 5
    t21 = _load(_example("2021"), tmp_path / "o.json")
    item21 = [o for o in t21.ops if o.name == "aten::item"]
    assert item21 and all(op_call_stack(o) == "train.py(42): train_step" for o in item21)


def test_compact_gzip_and_kineto_layout_load_the_same(tmp_path: Path) -> None:
    tb = _example("modern")
    a = _load(tb, tmp_path / "a.json")
    b = _load(tb, tmp_path / "b.json.gz", compact=True)
    assert a.num_events == b.num_events
    for (k, la), lb in zip(a.lists().items(), b.lists().values()):
        assert [(e.name, e.ts, e.dur) for e in la] == [(e.name, e.ts, e.dur) for e in lb], k
    with gzip.open(tmp_path / "b.json.gz", "rt") as fh:
        top = json.load(fh)
    assert list(top)[-1] == "traceName"  # a key after traceEvents, as Kineto writes
    assert top["baseTimeNanoseconds"] > 0


def test_launch_bound_knob(tmp_path: Path) -> None:
    def busy_fraction(launch_us: float, gap_us: float, kernel_us: float) -> float:
        tb = TraceBuilder(launch_us=launch_us, gap_us=gap_us)
        with tb.step():
            with tb.op("aten::add"):
                tb.kernels(KERNELS["elementwise"], n=200, us=kernel_us)
        t = _load(tb, tmp_path / f"l{launch_us}_{kernel_us}.json")
        span = max(k.end for k in t.kernels) - min(k.ts for k in t.kernels)
        return sum(k.dur for k in t.kernels) / span

    assert busy_fraction(launch_us=8.0, gap_us=4.0, kernel_us=2.0) < 0.25  # GPU starved by launches
    assert busy_fraction(launch_us=8.0, gap_us=4.0, kernel_us=200.0) > 0.95  # GPU queue never empties


def test_full_launch_queue_blocks_the_host(tmp_path: Path) -> None:
    tb = TraceBuilder(max_queue=4)
    with tb.op("aten::mm"):
        for _ in range(10):
            tb.kernel(KERNELS["sgemm_ampere"], us=200.0)
    t = _load(tb, tmp_path / "q.json")
    ks = sorted(t.kernels, key=lambda e: e.ts)
    launches = sorted((r for r in t.runtime if r.name == "cudaLaunchKernel"), key=lambda e: e.ts)
    # the 10th launch can only return once the 6th kernel has finished
    assert launches[-1].end >= ks[5].end
    assert launches[0].dur < 10 and launches[-1].dur > 100


def test_cpu_only_and_gpu_without_activity(tmp_path: Path) -> None:
    tb = TraceBuilder(device=None)
    simple_training(tb, steps=3)
    with pytest.raises(ValueError, match="CPU-only"):
        tb.kernel("k")
    t = _load(tb, tmp_path / "cpu.json")
    assert t.devices == [] and not t.has_gpu_activity and len(_steps(t)) == 3
    top = json.loads((tmp_path / "cpu.json").read_text())
    assert top["deviceProperties"] == []

    idle = TraceBuilder(device="NVIDIA H100 80GB HBM3", cc=(9, 0))
    with idle.step():
        idle.cpu(ms=2)
    t2 = _load(idle, tmp_path / "idle.json")
    assert len(t2.devices) == 1 and not t2.has_gpu_activity

    noprops = TraceBuilder(device_properties=False, dialect="2021")
    simple_training(noprops, steps=2)
    t3 = _load(noprops, tmp_path / "noprops.json")
    assert t3.devices == [] and t3.has_gpu_activity


def test_warmup_steps_are_slower(tmp_path: Path) -> None:
    tb = simple_training(TraceBuilder(), steps=7, warmup_steps=2, warmup_factor=5.0)
    t = _load(tb, tmp_path / "w.json")
    durs = [s.dur for s in sorted(_steps(t), key=lambda e: e.ts)]
    # step 2 runs ahead into an empty launch queue; from step 4 on the loop is GPU-paced
    assert min(durs[:2]) > 3 * max(durs[2:])
    assert max(durs[4:]) < 1.05 * min(durs[4:])
    gpu_per_step = 3 * 8 * 400.0
    assert gpu_per_step <= min(durs[4:]) < 1.2 * gpu_per_step
    assert sum(1 for r in t.runtime if r.name == "cudaMalloc") == 2
    # healthy steps keep the GPU busy: kernels cover most of the step
    last = sorted(_steps(t), key=lambda e: e.ts)[-1]
    busy = sum(k.dur for k in t.kernels if last.ts <= k.ts < last.end)
    assert busy / last.dur > 0.8


def test_precision_kernels_by_architecture(tmp_path: Path) -> None:
    assert "s16816gemm" in gemm_kernel("half", (8, 0))
    assert gemm_kernel("bfloat16", (9, 0)).startswith("sm90_xmma_gemm_bf16")
    assert gemm_kernel("float", (7, 0)) == "volta_sgemm_128x64_nn"
    tb = TraceBuilder(device="NVIDIA H100 80GB HBM3", cc=(9, 0))
    with tb.step():
        tb.gemm("bfloat16", us=50)
        tb.gemm("float", us=50)
    t = _load(tb, tmp_path / "p.json")
    mm = sorted((o for o in t.ops if o.name == "aten::mm"), key=lambda e: e.ts)
    assert [op_dtypes(o) for o in mm] == [DTYPE_HALF | DTYPE_BF16, DTYPE_FLOAT]  # bfloat16: 16-bit, and which one
    assert t.kernels[0].name.startswith("sm90_xmma_gemm_bf16") and "sgemm" in t.kernels[1].name


def test_nccl_data_parallel_and_multi_rank(tmp_path: Path) -> None:
    def body(tb: TraceBuilder, rank: int) -> None:
        with tb.step():
            tb.gemm(us=300)
            tb.nccl("AllReduce", us=800)
            tb.device_synchronize()

    paths = write_ranks(tmp_path / "job", 2, body)
    for r, p in enumerate(paths):
        t = load_trace(p)
        assert (t.rank, t.world_size) == (r, 2)
        nccl = [k for k in t.kernels if k.name.startswith("ncclKernel_AllReduce")]
        gemm = [k for k in t.kernels if "sgemm" in k.name]
        assert len(nccl) == 1 and nccl[0].stream == NCCL_STREAM
        assert nccl[0].ts >= gemm[0].end  # the collective waits for the compute stream
        dsync = [r_ for r_ in t.runtime if r_.name == "cudaDeviceSynchronize"]
        assert dsync[0].end >= nccl[0].end
        assert any(a.name == "nccl:all_reduce" for a in t.annotations)

    tb = TraceBuilder(num_devices=2)
    with tb.step():
        tb.data_parallel(devices=2)
    t = _load(tb, tmp_path / "dp.json")
    assert any(a.name == "DataParallel.forward" for a in t.annotations)
    assert any(p.name == "nn.Module: DataParallel_0" for p in t.python)
    assert any("torch/nn/parallel/" in p.name for p in t.python)
    assert {k.device for k in t.kernels} == {0, 1}
    assert {k.tid for k in t.ops if k.name == "aten::linear"} == {tb.main_tid + 1000, tb.main_tid + 1001}
    assert any(copy_kind(m).direction == "PtoP" for m in t.memcpys)


def test_memset_malloc_free_and_gpu_annotations(tmp_path: Path) -> None:
    tb = TraceBuilder(gpu_annotations=True)
    with tb.step():
        with tb.op("aten::zero_"):
            tb.memset(nbytes=1 << 20, us=30)
        tb.cuda_malloc(nbytes=1 << 30, us=400)
        with tb.op("aten::mm"):
            tb.kernel(KERNELS["sgemm_ampere"], us=1000)
        tb.cuda_free(us=100)
    t = _load(tb, tmp_path / "m.json")
    assert len(t.memsets) == 1 and t.memsets[0].nbytes == 1 << 20
    free = next(r for r in t.runtime if r.name == "cudaFree")
    assert free.end >= t.kernels[0].end  # cudaFree waits for the device
    assert any(r.name == "cudaMalloc" and r.dur >= 400 for r in t.runtime)
    ga = [g for g in t.gpu_annotations if g.name == "ProfilerStep#0"]
    assert len(ga) == 1 and ga[0].ts <= t.memsets[0].ts and t.kernels[0].end <= ga[0].end + 1e-6


def test_hip_runtime_names(tmp_path: Path) -> None:
    tb = TraceBuilder(device="AMD Instinct MI300X", cc=(9, 4), hip=True)
    with tb.step():
        with tb.op("aten::mm"):
            tb.kernel("Cijk_Ailk_Bljk_SB_MT64x64x16", us=50)
        tb.stream_synchronize()
    t = _load(tb, tmp_path / "hip.json")
    assert {r.name for r in t.runtime} == {"hipLaunchKernel", "hipStreamSynchronize"}
    assert t.devices[0].vendor == "amd"

"""Shared fixtures for the renderer tests: a representative report with every field set."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gpuprof.findings import EventRef, Evidence, Finding, Link, Severity, SourceLocation
from gpuprof.report import (
    CopyStat,
    CriticalPart,
    CriticalPath,
    DeviceInfo,
    JobPhase,
    JobSamples,
    JobSeries,
    JobSummary,
    JobWindow,
    KernelStat,
    OpStat,
    Report,
    SyncStat,
    TraceSummary,
)
from gpuprof.trace.timelinerows import Timeline, TimelineLane, TimelineMarker, TimelineStep
from gpuprof.trace.viewrows import KernelRow, Mfu, ModuleMfu, OperatorRow, RangeRow, TraceViews
from gpuprof_testing.realtraces import shared_path


def shared_trace(rel: str) -> Path:
    """A real trace from the shared read-only corpus, or skip the test when it is absent."""
    return shared_path(*rel.split("/"))


@dataclass
class DemoSection:
    """A report section of a kind only the tests know (registered per test)."""

    kind: str
    rows: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"rows": list(self.rows)}


def make_trace_summary(path: str = "run/worker0.pt.trace.json.gz") -> TraceSummary:
    step = 84_312.5
    breakdown = {
        "kernel": 41_250.0,
        "memcpy": 6_120.5,
        "memset": 310.0,
        "communication": 4_800.0,
        "runtime": 2_430.0,
        "data_loading": 21_900.0,
        "cpu_exec": 6_002.0,
        "other": 1_500.0,
    }
    idle = {
        "data_loading": 21_900.0,
        "sync": 3_480.25,
        "blocking_copy": 2_100.0,
        "runtime": 1_200.0,
        "optimizer": 950.0,
        "cpu_other": 2_731.0,
    }
    return TraceSummary(
        path=path,
        devices=[DeviceInfo(id=0, name="NVIDIA H100 80GB HBM3", compute_capability=(9, 0), total_memory=85_045_870_592, num_sms=132, vendor="nvidia")],
        has_gpu_activity=True,
        num_steps=5,
        step_ids=[3, 4, 5, 6, 9],
        step_time_us=step,
        step_time_mean_us=85_001.0,
        gpu_busy_us=52_480.5,
        gpu_utilization=52_480.5 / 85_001.0,
        breakdown_us=breakdown,
        idle_breakdown_us=idle,
        top_kernels=[
            KernelStat("void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>(Params)", 250, 98_765.0, 395.06, 0.4123),
            KernelStat("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)", 12_500, 31_000.0, 2.48, 0.1294),
            KernelStat("[weird] kernel | with pipes *and* _marks_", 3, 12.5, 4.1667, 0.0001),
        ],
        top_ops=[
            OpStat("aten::convolution", 265, 120_000.0, 4_000.0, 98_000.0),
            OpStat("aten::item", 50, 17_401.25, 17_100.0, 12.0),
        ],
        copies=[
            CopyStat("HtoD", "pageable", 25, 3_221_225_472, 30_600.0, 10.5),
            CopyStat("DtoH", "pinned", 50, 400, 151.0, None),
        ],
        syncs=[SyncStat("aten::item", "cudaStreamSynchronize", 50, 17_401.25, "train.py:88")],
        rank=1,
        world_size=4,
        num_events=1_234_567,
        file_bytes=98_765_432,
        notes=["2 steps were dropped as warm-up"],
        step_times_us=[100_000.0, 101_000.0],
        views=TraceViews(
            kernel_total_us=150_000.0, unattributed_gpu_us=0.0, peak_device="h100",
            operators=[OperatorRow("aten::mm", "[[64, 32], [32, 16]]", 2, 40.0, 30.0, 100.0, 100.0, ["train.py:12 (step)"])],
            kernels=[KernelRow("sm90_xmma_gemm_bf16", 2, 100.0, 50.0, 60.0, True, "bf16", "bf16", 65536.0, "estimate",
                               0.000655, 6.6e-7, [1, 1, 1], [128, 1, 1], 96, 0.5)],
            modules=[RangeRow("Model_0/Linear_1", 2, 80.0, 100.0, 100.0, 0.25, 0.6)],
            ranges=[RangeRow("forward", 2, 90.0, 100.0, 100.0, 0.25, 0.6)],
            rest={"operators": {"rows": 1.0, "calls": 3.0}},
        ),
        mfu=Mfu(value=0.125, known_flops_share=0.6, no_peak_share=0.0, peak_source="h100", flops_per_step=1.2e12,
                flops_by_precision={"bf16": 1.2e12}, per_module=[ModuleMfu("Model_0/Linear_1", 100.0, 0.25, 0.6)]),
        comm_wait_us=1_500.0, comm_wait_source="ranks", gpu_working_utilization=0.5,
        critical_path=CriticalPath(85_001.0, [CriticalPart("kernel", "sm90_xmma_gemm_bf16", 52_000.0),
                                              CriticalPart("sync_wait", "cudaStreamSynchronize", 20_001.0),
                                              CriticalPart("operator", "<img src=x onerror=alert(1)>", 13_000.0)]),
        timeline=Timeline(
            origin_us=1_000_000.0, span_us=200_000.0, resolution_us=48.8, events_total=4, events_kept=3,
            left_out={"deep": 1}, names=["aten::item", "sm90_xmma_gemm_bf16"],
            lanes=[TimelineLane("host:1234:1234", "host", "main thread: thread 1234", [(100.0, 350.0, 0, 0, 0, 1)], 2),
                   TimelineLane("gpu:0:7", "gpu", "GPU 0 stream 7", [(10.0, 60.0, 1, 3, 0, 1), (80.0, 9.5, 1, 3, 0, 2)], 3)],
            steps=[TimelineStep(3, 0.0, 100_000.0), TimelineStep(4, 100_000.0, 200_000.0)], critical_step=0,
            critical=[("gpu:0:7", 10.0, 70.0, "kernel", "sm90_xmma_gemm_bf16", 1)],
            markers=[TimelineMarker("GP203", "host:1234:1234", 100.0, 450.0, "event")],
        ),
    )


def make_findings() -> list[Finding]:
    refs = (EventRef("aten::item", 1_000_100.0, 350.0, 1234, 1234), EventRef("aten::item", 1_090_100.0, 348.5, 1234, 1234))
    return [
        Finding(
            code="GP203",
            name="host-sync-item",
            severity=Severity.WARNING,
            message="aten::item() blocks the host 10 times per step for 3.48 ms",
            advice="Keep the value on the GPU, or read it every N steps.",
            evidence=(Evidence("sync_time_per_step", 3_480.25, 1_000.0, "us", refs, {"calls_per_step": 10}),),
            cost_us_per_step=3_480.25,
            cost_share=3_480.25 / 85_001.0,
            location=SourceLocation("train.py", 88, "train_step"),
            origin="trace",
            source="run/worker0.pt.trace.json.gz",
        ),
        Finding(
            code="GP102",
            name="dataloader-single-process",
            severity=Severity.ERROR,
            message="Data loading takes 25.8% of each step [num_workers=0]",
            advice="Set DataLoader(num_workers=4, pin_memory=True).",
            evidence=(
                Evidence("data_loading_share", 0.2576, 0.1, "fraction", (EventRef("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 2_000_000.0, 21_900.0, 1234, 1234),)),
                Evidence("num_workers", 0, None, ""),
            ),
            cost_us_per_step=21_900.0,
            cost_share=21_900.0 / 85_001.0,
            location=SourceLocation("train.py", 61),
            source="run/worker0.pt.trace.json.gz",
            links=(Link("supersedes", "GP601", count=1),),
        ),
        Finding(
            code="GP901",
            name="few-steps",
            severity=Severity.INFO,
            message="Only 5 steps were profiled",
            advice="Profile at least 10 active steps.",
            evidence=(Evidence("num_steps", 5, 10, "steps"),),
            source="run/worker0.pt.trace.json.gz",
        ),
    ]


def make_job() -> JobSummary:
    """A watched job with every optional object filled (a GPU run: NVML columns, CUDA memory)."""
    return JobSummary(
        steps=300,
        phases=[JobPhase("warmup", 0, 1, 250_000.0, 2, 40_000.0, 460_000.0, 500_000.0, 0.02),
                JobPhase("steady", 2, 149, 5_000.0, 148, 4_800.0, 5_400.0, 9_000.0, 0.05),
                JobPhase("slowdown", 150, 299, 10_000.0, 150, 9_700.0, 10_600.0, 15_000.0, 0.5)],
        series=JobSeries(bucket=100, first_step=[0, 100, 200], step_time_us=[5_000.0, 5_100.0, 10_000.0],
                         step_time_min_us=[4_800.0, 4_900.0, 9_700.0], step_time_max_us=[500_000.0, 9_000.0, 15_000.0],
                         data_wait_us=[200.0, 250.0, 5_000.0], cuda_allocated_mib=[512.0, 512.0, 513.0],
                         cuda_reserved_mib=[1024.0, 1024.0, 1024.0], cuda_peak_mib=[900.0, 900.0, 901.0]),
        samples=JobSamples(interval_s=1.0, step=[100, 200, 300], process_cpu_pct=[105.0, 98.0, 60.0],
                           workers_cpu_pct=[380.0, 390.0, 395.0], workers_demand_pct=[400.0, 400.0, 400.0],
                           workers=[4, 4, 4], gpu_util_pct=[95.0, 93.0, 48.0],
                           gpu_memory_used_mib=[2048.0, 2048.0, 2050.0], gpu_sm_clock_mhz=[1980.0, 1980.0, 1410.0],
                           gpu_power_w=[310.5, 305.0, 180.0], gpu_throttle_reasons=[0, 0, 4]),
        cores=8,
        h2d_copy_us=None,
        windows=[JobWindow(7, 5, "default"), JobWindow(156, 5, "anomaly")],
    )


def make_report() -> Report:
    return Report(
        command="analyze",
        inputs=["run/"],
        traces=[make_trace_summary()],
        sections=[DemoSection("render-test-demo", [{"a": 1}])],
        findings=make_findings(),
        notes=["1 trace analysed"],
        job=make_job(),
    )


@pytest.fixture
def report() -> Report:
    return make_report()

"""The report's views: operators, kernels, modules and ranges (docs/views.md)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from gpuprof.analysis import analyze
from gpuprof.trace.flops import estimate_flops
from gpuprof.trace.peaks import device_row, peak_for
from gpuprof.trace.precision import kernel_precision
from gpuprof_testing.realtraces import shared_path, v100_samples


def test_real_gpu_trace_views_add_up_to_the_kernel_total() -> None:
    report = analyze(str(v100_samples()[0]))
    v = json.loads(json.dumps(report.to_dict()))["traces"][0]["views"]
    total = v["kernel_total_us"]
    assert total > 0
    ops = sum(r["gpu_self_us"] for r in v["operators"]) + v["rest"].get("operators", {}).get("gpu_self_us", 0.0)
    assert abs(ops + v["unattributed_gpu_us"] - total) <= 0.01 * total
    assert v["unattributed_gpu_us"] < 0.01 * total
    kernels = sum(r["total_us"] for r in v["kernels"]) + v["rest"].get("kernels", {}).get("total_us", 0.0)
    assert kernels == pytest.approx(total)
    # grouped by name and input shapes: one operator name appears with several shapes
    conv = [r for r in v["operators"] if r["name"] == "aten::cudnn_convolution"]
    assert len(conv) > 5 and len({r["input_shapes"] for r in conv}) == len(conv)
    assert v["peak_device"] == "v100"
    sgemm = next(r for r in v["kernels"] if r["name"] == "volta_sgemm_64x64_nt")
    assert sgemm["precision"] == "fp32" and sgemm["tensor_cores"] is False and sgemm["op_dtype"] == "fp32"
    # the fc layer's matmuls: 6 steps x 2*32*2048*1000 FLOPs (aten::mm / addmm input dims), on their GEMM kernels only
    with_flops = {r["name"]: r for r in v["kernels"] if r["flops"]}
    fc = with_flops["volta_sgemm_64x32_sliced1x4_nn"]
    assert fc["flops"] == pytest.approx(6 * 2 * 32 * 2048 * 1000) and fc["flops_source"] == "estimate"
    assert fc["tflops"] == pytest.approx(fc["flops"] / fc["total_us"] / 1e6)
    assert fc["mfu"] == pytest.approx(fc["tflops"] / 15.7)  # V100 FP32 peak
    assert all("elementwise" not in n for n in with_flops)  # the bias kernel of addmm does no matmul FLOPs


@pytest.mark.slow  # reads a real V100 trace whole (about 2 s)
def test_launch_configuration_is_that_of_the_longest_launch() -> None:
    import gzip

    path = v100_samples()[0]
    with gzip.open(path, "rt") as fh:
        raw = [e for e in json.load(fh)["traceEvents"] if e.get("cat") == "Kernel"]
    rows = analyze(str(path)).traces[0].views.kernels  # type: ignore[union-attr]
    for row in rows[:5]:
        longest = max((e for e in raw if e["name"] == row.name), key=lambda e: e["dur"])
        a = longest["args"]
        assert (row.grid, row.block, row.registers_per_thread) == (a["grid"], a["block"], a["registers per thread"])
        occ = a["est. achieved occupancy %"]
        assert row.occupancy == (pytest.approx(occ / 100) if occ > 0 else None)  # Kineto's 0: no estimate


def test_kinetos_occupancy_0_is_no_measurement() -> None:
    import gzip

    path = shared_path("hta", "TraceLens", "tests", "traces", "h100", "Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz")
    with gzip.open(path, "rt") as fh:
        raw = [e for e in json.load(fh)["traceEvents"] if e.get("cat") == "kernel"]
    zero = {e["name"] for e in raw if e["args"].get("est. achieved occupancy %") == 0}
    assert zero  # the trace has such kernels: the test can fail
    rows = {r.name: r for r in analyze(str(path)).traces[0].views.kernels}  # type: ignore[union-attr]
    longest: dict[str, dict[str, Any]] = {}
    for e in raw:
        if e["name"] not in longest or e["dur"] > longest[e["name"]]["dur"]:
            longest[e["name"]] = e
    checked = 0
    for name, row in rows.items():
        occ = longest[name]["args"].get("est. achieved occupancy %")
        if occ == 0:
            assert row.occupancy is None
            checked += 1
        elif occ is not None:
            assert row.occupancy == pytest.approx(occ / 100)
    assert checked


def test_cpu_capture_has_the_four_views(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile, record_function

    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 8))
    x = torch.randn(32, 64)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_stack=True, with_modules=True) as prof:
        for _ in range(3):
            with record_function("train_step"):
                model(x).sum().backward()
    path = tmp_path / "cpu.pt.trace.json"
    prof.export_chrome_trace(str(path))
    v = analyze(str(path)).to_dict()["traces"][0]["views"]
    assert {"operators", "kernels", "modules", "ranges"} <= set(v)
    linear = [r for r in v["operators"] if r["name"] == "aten::linear"]
    assert {r["input_shapes"] for r in linear} >= {"[[32, 64], [128, 64], [128]]", "[[32, 128], [8, 128], [8]]"}
    assert all(r["calls"] == 3 and r["cpu_total_us"] > 0 for r in linear)
    assert any(r["stacks"] for r in v["operators"])  # with_stack: user source lines
    steps = [r for r in v["ranges"] if r["name"] == "train_step"]
    assert steps and steps[0]["calls"] == 3 and steps[0]["cpu_total_us"] > 0
    paths = [r["name"] for r in v["modules"]]
    assert any(p.startswith("Sequential") and "/Linear" in p for p in paths), paths
    assert v["kernels"] == [] and v["kernel_total_us"] == 0.0  # a CPU trace: no kernels, and no invented GPU time


def test_flops_estimates_and_peaks() -> None:
    assert estimate_flops("aten::mm", "[[64, 32], [32, 16]]") == 2 * 64 * 32 * 16
    assert estimate_flops("aten::addmm", "[[16], [64, 32], [32, 16], [], []]") == 2 * 64 * 32 * 16
    assert estimate_flops("aten::linear", "[[8, 4, 32], [16, 32], [16]]") == 2 * 8 * 4 * 32 * 16
    assert estimate_flops("aten::bmm", "[[2, 64, 32], [2, 32, 16]]") == 2 * 2 * 64 * 32 * 16
    assert estimate_flops("aten::mm", "[[64, 32], [31, 16]]") is None  # shapes that do not multiply
    assert estimate_flops("aten::cudnn_convolution", "[[32, 3, 224, 224], [64, 3, 7, 7]]") is None
    assert device_row("NVIDIA H100 80GB HBM3", (9, 0)) == "h100"
    assert device_row("NVIDIA A100-SXM4-40GB", (8, 0)) == "a100"
    assert device_row("NVIDIA A10G", (8, 6)) == "a10g"
    assert device_row("", (8, 0)) == "a100"
    assert peak_for("v100", "bf16") is None and peak_for("h100", "fp8") == pytest.approx(1978.9)


def test_float64_gemm_is_fp64_not_fp32() -> None:
    assert kernel_precision("void gemm_kernel<double, 64>(...)", "fp64", None) == "fp64"
    assert kernel_precision("volta_dgemm_128x64_nn", None, False) == "fp64"
    assert kernel_precision("ampere_sgemm_64x64_nn", "fp32", False) == "fp32"
    assert kernel_precision("sm80_xmma_gemm_f32f32_tf32f32_f32_nn", "fp32", True) == "tf32"


@pytest.mark.parametrize(
    ("name", "cc", "row"),
    [
        ("NVIDIA GeForce RTX 2080 Ti", (7, 5), None),  # same compute capability as a T4, other peaks: unknown
        ("NVIDIA RTX A6000", (8, 6), None),
        ("", (7, 5), "t4"),  # no name at all: the compute capability's datacenter part
        ("Tesla T4", (7, 5), "t4"),
        ("NVIDIA H100 80GB HBM3", (9, 0), "h100"),
    ],
)
def test_an_unknown_gpu_gets_no_peak(name: str, cc: tuple[int, int], row: str | None) -> None:
    assert device_row(name, cc) == row
    assert (peak_for(device_row(name, cc), "fp16") is None) == (row is None)


def test_nested_same_name_operators_count_their_gpu_time_once(tmp_path: Path) -> None:
    from gpuprof_testing.tracegen import TraceBuilder

    tb = TraceBuilder()
    for _ in range(3):
        with tb.step():
            with tb.op("aten::linear", ["float", "float"], us=50), tb.op("aten::linear", ["float", "float"], us=40):
                tb.kernel("ampere_sgemm_64x64_nn", us=100.0)
    path = tb.write(tmp_path / "t.json")
    v = json.loads(json.dumps(analyze(str(path)).to_dict()))["traces"][0]["views"]
    lin = [r for r in v["operators"] if r["name"] == "aten::linear"]
    assert sum(r["calls"] for r in lin) == 6  # both levels are calls
    # 3 kernels of 100 µs: the inner calls' kernels are in the outer calls' totals, not counted again
    assert sum(r["gpu_total_us"] for r in lin) == pytest.approx(300.0)
    assert sum(r["gpu_total_us"] for r in lin) <= v["kernel_total_us"] + 1e-6


@pytest.mark.slow  # counts every call of a real V100 trace twice over (about 2 s each)
@pytest.mark.parametrize("folder", ["resnet50_num_workers_0", "resnet50_num_workers_4"])
def test_every_operator_call_is_counted_zero_length_ones_included(folder: str) -> None:
    import gzip

    from gpuprof.trace.vocab import step_number

    path = next(p for p in v100_samples() if p.parent.name == folder)
    with gzip.open(path, "rt") as fh:
        raw = Counter(e["name"] for e in json.load(fh)["traceEvents"]
                      if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "Operator") and step_number(e["name"]) is None)
    zero_length = 0
    with gzip.open(path, "rt") as fh:
        zero_length = sum(1 for e in json.load(fh)["traceEvents"]
                          if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "Operator") and not e.get("dur"))
    assert zero_length > 0  # the trace has 0 µs calls: the test can fail
    v = json.loads(json.dumps(analyze(str(path)).to_dict()))["traces"][0]["views"]
    shown = Counter()
    for r in v["operators"]:
        shown[r["name"]] += r["calls"]
    assert sum(shown.values()) + v["rest"].get("operators", {}).get("calls", 0) == sum(raw.values())
    assert all(shown[name] <= raw[name] for name in shown)  # no call counted twice (the rest: rows past the cap)


def test_shapes_written_over_several_lines_read_as_one_line_in_every_view(tmp_path: Path) -> None:
    from gpuprof.render.markdown import render_markdown
    from gpuprof.render.terminal import render_terminal
    from gpuprof_testing.tracegen import TraceBuilder

    tb = TraceBuilder(record_shapes=True)
    for _ in range(4):
        with tb.step():
            with tb.op("aten::mm", ["float", "float"], [[64, 32], [32, 16]], us=50):
                tb.kernel("ampere_sgemm_64x64_nn", us=100.0)
    text = tb.to_bytes().decode()
    one_line = '"Input Dims": [[64, 32], [32, 16]]'
    assert text.count(one_line) == 4
    # an exporter that pretty-prints: two of the four calls' shapes over several indented lines
    text = text.replace(one_line, '"Input Dims": [\n  [\n    64,\n    32\n  ],\n  [32,\t16]\n]', 2)
    path = tmp_path / "pretty.json"
    path.write_text(text)
    report = analyze(str(path))
    rows = [r for r in report.traces[0].views.operators if r.name == "aten::mm"]  # type: ignore[union-attr]
    assert [(r.input_shapes, r.calls) for r in rows] == [("[[64, 32], [32, 16]]", 4)]  # one row, one line
    for out in (render_terminal(report), render_markdown(report)):
        assert "\\x0a" not in out and "[[64, 32], [32, 16]]" in out

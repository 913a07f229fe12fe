"""FLOPs in the operator and kernel views: recorded (``kernel_flop``) and estimated (docs/views.md).

The estimates are checked against torch's own figures on real captures made
here (``with_flops=True``'s ``key_averages()``, ``torch.utils.flop_counter``)
and on a real shared H100 trace annotated by torch's trace augmenter.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from gpuprof.analysis import analyze
from gpuprof.trace.flops import estimate_flops
from gpuprof.trace.load import load_trace
from gpuprof.trace.model import op_concrete_inputs, op_flops, op_shape_key
from gpuprof.trace.peaks import PEAKS, PRECISIONS, device_row, peak_for
from gpuprof_testing.realtraces import shared_path
from gpuprof_testing.tracegen import TraceBuilder

H100_CONV = ("hta", "TraceLens", "tests", "traces", "h100", "Falconsai_nsfw_image_detection__1016002.json.gz")


def _views(path: Path | str) -> dict[str, Any]:
    return analyze(str(path)).to_dict()["traces"][0]["views"]  # type: ignore[no-any-return]


def _shape(text: str | None) -> str:
    return json.dumps(json.loads(text)) if text else ""


# --------------------------------------------------------------------------- real CPU captures
def test_conv_and_matmul_estimates_equal_torch_with_flops(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, stride=2, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(8, 4, (3, 5), stride=(1, 2), padding=(2, 0), dilation=(2, 1), groups=2),
        torch.nn.Flatten(), torch.nn.Linear(64, 10),
    )
    x = torch.randn(2, 3, 16, 16)
    with profile(activities=[ProfilerActivity.CPU], with_flops=True, record_shapes=True) as prof:
        model(x).sum().backward()
    path = tmp_path / "flops.pt.trace.json"
    prof.export_chrome_trace(str(path))
    # torch's with_flops figures live in the profiler object only: the exported trace carries none per operator
    # (docs/views.md says so; if a torch release starts writing them, this fails and the loader should read them)
    events = json.loads(path.read_text())["traceEvents"]
    assert not any("flops" in k.lower() for e in events for k in e.get("args", {}))
    theirs: dict[tuple[str, str], float] = {}
    for e in prof.key_averages(group_by_input_shape=True):
        if e.flops:
            key = (e.key, json.dumps(e.input_shapes))
            theirs[key] = theirs.get(key, 0.0) + e.flops
    assert {k[0] for k in theirs} == {"aten::conv2d", "aten::addmm", "aten::mm"}
    rows = {(r["name"], _shape(r["input_shapes"])): r for r in _views(path)["operators"]}
    for key, flops in theirs.items():
        assert rows[key]["flops"] == pytest.approx(flops, rel=1e-9), key
        assert rows[key]["flops_source"] == "estimate" and rows[key]["tflops"] is None  # no GPU time: no rate
    # the nested convolution operators carry the same figure; the backward once per gradient it computes:
    # the first layer's input needs none (x does not require grad), so only grad_weight there
    convs = sorted(v for k, v in theirs.items() if k[0] == "aten::conv2d")
    for name in ("aten::convolution", "aten::_convolution", "aten::mkldnn_convolution"):
        assert sorted(r["flops"] for k, r in rows.items() if k[0] == name) == pytest.approx(convs)
    first = theirs[("aten::conv2d", "[[2, 3, 16, 16], [8, 3, 3, 3], [8], [], [], [], []]")]
    second = theirs[("aten::conv2d", "[[2, 8, 8, 8], [4, 4, 3, 5], [4], [], [], [], []]")]
    backward = sorted(r["flops"] for k, r in rows.items() if k[0] == "aten::convolution_backward")
    assert backward == pytest.approx(sorted([first, 2 * second]))
    assert all(r["flops"] is None for k, r in rows.items() if k[0] in ("aten::relu", "aten::sum"))


def test_conv_variants_equal_torch_flop_counter(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F
    from torch.profiler import ProfilerActivity, profile
    from torch.utils.flop_counter import FlopCounterMode

    g = torch.Generator().manual_seed(0)
    x1, w1 = torch.randn(2, 3, 20, generator=g), torch.randn(5, 3, 4, generator=g)
    x3, w3 = torch.randn(1, 2, 6, 7, 8, generator=g), torch.randn(4, 2, 3, 2, 3, generator=g)
    x2, wt = torch.randn(2, 3, 10, 10, generator=g), torch.randn(3, 4, 3, 3, generator=g)
    wg = torch.randn(6, 1, 3, 3, generator=g)
    xb = torch.randn(2, 3, 12, 12, generator=g, requires_grad=True)
    wb = torch.randn(4, 3, 3, 3, generator=g, requires_grad=True)

    def run() -> None:
        F.conv1d(x1, w1, stride=3)
        F.conv3d(x3, w3, stride=(1, 2, 2), padding=(1, 0, 1), dilation=(2, 1, 1))
        F.conv_transpose2d(x2, wt, stride=2, padding=1, output_padding=1)
        F.conv2d(x2, wg, stride=2, groups=3)
        F.conv2d(xb, wb, stride=2, padding=1).sum().backward()  # groups=1: flop_counter's backward is exact there

    with FlopCounterMode(display=False) as counter:
        run()
    counts = counter.get_flop_counts()["Global"]
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        run()
    path = tmp_path / "convs.pt.trace.json"
    prof.export_chrome_trace(str(path))
    ops = load_trace(path).ops
    ours: dict[str, float] = {}
    for o in ops:
        if o.name in ("aten::convolution", "aten::convolution_backward"):
            est = estimate_flops(o.name, op_shape_key(o), op_concrete_inputs(o))
            assert est is not None, (o.name, op_shape_key(o), op_concrete_inputs(o))
            ours[o.name] = ours.get(o.name, 0.0) + est
    assert ours["aten::convolution"] == pytest.approx(counts[torch.ops.aten.convolution])
    assert ours["aten::convolution_backward"] == pytest.approx(counts[torch.ops.aten.convolution_backward])
    # conv_transpose2d and conv1d/conv3d are estimated by their own names too
    for o in ops:
        if o.name in ("aten::conv1d", "aten::conv3d", "aten::conv_transpose2d"):
            assert estimate_flops(o.name, op_shape_key(o), op_concrete_inputs(o)) is not None, o.name


def test_padding_same_is_not_guessed(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        F.conv2d(torch.randn(2, 3, 10, 10), torch.randn(4, 3, 3, 3), padding="same")
    path = tmp_path / "same.pt.trace.json"
    prof.export_chrome_trace(str(path))
    rows = {r["name"]: r for r in _views(path)["operators"]}
    assert rows["aten::conv2d"]["flops"] is None  # torch records padding="same" as '': the output size is unknown
    assert rows["aten::convolution"]["flops"] == 2 * 2 * 4 * 10 * 10 * 3 * 9  # which resolves it to [1, 1]


def test_estimates_from_text() -> None:
    dims = "[[2, 3, 16, 16], [8, 3, 3, 3], [8], [], [], [], []]"
    assert estimate_flops("aten::conv2d", dims, '["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "1"]') == 55296
    assert estimate_flops("aten::conv2d", dims, None) is None  # no Concrete Inputs (torch < 2.1): no guess
    assert estimate_flops("aten::conv2d", dims, '["", "", "", "[2, 2]", "", "[1, 1]", "1"]') is None
    assert estimate_flops("aten::conv2d", dims, '["", "", "", "[0, 0]", "[1, 1]", "[1, 1]", "1"]') is None  # stride 0
    # cudnn_convolution has no bias and takes padding before stride; mkldnn takes padding before stride
    assert estimate_flops("aten::cudnn_convolution", "[[2, 3, 16, 16], [8, 3, 3, 3], [], [], [], [], [], [], []]",
                          '["", "", "[1, 1]", "[2, 2]", "[1, 1]", "1", "False", "False", "True"]') == 55296
    assert estimate_flops("aten::mkldnn_convolution", dims, '["", "", "", "[1, 1]", "[2, 2]", "[1, 1]", "1"]') == 55296
    assert estimate_flops("aten::conv1d", "[[2, 3, 20], [5, 3, 4], [], [], [], [], []]",
                          '["", "", "", "[3]", "[0]", "[1]", "1"]') == 2 * 2 * 5 * 6 * 3 * 4
    back = '["", "", "", "[8]", "[2, 2]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1", "[False, True, True]"]'
    assert estimate_flops("aten::convolution_backward", "[[2, 8, 8, 8], [2, 3, 16, 16], [8, 3, 3, 3], [], [], [], [],"
                          " [], [], [], []]", back) == 55296  # only grad_weight asked for
    for bad in ("[[2, 3, 16, 16]]", "[[2, 3, 16, 16], [8, 4, 3, 3]]", "not json", "[[1e400]]", "{}"):
        assert estimate_flops("aten::conv_transpose2d", bad, None) is None


# --------------------------------------------------------------------------- recorded FLOPs
def _triton_trace(tmp_path: Path, flop: Any) -> Path:
    """A Triton launch range (as torch.compile writes it) carrying ``kernel_flop``, and the kernel it launched."""
    tb = TraceBuilder("NVIDIA H100 80GB HBM3", (9, 0))
    with tb.step():
        with tb.op("triton_poi_fused_mul_0", input_types=["float", "float"]):
            tb.kernel("triton_poi_fused_mul_0", us=100.0)
        tb.gemm("float", us=50.0)
    doc = tb.to_dict()
    for e in doc["traceEvents"]:
        if e.get("cat") == "cpu_op" and e["name"] == "triton_poi_fused_mul_0":
            e["args"]["kernel_flop"] = flop
            e["args"]["kernel_backend"] = "triton"
    path = tmp_path / "triton.json"
    path.write_text(json.dumps(doc))
    return path


def test_recorded_kernel_flop_is_read_and_used(tmp_path: Path) -> None:
    path = _triton_trace(tmp_path, 4_000_000_000)
    triton = next(o for o in load_trace(path).ops if o.name == "triton_poi_fused_mul_0")
    assert op_flops(triton) == 4e9
    v = _views(path)
    k = {r["name"]: r for r in v["kernels"]}
    row = k["triton_poi_fused_mul_0"]  # not a GEMM by name: recorded FLOPs still go to the kernel it launched
    assert (row["flops"], row["flops_source"]) == (4e9, "recorded")
    assert row["tflops"] == pytest.approx(4e9 / 100.0 / 1e6)
    assert row["precision"] == "fp32" and row["mfu"] == pytest.approx(row["tflops"] / 67.0)  # H100 FP32 peak
    op = next(r for r in v["operators"] if r["name"] == "triton_poi_fused_mul_0")
    assert (op["flops"], op["flops_source"]) == (4e9, "recorded")
    mm = next(r for r in v["operators"] if r["name"] == "aten::mm")
    assert (mm["flops"], mm["flops_source"]) == (2 * 1024**3, "estimate")


@pytest.mark.parametrize("value", ["4e9", "nan", 1e400, -5, 0, [1], {"a": 1}, None, True])
def test_odd_kernel_flop_counts_as_absent(tmp_path: Path, value: Any) -> None:
    path = _triton_trace(tmp_path, value)
    text = path.read_text().replace("Infinity", "1e400")  # json.dumps writes inf as Infinity (not JSON)
    path.write_text(text)
    v = _views(path)  # loads: no value makes the trace unreadable
    row = next(r for r in v["kernels"] if r["name"] == "triton_poi_fused_mul_0")
    assert row["flops"] is None and row["flops_source"] is None


def test_begin_end_operators_keep_their_flops_and_arguments(tmp_path: Path) -> None:
    events = [
        {"ph": "B", "cat": "cpu_op", "name": "aten::conv2d", "pid": 1, "tid": 1, "ts": 10.0,
         "args": {"Input Dims": [[2, 3, 16, 16], [8, 3, 3, 3], [8], [], [], [], []],
                  "Concrete Inputs": ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "1"], "kernel_flop": 7}},
        {"ph": "E", "cat": "cpu_op", "name": "aten::conv2d", "pid": 1, "tid": 1, "ts": 20.0},
        {"ph": "X", "cat": "cpu_op", "name": "aten::relu", "pid": 1, "tid": 1, "ts": 30.0, "dur": 1.0,
         "args": {"Input Dims": [[2, 8, 8, 8]], "Concrete Inputs": [""]}},
    ]
    path = tmp_path / "be.json"
    path.write_text(json.dumps({"traceEvents": events}))
    ops = {o.name: o for o in load_trace(path).ops}
    conv = ops["aten::conv2d"]
    assert op_flops(conv) == 7 and op_shape_key(conv) is not None
    assert json.loads(op_concrete_inputs(conv) or "") == ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "1"]
    relu = ops["aten::relu"]  # not a convolution: its Concrete Inputs are not kept (its payload stays the 3-tuple)
    assert op_concrete_inputs(relu) is None and op_flops(relu) is None and op_shape_key(relu) == "[[2, 8, 8, 8]]"


def test_real_trace_recorded_flops_equal_the_estimates(tmp_path: Path) -> None:
    """torch's trace augmenter (torch._inductor.analysis.profile_analysis) writes ``kernel_flop`` from
    torch.utils.flop_counter on a real H100 trace: gpuprof's estimates of the same ops agree exactly."""
    src = shared_path(*H100_CONV)
    pytest.importorskip("torch")
    pa = pytest.importorskip("torch._inductor.analysis.profile_analysis")
    calculate = pa._calculate_flops

    def tolerant(event: dict[str, Any]) -> int:  # the augmenter raises on flash attention's shapes: leave those out
        try:
            return int(calculate(event))
        except (AttributeError, TypeError, ValueError, KeyError, IndexError):
            return 0

    with gzip.open(src, "rt") as fh:
        doc = json.load(fh)
    mp = pytest.MonkeyPatch()
    mp.setattr(pa, "_calculate_flops", tolerant)
    try:
        doc = pa._augment_trace_helper(doc)
    finally:
        mp.undo()
    recorded = {e["name"] for e in doc["traceEvents"] if e.get("cat") == "cpu_op" and e.get("args", {}).get("kernel_flop")}
    assert recorded == {"aten::addmm", "aten::cudnn_convolution"}
    path = tmp_path / "augmented.json"
    path.write_text(json.dumps(doc))
    before, after = _views(src), _views(path)
    k_before = {r["name"]: r for r in before["kernels"]}
    compared = 0
    for r in after["kernels"]:
        b = k_before[r["name"]]
        assert (r["flops"] is None) == (b["flops"] is None), r["name"]
        if r["flops"] is not None:
            assert r["flops"] == pytest.approx(b["flops"], rel=1e-9), r["name"]
            assert (b["flops_source"], r["flops_source"]) == ("estimate", "recorded")
            assert r["mfu"] == pytest.approx(r["tflops"] / peak_for("h100", r["precision"]))
            compared += 1
    assert compared >= 5 and any("fprop" in r["name"] and r["flops"] for r in after["kernels"])
    conv = [r for r in after["operators"] if r["name"] == "aten::cudnn_convolution"]
    assert conv and all(r["flops_source"] == "recorded" and r["tflops"] and r["tflops"] > 0 for r in conv)


# --------------------------------------------------------------------------- peaks and precision
def test_peak_table_names_every_precision_and_fp64_is_its_own_column() -> None:
    assert PRECISIONS == ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "fp4", "int8")
    for row, peaks in PEAKS.items():
        assert len(peaks) == len(PRECISIONS), row
        assert peaks[PRECISIONS.index("fp32")] is not None, row
        fp64 = peaks[PRECISIONS.index("fp64")]
        assert fp64 is not None and fp64 > 0, row  # every part runs FP64, however slowly
        present = [p for p in peaks if p is not None]
        assert all(p > 0 for p in present)
    # consumer-rate FP64 is far below FP32; datacenter parts match it (tensor-core FP64)
    assert peak_for("l4", "fp64") < peak_for("l4", "fp32") / 32  # type: ignore[operator]
    assert peak_for("a100", "fp64") == peak_for("a100", "fp32") == 19.5
    assert peak_for("v100", "fp64") == 7.8 and peak_for("v100", "fp32") == 15.7
    assert peak_for("v100", "tf32") is None and peak_for("t4", "bf16") is None and peak_for("a100", "fp8") is None
    assert peak_for("h100", "fp8") == pytest.approx(1978.9) and peak_for("h100", "bf16") == pytest.approx(989.4)
    assert peak_for("h100", "fp64") == 67.0 and peak_for(None, "fp32") is None and peak_for("h100", "fp4") is None
    assert peak_for("h100", "int8") == pytest.approx(1978.9) and peak_for("h100", "nf4") is None


@pytest.mark.parametrize(("name", "cc", "row"), [
    ("NVIDIA H100 80GB HBM3", (9, 0), "h100"),
    ("NVIDIA H100 PCIe", (9, 0), "h100 pcie"),
    ("NVIDIA H200", (9, 0), "h200"),
    ("NVIDIA GH200 480GB", (9, 0), "gh200"),
    ("NVIDIA H20", (9, 0), "h20"),
    ("NVIDIA B200", (10, 0), "b200"),
    ("NVIDIA A100-SXM4-40GB", (8, 0), "a100"),
    ("NVIDIA A10G", (8, 6), "a10g"),
    ("NVIDIA L40S", (8, 9), "l40s"),
    ("NVIDIA L4", (8, 9), "l4"),
    ("Tesla V100-SXM2-16GB", (7, 0), "v100"),
    ("Tesla T4", (7, 5), "t4"),
    ("AMD Instinct MI300X", None, "mi300x"),
    ("AMD Instinct MI325X", None, "mi325x"),
    ("", (8, 0), "a100"),
    ("", (9, 0), "h100"),
    ("Some Future GPU", (99, 0), None),
    ("", None, None),
])
def test_device_rows(name: str, cc: tuple[int, int] | None, row: str | None) -> None:
    assert device_row(name, cc) == row


def test_float64_matmul_gets_fp64_mfu_not_fp32(tmp_path: Path) -> None:
    tb = TraceBuilder()  # an A100
    with tb.step():
        with tb.op("aten::mm", input_types=["double", "double"], input_dims=[[1024, 1024], [1024, 1024]]):
            tb.kernel("void gemm_kernel<double, 64>(...)", us=200.0)
    path = tb.write(tmp_path / "fp64.json")
    v = _views(path)
    assert v["peak_device"] == "a100"
    row = next(r for r in v["kernels"] if r["name"].startswith("void gemm_kernel<double"))
    assert row["precision"] == "fp64" and row["op_dtype"] == "fp64"
    assert row["flops"] == 2 * 1024**3 and row["mfu"] == pytest.approx(row["tflops"] / 19.5)


def test_doc_peak_table_is_the_code_table() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "views.md").read_text(encoding="utf-8")
    table = doc[doc.index("| Row | FP64 |"):].split("\n\n")[0].splitlines()[2:]
    documented: dict[str, tuple[float | None, ...]] = {}
    for line in table:
        cells = [c.strip() for c in line.strip("|").split("|")]
        values = tuple(None if c == "-" else float(c) for c in cells[1:])
        for row in cells[0].split(", "):
            documented[row] = values
    assert documented == PEAKS

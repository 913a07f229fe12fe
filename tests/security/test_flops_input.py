"""Hostile FLOP inputs: ``kernel_flop``, ``Concrete Inputs`` and ``Input Dims`` values from a stranger's trace.

None of them may stop the analysis, raise, or produce a non-finite figure: each counts as absent.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from gpuprof.analysis import analyze
from gpuprof.trace.flops import estimate_flops
from gpuprof_testing.tracegen import TraceBuilder

HUGE = 10**200  # a Python int JSON allows; products of a few overflow a float


@pytest.mark.parametrize(("dims", "concrete"), [
    ([[HUGE, HUGE, 3, 3], [HUGE, HUGE, 3, 3]], ["", "", "", "[1, 1]", "[0, 0]", "[1, 1]", "1"]),
    ([[2, 3, 8, 8], [4, 3, 3, 3]], ["", "", "", "[1, 1]", "[-5, 0]", "[1, 1]", "1"]),
    ([[2, 3, 8, 8], [4, 3, 3, 3]], ["", "", "", "[1, 1]", "[0, 0]", "[0, 1]", "1"]),
    ([[2, 3, 8, 8], [4, 3, 3, 3]], ["", "", "", "[[[[[[1]]]]]]", "[0, 0]", "[1, 1]", "1"]),
    ([[2, 3, 8, 8], [4, 3, 3, 3]], ["", "", "", "[" * 5000, "[0, 0]", "[1, 1]", "1"]),
    ([[2, 3, 8, 8], [4, 3, 3, 3]], "not a list"),
    ([[2, 3, 8, 8], [4, 3, 30, 30]], ["", "", "", "[1, 1]", "[0, 0]", "[1, 1]", "1"]),  # kernel larger than input
])
def test_hostile_convolution_inputs_give_no_estimate(tmp_path: Path, dims: Any, concrete: Any) -> None:
    assert estimate_flops("aten::conv2d", json.dumps(dims), json.dumps(concrete)) is None
    tb = TraceBuilder()
    with tb.step():
        with tb.op("aten::cudnn_convolution", input_types=["float", "float"], input_dims=dims):
            tb.kernel("volta_scudnn_128x64_relu_small_nn_v1", us=50.0)
    doc = tb.to_dict()
    for e in doc["traceEvents"]:
        if e["name"] == "aten::cudnn_convolution" and e.get("cat") == "cpu_op":
            e["args"]["Concrete Inputs"] = concrete
            e["args"]["kernel_flop"] = {"nested": [HUGE]}
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(doc))
    v = analyze(str(path)).to_dict()["traces"][0]["views"]
    for row in v["operators"] + v["kernels"]:
        assert row["flops"] is None or math.isfinite(row["flops"])
        assert row["tflops"] is None or math.isfinite(row["tflops"])


def test_huge_stride_is_one_output_position() -> None:
    got = estimate_flops("aten::conv2d", "[[2, 3, 8, 8], [4, 3, 3, 3]]", json.dumps(["", "", "", f"[{HUGE}, 1]", "[0, 0]", "[1, 1]", "1"]))
    assert got == 2 * 2 * 4 * (1 * 6) * 3 * 9


def test_huge_matmul_shapes_give_no_estimate() -> None:
    assert estimate_flops("aten::mm", json.dumps([[HUGE, HUGE], [HUGE, HUGE]])) is None
    assert estimate_flops("aten::linear", json.dumps([[10**150, 10**150], [10**150, 10**150]])) is None

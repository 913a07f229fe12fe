"""GP305 misaligned-gemm: GEMMs on align1/align2 kernels because a dimension is not a multiple of 8 (issue 37)."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from gpuprof.analysis import analyze
from gpuprof.rules.alignment import odd_dims
from gpuprof_testing.realtraces import shared_path
from gpuprof_testing.tracegen import TraceBuilder

H100 = ("hta", "TraceLens", "tests", "traces", "h100")


def _gp305(path: Path) -> list:
    return [f for f in analyze(str(path)).findings if f.code == "GP305"]


@pytest.mark.slow  # a real trace analysed whole / a bounded hostile wait: the slow pass
def test_gp305_bad_real_timesformer_sequence_length_3137() -> None:
    path = shared_path(*H100, "facebook_timesformer-base-finetuned-k400__1016002.json.gz")
    (f,) = _gp305(path)
    # independently: the align1/align2 kernels' share of the kernel time inside the ProfilerStep windows
    with gzip.open(path, "rt") as fh:
        ev = [e for e in json.load(fh)["traceEvents"] if e.get("ph") == "X"]
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in ev if e["name"].startswith("ProfilerStep#")]
    kernels = [e for e in ev if e.get("cat") == "kernel" and any(a <= e["ts"] <= b for a, b in steps)]
    bad = sum(e["dur"] for e in kernels if re.search(r"align[12](?!\d)", e["name"]))
    assert f.evidence[0].value == pytest.approx(bad / sum(e["dur"] for e in kernels), abs=0.002)
    assert 3137 in f.evidence[0].extra["odd_dimensions"] and "3137" in f.message
    # aligned sm90 bf16 GEMMs reach far more than the align1 ones: the cost is most of the unaligned time
    extra = f.evidence[0].extra
    assert extra["aligned_gemm_tflops"] > 4 * extra["unaligned_gemm_tflops"]
    assert 0.5 * extra["unaligned_us_per_step"] < f.cost_us_per_step < extra["unaligned_us_per_step"]
    assert "pad_to_multiple_of" in f.advice


def test_gp305_good_real_qwen_has_aligned_gemms() -> None:
    assert _gp305(shared_path(*H100, "Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz")) == []


def _trace(tmp_path: Path, seq: int, kernel: str) -> Path:
    tb = TraceBuilder(device="NVIDIA H100 80GB HBM3", cc=(9, 0), record_shapes=True)
    for _ in range(3):
        with tb.step():
            with tb.op("aten::bmm", ["c10::BFloat16"] * 2, [[16, seq, 64], [16, 64, seq]]):
                tb.kernel(kernel, us=400)
            with tb.op("aten::linear", ["c10::BFloat16"] * 3, [[seq, 512], [512, 512], [512]]):
                tb.kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", us=100)
            tb.device_synchronize()
    return Path(tb.write(tmp_path / f"s{seq}.json"))


def test_gp305_bad_synthetic_odd_sequence_and_good_padded(tmp_path: Path) -> None:
    (f,) = _gp305(_trace(tmp_path, 5185, "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_64x64_nn_align1>"))
    assert f.evidence[0].extra["odd_dimensions"] == [5185]
    assert f.evidence[0].value == pytest.approx(400 / 500)
    assert _gp305(_trace(tmp_path, 5192, "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_64x64_nn_align8>")) == []


def test_odd_dims() -> None:
    assert odd_dims("[[96, 3137, 64], [96, 64, 3137]]", 8) == [3137]
    assert odd_dims("[[8, 16], [16, 30522], []]", 8) == [30522]
    assert odd_dims("[[8, 6], [6, 12]]", 4) == [6]
    assert odd_dims("not json", 8) == [] and odd_dims(None, 8) == []

"""GP304 unfused-attention: eager softmax(q @ k.T) @ v, on a real H100 trace and synthetic ones (issue 37)."""

from __future__ import annotations

import gzip
import json
from bisect import bisect_left, bisect_right
from collections import defaultdict
from pathlib import Path

import pytest

from gpuprof.analysis import analyze
from gpuprof_testing.realtraces import shared_path
from gpuprof_testing.tracegen import TraceBuilder

H100 = ("hta", "TraceLens", "tests", "traces", "h100")


def _gp304(path: Path) -> list:
    return [f for f in analyze(str(path)).findings if f.code == "GP304"]


def _raw_share(path: Path) -> float:
    """Independently of gpuprof: for every softmax op, the kernels its thread launched from the start of the
    matmul before it to the end of the matmul after it, over the kernels inside the ProfilerStep windows."""
    with gzip.open(path, "rt") as fh:
        ev = [e for e in json.load(fh)["traceEvents"] if e.get("ph") == "X"]
    steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev if e["name"].startswith("ProfilerStep#"))
    launch = {e["args"]["correlation"]: e for e in ev
              if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    in_step = lambda t: any(a <= t <= b for a, b in steps)  # noqa: E731
    kernels = [e for e in ev if e.get("cat") == "kernel" and in_step(e["ts"]) and "nccl" not in e["name"].lower()]
    by_tid: dict[object, list[tuple[float, float]]] = defaultdict(list)
    for k in kernels:
        r = launch.get(k["args"].get("correlation"))
        if r is not None:
            by_tid[r["tid"]].append((r["ts"], k["dur"]))
    ops: dict[object, list[dict]] = defaultdict(list)
    for e in ev:
        if e.get("cat") == "cpu_op" and e["name"] in ("aten::softmax", "aten::_softmax", "aten::_softmax_backward_data",
                                                     "aten::matmul", "aten::bmm", "aten::baddbmm", "aten::einsum"):
            ops[e["tid"]].append(e)
    picked: set[tuple[object, float]] = set()
    for tid, seq in ops.items():
        seq.sort(key=lambda e: (e["ts"], -e["dur"]))
        gemms = [e for e in seq if "softmax" not in e["name"]]
        end = -1.0
        for s in seq:
            if "softmax" not in s["name"] or s["ts"] < end or not in_step(s["ts"]):
                continue
            end = s["ts"] + s["dur"]
            before = [g for g in gemms if g["ts"] + g["dur"] <= s["ts"]]
            after = [g for g in gemms if g["ts"] >= end]
            if not before or not after:
                continue
            b = max(before, key=lambda g: g["ts"] + g["dur"])
            a = min(after, key=lambda g: g["ts"])
            if s["ts"] - (b["ts"] + b["dur"]) > 5000 or a["ts"] - end > 5000:
                continue
            launches = sorted(by_tid[tid])
            ts = [t for t, _ in launches]
            for t, _ in launches[bisect_left(ts, b["ts"]):bisect_right(ts, max(a["ts"] + a["dur"], a["ts"]))]:
                picked.add((tid, t))
    attn = sum(d for tid, ls in by_tid.items() for t, d in ls if (tid, t) in picked)
    return attn / sum(k["dur"] for k in kernels)


@pytest.mark.slow  # a real trace analysed whole / a bounded hostile wait: the slow pass
def test_gp304_bad_real_timesformer_eager_attention_with_an_independent_share() -> None:
    path = shared_path(*H100, "facebook_timesformer-base-finetuned-k400__1016002.json.gz")
    (f,) = _gp304(path)
    share = f.evidence[0].value
    assert share == pytest.approx(_raw_share(path), abs=0.01)
    assert share > 0.5 and f.severity == "warning"
    assert f.evidence[0].extra["blocks_per_step"] == pytest.approx(24)  # 12 layers x (time + space) attention
    assert 0 < f.cost_us_per_step < f.evidence[0].extra["attention_us_per_step"]
    assert "scaled_dot_product_attention" in f.advice


@pytest.mark.parametrize("parts", [("h100", "gaunernst_bert-small-uncased__1016001.json.gz"),
                                   ("h100", "Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"),
                                   ("inference", "xdit_sd_3.5", "profile_trace_rank_0.json.gz")])
@pytest.mark.slow  # slow pass: a real trace (or job) analysed whole; the README's fast command stays under 300 CPU s on a 2-core VM
def test_gp304_good_fused_attention_traces_have_none(parts: tuple[str, ...]) -> None:
    path = shared_path("hta", "TraceLens", "tests", "traces", *parts)
    assert _gp304(path) == []


def _synthetic(tmp_path: Path, eager: bool) -> Path:
    tb = TraceBuilder(device="NVIDIA H100 80GB HBM3", cc=(9, 0))
    for _ in range(4):
        with tb.step():
            for _layer in range(4):
                with tb.op("aten::linear", ["c10::BFloat16"] * 3):
                    tb.kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", us=200)
                if eager:
                    with tb.op("aten::matmul", ["c10::BFloat16"] * 2), tb.op("aten::bmm", ["c10::BFloat16"] * 2):
                        tb.kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize128x128x64", us=150)
                    with tb.op("aten::div", ["c10::BFloat16", "Scalar"]):
                        tb.kernel("void at::native::vectorized_elementwise_kernel<4, div>", us=120)
                    with tb.op("aten::softmax", ["c10::BFloat16"]), tb.op("aten::_softmax", ["c10::BFloat16"]):
                        tb.kernel("void at::native::cunn_SoftMaxForward<8, c10::BFloat16, float>", us=300)
                    with tb.op("aten::matmul", ["c10::BFloat16"] * 2), tb.op("aten::bmm", ["c10::BFloat16"] * 2):
                        tb.kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize128x64x64", us=150)
                else:
                    with tb.op("aten::scaled_dot_product_attention", ["c10::BFloat16"] * 3), \
                            tb.op("aten::_scaled_dot_product_flash_attention", ["c10::BFloat16"] * 3):
                        tb.kernel("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64>>", us=250)
            tb.device_synchronize()
    return Path(tb.write(tmp_path / ("eager.json" if eager else "sdpa.json")))


def test_gp304_bad_synthetic_eager_attention_and_good_sdpa(tmp_path: Path) -> None:
    (f,) = _gp304(_synthetic(tmp_path, True))
    # per step: 4 x (150 + 120 + 300 + 150) µs of attention kernels among 4 x (200 + 720) µs
    assert f.evidence[0].value == pytest.approx(720 / 920, abs=0.005)
    assert f.cost_us_per_step == pytest.approx(4 * (120 + 300))  # the div and softmax kernels, not the GEMMs
    assert f.evidence[0].extra["blocks_per_step"] == pytest.approx(4)
    assert _gp304(_synthetic(tmp_path, False)) == []

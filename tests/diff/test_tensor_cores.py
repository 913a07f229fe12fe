"""Tensor cores decided by the kernel, never by its dtype alone (issue 37, docs/views.md).

The kernels view's ``tensor_cores`` column is checked on real H100, B200, MI300X and MI210 traces against an
independent reading of the raw kernel events: kernels that do no matrix work (softmax, elementwise, normalisation,
copies, reductions, collectives) are never "yes", SIMT GEMMs are "no", and the time marked "yes" is the time of the
kernels whose names name a tensor-core instruction or family.
"""

from __future__ import annotations

import gzip
import json
import re

import pytest

from gpuprof.analysis import analyze
from gpuprof.rules.precision import uses_tensor_cores
from gpuprof_testing.realtraces import shared_path

TRACES = [
    ("h100", "Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"),
    ("h100", "facebook_timesformer-base-finetuned-k400__1016002.json.gz"),
    ("mi300", "Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"),
    ("b200", "eager_trace.json.gz"),
    ("mi210/gpu_only_trace", "gpu_only_trace.json.gz"),
]

# An independent reading of kernel names, written for this test only.
NO_MATRIX = ("elementwise", "softmax", "norm", "copy", "reduce", "memcpy", "memset", "nccl", "all_reduce",
             "transpose", "fill", "cat", "index", "rotary", "embedding")
TC_FAMILY = re.compile(r"xmma|nvjet|flash_fwd|flash_bwd|fmha|_tensorop|tensorop_|wmma|s16816|s1688|s884|_mi\d+x\d+|xdlops|_xdl"
                       r"|gtcx|e4m3|e2m1", re.I)


def _kernels(path) -> dict[str, float]:
    with gzip.open(path, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    out: dict[str, float] = {}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in ("kernel", "Kernel"):
            out[e["name"]] = out.get(e["name"], 0.0) + float(e.get("dur", 0))
    return out


@pytest.mark.parametrize(("folder", "name"), TRACES)
def test_no_matrix_kernel_is_on_tensor_cores(folder: str, name: str) -> None:
    path = shared_path("hta", "TraceLens", "tests", "traces", *folder.split("/"), name)
    raw = _kernels(path)
    total = sum(raw.values())
    plain = {n: t for n, t in raw.items()
             if any(w in n.lower() for w in NO_MATRIX) and not TC_FAMILY.search(n) and "gemm" not in n.lower()}
    assert sum(plain.values()) > 0.05 * total  # the trace has such kernels: the test can fail
    wrong = [n for n in plain if uses_tensor_cores(n)]
    assert wrong == []
    # the time called "yes" is exactly that of the names naming a tensor-core instruction or family
    yes = sum(t for n, t in raw.items() if uses_tensor_cores(n))
    family = sum(t for n, t in raw.items() if TC_FAMILY.search(n) and not re.search(r"sgemm|simt|gemv", n, re.I))
    assert yes == pytest.approx(family, rel=0.02)


def test_the_kernels_view_says_no_for_softmax_and_elementwise_on_a_real_h100_trace() -> None:
    path = shared_path("hta", "TraceLens", "tests", "traces", "h100", "Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz")
    rows = json.loads(json.dumps(analyze(str(path)).to_dict()))["traces"][0]["views"]["kernels"]
    by_name = {r["name"]: r["tensor_cores"] for r in rows}
    elementwise = [n for n in by_name if "elementwise_kernel" in n]
    assert elementwise and all(by_name[n] is False for n in elementwise)
    gemm = [n for n in by_name if n.startswith("sm90_xmma_gemm_bf16")]
    assert gemm and all(by_name[n] is True for n in gemm)
    assert any("flash_fwd" in n and by_name[n] is True for n in by_name)


@pytest.mark.parametrize(
    ("name", "verdict"),
    [
        ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<8, c10::BFloat16, float>(x)", False),
        ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::Half>>(x)", False),
        ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<c10::Half, x>>(x)", False),
        ("maxwell_fp16_sgemm_fp16_128x64_nn", False),  # FP16 storage, FP32 SIMT math
        ("void gemmSN_TN_kernel<__half, 128, 16, 2, 4, 4, 4, true>(x)", False),
        ("ampere_scudnn_128x64_relu_interior_nn_v1", False),
        ("void gemv2T_kernel_val<int, int, __nv_bfloat16, float>(x)", False),
        ("_ZN7ck_tile6kentryILi1ENS_12Rmsnorm2dFwdINS_27Rmsnorm2dFwdPipelineOnePass", False),
        ("bmm_MxE4m3_MxE2m1MxE4m3_Fp32_t128x16x256u2_s3", True),
        ("igemm_fwd_gtcx2_nhwc_bf16_bx0_ex1_bt32x256x32", True),
        ("triton_tem_fused_mm_0", None),  # a Triton matmul template: the name does not tell
        ("kernel_unified_attention_3d", None),
        ("attn_fwd", None),
    ],
)
def test_verdict_by_name(name: str, verdict: bool | None) -> None:
    assert uses_tensor_cores(name) is verdict

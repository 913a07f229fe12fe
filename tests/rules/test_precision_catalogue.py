"""The precision catalogue (gpuprof/trace/precision.py) read alike by every view: the kernels view, MFU and GP302;
GP302's advice fits the GPU; GP862 only where a GradScaler exists; every MFU figure names its peak's precision and
gives the figure against the device's dense BF16 (FP16) tensor-core peak (issue 42, item 4)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from gpuprof.analysis import analyze
from gpuprof.render.format import fmt_mfu
from gpuprof.rules.precision import uses_tensor_cores
from gpuprof.trace.peaks import PEAKS, PRECISIONS, peak_for, reference_precision
from gpuprof.trace.precision import name_precision
from gpuprof_testing.realtraces import shared_path
from gpuprof_testing.tracegen import KERNELS, TraceBuilder

H100 = dict(device="NVIDIA H100 80GB HBM3", cc=(9, 0))
A100 = dict(device="NVIDIA A100-SXM4-80GB", cc=(8, 0))
T4 = dict(device="Tesla T4", cc=(7, 5), total_memory=15 << 30, num_sms=40)

# FP8/FP4 GEMM kernels as real jobs name them: DeepGEMM's (DeepSeek V3 serving traces), vLLM's CUTLASS FP8 block-wise
# GEMM, and the B200 trace's TensorRT-LLM MXFP4 x MXFP8 MoE GEMMs (shared traces, TraceLens b200/eager_trace)
DEEP_GEMM = ("void deep_gemm::fp8_gemm_kernel<4096u, 7168u, 128u, 160u, 128u, 0u, 64u, 9u, 4u, 128u, 128u, 1u, true, "
             "(deep_gemm::GemmType)1>(__nv_bfloat16*, float*, int*, unsigned int, CUtensorMap_st, CUtensorMap_st)")
CUTLASS_FP8 = "void cutlass::device_kernel<cutlass_3x_gemm_fp8_blockwise<float, 128, 128> >(float const*, int)"
B200_MXFP4 = ("bmm_MxE4m3_MxE2m1MxE4m3_Fp32_t128x16x256u2_s3_et128x16_m128x16x32_cga1x1x1_16dp256b_rM_TN_transOut_"
              "schedP2x1x2x3_biasM_bN_tma_tmaOpt_clmp_swiGlu_dynBatch_sm100f")


@pytest.mark.parametrize(("name", "precision"), [
    (DEEP_GEMM, "fp8"),
    (CUTLASS_FP8, "fp8"),
    ("sm90_xmma_gemm_e4m3e4m3_e4m3f32_f32_tn_n_tilesize128x128x128_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas", "fp8"),
    (B200_MXFP4, "fp8"),  # an MXFP4 x MXFP8 MMA runs at Blackwell's FP8 rate
    ("bmm_Bfloat16_MxE2m1MxE4m3_Fp32_t128x16x256u2_s3_et128x16_m128x16x32_cga1x1x1_16dp256b_rM_TN_sm100f", "fp8"),
    ("cutlass3x_sm100_bstensorop_s16864gemm_block_scaled_ue4m3xe2m1_ue4m3xe2m1_f32_bf16_bf16_128x128x256_1x1x1_0_tnn_align32", "fp4"),
    ("_matmul_ogs_NNT_bf16xbf16xmxfp4_128x128x128x1_swiglu", "bf16"),  # MXFP4 weights widened to bf16 (shared vLLM)
    ("cutlass_80_tensorop_i16832gemm_s8_256x128_64x3_tn_align16", "int8"),
    ("ampere_int8_i8816gemm_int8_128x128_ldg16_relu_t_nt", "int8"),
    ("Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT256x32x64_MI16x16x1_SN_LDSB1", "bf16"),  # shared MI300X traces
    ("Cijk_Alik_Bljk_B_BS_BH_Bias_HA_S_SAV_UserArgs_MT256x128x64_MI16x16x1_SN_LDSB1", "bf16"),
    ("Cijk_Ailk_Bljk_S_B_Bias_HA_S_SAV_UserArgs_MT16x16x128_MI16x16x1_SN_LDSB1", "fp32"),
    ("Cijk_Alik_Bljk_SB_Bias_AS_SAV_UserArgs_MT64x16x32_MI16x16x1_SN_LDSB0", "fp32"),  # shared MI250 trace
    ("Cijk_Ailk_Bljk_HHS_BH_MT128x128x32_MI32x32x8x1", "fp16"),
    ("Cijk_Ailk_Bljk_F8F8S_BH_Bias_SHB_HA_S_SAB_SCD_SAV_UserArgs", "fp8"),
    ("Custom_Cijk_Ailk_Bljk_F8H_HHS_BH_Bias_AS_SAB_SAV_MT128x16x128_MI16x16x1", "fp16"),  # FP8 x FP16: widened
    ("Cijk_Ailk_Bljk_DB_MT64x64x8", "fp64"),
    ("volta_sgemm_128x64_nn", "fp32"),
    ("sm80_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x16", "tf32"),
    ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclWorkElem)", None),  # a collective's int8_t is no INT8 GEMM
    # composable_kernel's mangled bf16 convolution (shared MI300X traces): its ``ES8_S8_`` substitutions are no int8
    ("_ZN2ck16tensor_operation6device12_GLOBAL__N_149kernel_grouped_conv_fwd_multiple_abd_xdl_cshuffleINS_34Gridwise"
     "GemmMultipleABD_xdl_cshuffleINS_5TupleIJDF16bEEES6_fNS5_IJEEEDF16bNS_16tensor_layout12element_wise11PassThroughES8_"
     "S8_LNS0_25InMemoryDataOperationEnumE0ELi1ELi256E", None),
])
def test_catalogue_reads_nvidia_and_amd_gemm_names(name: str, precision: str | None) -> None:
    assert name_precision(name) == precision


def test_fp8_and_fp4_gemm_names_are_tensor_core_work() -> None:
    # DeepGEMM's and vLLM's FP8 GEMMs name no MMA shape: before the catalogue their tensor cores were unknown or
    # (a <float template argument) "no", and GP302 counted them as FP32
    for name in (DEEP_GEMM, CUTLASS_FP8, B200_MXFP4):
        assert uses_tensor_cores(name) is True, name


def _fp8_moe(tmp_path: Path) -> Path:
    """An H100 serving step of FP8 grouped GEMMs launched by custom operators that record no input dtype."""
    tb = TraceBuilder(**H100, record_shapes=False)
    for _ in range(3):
        with tb.step():
            for _ in range(4):
                with tb.op("deep_gemm::m_grouped_gemm_fp8_fp8_bf16_nt"):
                    tb.kernel(DEEP_GEMM, us=300)
                with tb.op("_C::cutlass_scaled_mm"):
                    tb.kernel(CUTLASS_FP8, us=200)
                with tb.op("aten::add_"):
                    tb.kernel(KERNELS["elementwise"], us=100)
    return tb.write(tmp_path / "fp8_moe.json")


def test_fp8_gemm_trace_is_fp8_in_every_view_and_not_in_gp302(tmp_path: Path) -> None:
    report = analyze(_fp8_moe(tmp_path))
    assert "GP302" not in {f.code for f in report.findings}  # was "FP32 ... 83% of kernel time"
    t = report.to_dict()["traces"][0]
    rows = {k["name"]: k for k in t["views"]["kernels"]}
    for name in (DEEP_GEMM, CUTLASS_FP8):
        assert rows[name]["precision"] == "fp8" and rows[name]["tensor_cores"] is True


def test_int8_gemm_with_a_float_template_argument_is_never_fp32_in_gp302(tmp_path: Path) -> None:
    # an INT8 GEMM whose name carries a float scale type: the <float hint said "FP32 path" before the catalogue
    name = "void gemm_int8_kernel<float, 128, 128>(signed char const*, signed char const*, float*, float const*)"
    tb = TraceBuilder(**A100)
    for _ in range(3):
        with tb.step():
            for _ in range(4):
                with tb.op("aten::_int_mm", input_types=["signed char", "signed char"]):
                    tb.kernel(name, us=300)
                with tb.op("aten::add_", input_types=["float", "float", "Scalar"]):
                    tb.kernel(KERNELS["elementwise"], us=50)
    assert name_precision(name) == "int8" and uses_tensor_cores(name) is False  # the name shows no MMA
    assert analyze(tb.write(tmp_path / "int8.json"), select=["GP302"]).findings == []


def test_fp8_gemm_names_are_tensor_core_time_in_gp302_stats(tmp_path: Path) -> None:
    from gpuprof.rules.precision import precision_stats
    from gpuprof.trace.load import load_trace
    from gpuprof.trace.metrics import compute_metrics

    st = precision_stats(compute_metrics(load_trace(_fp8_moe(tmp_path))))
    assert st is not None and st.fp32_us == 0
    assert st.tensor_core_us == pytest.approx(3 * 4 * 500)  # every GEMM of the 3 steps


def _fp32_gemms(tmp_path: Path, name: str, **device: object) -> Path:
    tb = TraceBuilder(**device)  # type: ignore[arg-type]
    for _ in range(3):
        with tb.step(), tb.annotate("model_forward"):
            for _ in range(6):
                tb.gemm("float", us=500)
                with tb.op("aten::add_", input_types=["float", "float", "Scalar"]):
                    tb.kernel(KERNELS["elementwise"], us=100)
            tb.cpu(us=5000)  # the host outlasts the step's 3.6 ms of GPU work: the step is its host range
    return tb.write(tmp_path / name)


def test_gp302_on_a_t4_advises_float16_not_bfloat16(tmp_path: Path) -> None:
    found = [f for f in analyze(_fp32_gemms(tmp_path, "t4.json", **T4), select=["GP302"]).findings]
    assert len(found) == 1
    f = found[0]
    assert "compute capability 7.5" in f.message
    assert "dtype=torch.float16" in f.advice and "GradScaler" in f.advice
    assert "bfloat16" not in f.advice.replace("none for bfloat16", "")  # said only as what the T4 lacks
    assert "allow_tf32" not in f.advice and "float32_matmul_precision" not in f.advice
    assert f.advice.index("float16") < f.advice.index("GradScaler")  # it leads with float16 autocast


def test_gp302_on_an_a100_still_leads_with_bfloat16(tmp_path: Path) -> None:
    f = analyze(_fp32_gemms(tmp_path, "a100.json", **A100), select=["GP302"]).findings[0]
    assert "dtype=torch.bfloat16" in f.advice and "allow_tf32" in f.advice


def _fp16_inference(tmp_path: Path) -> Path:
    tb = TraceBuilder(**A100)
    for _ in range(3):
        with tb.step():
            for _ in range(4):
                with tb.op("aten::addmm", input_types=["c10::Half"] * 3 + ["Scalar", "Scalar"], us=30):
                    tb.kernel("ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_tn", us=20)
    return tb.write(tmp_path / "fp16_inference.json")


def test_gp862_is_quiet_on_an_inference_trace_without_a_scaler(tmp_path: Path) -> None:
    codes = {f.code for f in analyze(_fp16_inference(tmp_path), select=["GP860", "GP862"]).findings}
    assert codes == set()  # was GP862 "drop the GradScaler" with none to drop


def test_gp862_reads_a_gradscaler_from_its_python_frames(tmp_path: Path) -> None:
    # with_stack traces show GradScaler's own code even where its operators are not recorded
    tb = TraceBuilder(**A100, with_stack=True)
    for _ in range(3):
        with tb.step():
            for _ in range(4):
                with tb.op("aten::addmm", input_types=["c10::Half"] * 3 + ["Scalar", "Scalar"], us=30):
                    tb.kernel("ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_tn", us=20)
            with tb.op("autograd::engine::evaluate_function: AddmmBackward0", us=80):
                pass
            with tb.python("torch/amp/grad_scaler.py", 400, "unscale_"):
                tb.cpu(us=10)
    f = [f for f in analyze(tb.write(tmp_path / "frames.json"), select=["GP862"]).findings]
    assert len(f) == 1 and "grad_scaler.py" in f[0].evidence[0].extra["gradscaler_evidence"]


def _independent_fp32(path: Path) -> tuple[float, float]:
    """(FLOPs of the steps' GEMMs, the steps' wall time in µs) from the raw events: 2*M*N*K per aten::mm."""
    doc = json.loads(gzip.open(path).read() if path.suffix == ".gz" else path.read_text())
    ev = doc["traceEvents"]
    steps = [e for e in ev if e.get("name", "").startswith("ProfilerStep#")]
    flops = 0.0
    for e in ev:
        if e.get("cat") == "cpu_op" and e["name"] == "aten::mm":
            (m, k), (_, n) = e["args"]["Input Dims"]
            flops += 2.0 * m * n * k
    wall = max(e["ts"] + e["dur"] for e in steps) - min(e["ts"] for e in steps)
    return flops, wall


def test_fp32_mfu_is_stated_against_the_bf16_peak_too(tmp_path: Path) -> None:
    path = _fp32_gemms(tmp_path, "a100_fp32.json", **A100)
    report = analyze(path)
    t = report.traces[0]
    mfu = t.mfu
    assert mfu is not None and mfu.value is not None
    flops, wall = _independent_fp32(path)
    assert mfu.peak_precision == "fp32" and mfu.reference_precision == "bf16"
    assert mfu.value == pytest.approx(flops / (19.5e6 * wall), rel=1e-3)
    assert mfu.reference_value == pytest.approx(flops / (312e6 * wall), rel=1e-3)  # 1/16 of the FP32 figure
    text = fmt_mfu(t)
    assert text is not None
    assert f"{mfu.value:.1%} of the a100 FP32 peak, {mfu.reference_value:.1%} of its dense BF16 tensor-core peak" in text
    v = t.views
    assert v is not None and v.reference_precision == "bf16"
    gemm = next(k for k in v.kernels if k.precision == "fp32" and k.mfu is not None)
    assert gemm.reference_mfu == pytest.approx(gemm.mfu * 19.5 / 312)
    rng = next(r for r in v.ranges if r.name == "model_forward")
    assert rng.peak_precision == "fp32" and rng.mfu is not None
    assert rng.reference_mfu == pytest.approx(rng.mfu * 19.5 / 312)


def test_gp307_names_the_fp32_peak_and_the_bf16_figure(tmp_path: Path) -> None:
    # an FP32 job far below even its FP32 peak: GP307's text says both figures
    tb = TraceBuilder(**A100)
    for _ in range(3):
        with tb.step():
            for _ in range(6):
                tb.gemm("float", us=5000)
    f = analyze(tb.write(tmp_path / "slow.json"), select=["GP307"]).findings
    assert len(f) == 1
    assert "of the a100 FP32 peak; " in f[0].message and "of its dense BF16 tensor-core peak" in f[0].message
    ev = f[0].evidence[0].extra
    assert ev["peak_precision"] == "fp32" and ev["reference_precision"] == "bf16"
    assert ev["reference_mfu"] == pytest.approx(f[0].evidence[0].value * 19.5 / 312, abs=1e-5)  # both rounded


def test_peak_table_has_fp4_and_int8_and_a_reference_for_every_row() -> None:
    assert PRECISIONS[-2:] == ("fp4", "int8")
    assert peak_for("b200", "fp4") == 9000.0 and peak_for("h100", "int8") == pytest.approx(1978.9)
    assert peak_for("a100", "int8") == 624.0 and peak_for("v100", "int8") is None
    for row in PEAKS:
        assert reference_precision(row) == ("fp16" if row in ("v100", "v100 pcie", "t4") else "bf16"), row
    assert reference_precision(None) is None


@pytest.mark.slow
def test_real_b200_fp8_and_fp4_kernels_read_as_fp8_in_the_kernels_view() -> None:
    path = shared_path("hta", "TraceLens", "tests", "traces", "b200", "eager_trace.json.gz")
    t = analyze(str(path)).to_dict()["traces"][0]
    rows = {k["name"]: k for k in t["views"]["kernels"]}
    fp8 = [r for n, r in rows.items() if n.startswith(("bmm_MxE4m3", "bmm_Bfloat16_MxE2m1"))]
    assert fp8 and all(r["precision"] == "fp8" and r["tensor_cores"] is True for r in fp8)
    assert t["views"]["reference_precision"] == "bf16"


@pytest.mark.slow
def test_real_mi300x_hipblaslt_gemms_read_as_bf16() -> None:
    path = shared_path("hta", "TraceLens", "tests", "traces", "mi300", "Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz")
    t = analyze(str(path)).to_dict()["traces"][0]
    cijk = [k for k in t["views"]["kernels"] if k["name"].startswith("Cijk_")]
    assert cijk
    for k in cijk:  # Tensile's type field: B_BS (bf16 operands) or S_B (fp32)
        assert k["precision"] == ("fp32" if "_S_B_" in k["name"] else "bf16"), k["name"]


@pytest.mark.slow
def test_real_v100_gp302_advises_float16_with_a_gradscaler() -> None:
    # the kineto ResNet-50 samples: FP32 convolutions on a V100 (compute capability 7.0, no BF16 tensor cores)
    from gpuprof_testing.realtraces import v100_samples

    path = v100_samples()[0]
    f = [f for f in analyze(str(path), select=["GP302"]).findings]
    assert len(f) == 1 and "compute capability 7.0" in f[0].message
    assert "dtype=torch.float16" in f[0].advice and "GradScaler" in f[0].advice
    assert "dtype=torch.bfloat16" not in f[0].advice  # was the advice's first words


@pytest.mark.slow
@pytest.mark.parametrize(("folder", "name"), [
    (("hta", "HolisticTraceAnalysis", "tests", "data", "trace_diff", "test"), "test.json.gz"),  # V100, fp32
    (("hta", "HolisticTraceAnalysis", "tests", "data", "trace_diff", "control"), "control.json.gz"),  # A100, tf32+fp32
])
def test_real_reference_mfu_is_the_same_flops_against_the_dense_16_bit_peak(folder: tuple[str, ...], name: str) -> None:
    t = analyze(str(shared_path(*folder, name))).to_dict()["traces"][0]
    mfu = t["mfu"]
    row, ref = mfu["peak_source"], mfu["reference_precision"]
    assert ref == ("fp16" if row == "v100" else "bf16")
    by = mfu["flops_by_precision"]
    # value: each precision's FLOPs at its own peak; reference: all of them at the one dense 16-bit peak
    at_own = sum(f / peak_for(row, p) for p, f in by.items())  # type: ignore[operator]
    at_ref = sum(by.values()) / peak_for(row, ref)  # type: ignore[operator]
    assert mfu["reference_value"] == pytest.approx(mfu["value"] * at_ref / at_own, rel=1e-9)
    assert mfu["reference_value"] < mfu["value"] / 2  # FP32/TF32 work: far below the BF16/FP16 figure's peak
    assert mfu["peak_precision"] == "+".join(sorted(by, key=lambda p: -by[p]))


@pytest.mark.parametrize(("device", "first"), [(T4, "dtype=torch.float16"), (A100, "dtype=torch.bfloat16")])
def test_gp861_advice_fits_the_gpu(tmp_path: Path, device: dict[str, object], first: str) -> None:
    # model.half() training: the autocast it advises is float16 with a GradScaler on a T4, bfloat16 on an A100
    tb = TraceBuilder(**device)  # type: ignore[arg-type]
    for _ in range(3):
        with tb.step():
            with tb.op("aten::addmm", input_types=["c10::Half"] * 3 + ["Scalar", "Scalar"], us=30):
                tb.kernel("turing_fp16_s1688gemm_fp16_128x128_ldg8_f2f_tn", us=20)
            with tb.op("autograd::engine::evaluate_function: AddmmBackward0", us=80):
                pass
            with tb.annotate("Optimizer.step#SGD.step"):
                for _ in range(4):
                    with tb.op("aten::add_", input_types=["c10::Half", "c10::Half", "Scalar"], us=5):
                        pass
    f = analyze(tb.write(tmp_path / "half.json"), select=["GP861"]).findings
    assert len(f) == 1 and first in f[0].advice
    if device is T4:
        assert "dtype=torch.bfloat16" not in f[0].advice and "GradScaler" in f[0].advice

"""GP302 (FP32 GEMM/convolution time on a GPU with tensor cores)."""

from __future__ import annotations

import pytest

from gpuprof.analysis import analyze
from gpuprof.rules.precision import is_eligible_kernel, uses_tensor_cores
from gpuprof_testing.realtraces import shared_path, v100_samples
from gpuprof_testing.tracegen import KERNELS, TraceBuilder, simple_training

V100 = dict(device="Tesla V100-SXM2-32GB", cc=(7, 0), total_memory=32 << 30)


def _gp302(path, **options):
    found = analyze(path, select=["GP302"], options={"GP302": options}).findings
    assert len(found) <= 1
    return found[0] if found else None


def _resnet_like(tmp_path, dtype: str, name: str = "t.json", **builder):
    """GEMMs plus cuDNN convolutions, with elementwise work around them (like a CNN step)."""
    tb = TraceBuilder(**builder)
    for _ in range(4):
        with tb.step():
            for _ in range(6):
                tb.gemm(dtype, us=300, name="aten::mm")
                with tb.op("aten::cudnn_convolution", input_types=[dtype, dtype]):
                    conv = KERNELS["conv_volta"] if dtype == "float" else "volta_fp16_s884cudnn_fp16_256x128_ldg8_relu_f2f_exp_small_nhwc2nchw_tn_v1"
                    tb.kernel(conv, us=300)
                with tb.op("aten::add_", input_types=[dtype, dtype, "Scalar"]):
                    tb.kernel(KERNELS["elementwise"], us=200)
    return tb.write(tmp_path / name)


def test_gp302_bad(tmp_path):
    f = _gp302(_resnet_like(tmp_path, "float", **V100))
    assert f is not None
    share, cc = f.evidence
    # 600 µs of GEMM+conv out of 800 µs of kernels per layer, none on tensor cores
    assert share.value == pytest.approx(0.75, abs=0.01)
    assert share.extra["tensor_core_share"] == 0
    assert share.extra["ops_fp32_inputs"] == 4 * 12 and share.extra["ops_half_inputs"] == 0
    assert cc.value == "7.0" and share.extra["compute_capability"] == "7.0"
    assert "compute capability 7.0" in f.message
    assert f.cost_us_per_step == pytest.approx(0.5 * 6 * 600, rel=0.01)  # saving_fraction of the FP32 time
    assert "torch.autocast" in f.advice and "GradScaler" in f.advice
    assert "allow_tf32" not in f.advice and "float32_matmul_precision" not in f.advice  # Volta has no TF32


def test_gp302_good(tmp_path):
    # The same model under autocast(fp16): s884 tensor-core kernels.
    assert _gp302(_resnet_like(tmp_path, "half", **V100)) is None


def test_gp302_good_without_tensor_cores(tmp_path):
    # FP32 on a Pascal GPU (compute capability 6.0) is all it can do.
    path = _resnet_like(tmp_path, "float", device="Quadro GP100", cc=(6, 0), total_memory=16 << 30)
    assert _gp302(path) is None


def test_gp302_ampere_advice_mentions_tf32(tmp_path):
    path = simple_training(TraceBuilder(), steps=3, dtype="float").write(tmp_path / "a100.json")
    f = _gp302(path)
    assert f is not None and "compute capability 8.0" in f.message
    assert 'set_float32_matmul_precision("high")' in f.advice
    bf16 = simple_training(TraceBuilder(), steps=3, dtype="bfloat16").write(tmp_path / "a100_bf16.json")
    assert _gp302(bf16) is None


def test_gp302_ambiguous_kernel_name_decided_by_op_dtype(tmp_path):
    # An Inductor matmul template says nothing about its dtype: the op's input types decide.
    def write(dtype: str):
        tb = TraceBuilder(device="NVIDIA H100 80GB HBM3", cc=(9, 0))
        for _ in range(3):
            with tb.step():
                for _ in range(4):
                    tb.gemm(dtype, us=400, kernel="triton_tem_fused_addmm_0")
        return tb.write(tmp_path / f"{dtype}.json")

    assert _gp302(write("float")) is not None
    assert _gp302(write("bfloat16")) is None


def test_gp302_capability_inferred_from_kernel_names(tmp_path):
    # 2021-era traces have no deviceProperties; volta_* kernels still say compute capability 7.0.
    path = _resnet_like(tmp_path, "float", device_properties=False, **V100)
    f = _gp302(path)
    assert f is not None
    assert f.evidence[1].value == "7.0" and "inferred from kernel" in f.message


@pytest.mark.parametrize(
    "name",
    [
        "volta_fp16_s884gemm_fp16_128x128_ldg8_f2f_nn",
        "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x64_32x6_nn_align4>(cutlass_80_tensorop_s1688gemm_128x64_32x6_nn_align4::Params)",
        "void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8>(x)",
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
        "sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16_stage4",
        "nvjet_tst_144x128_64x6_2x1_v_bz_bias_TNN",
        "fmhaSm100aKernel_QkvE4m3OBfloat16H64PagedKvCausalP16VarSeqQ128Kv128PersistentContext",
        "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT256x48x64_MI16x16x1_SN_LDSB1",
        "_ZN2ck16tensor_operation6device12_GLOBAL__N_149kernel_grouped_conv_fwd_multiple_abd_xdl_cshuffleINS_34Gridwise",
        "_ZN19cutlass_cudnn_train6KernelINS_4conv6kernel23ImplicitGemmConvolutionINS1_11threadblock22ImplicitGemmMultistageINS_4gemm9GemmShapeILi128ELi128ELi32EEENS4_52Conv2dWgradOutputGradientTileAccessIteratorOptimizedINS_11MatrixShapeILi128ELi32EEENS_10tfloat32_tE",
    ],
)
def test_tensor_core_kernel_names(name):
    assert is_eligible_kernel(name)
    assert uses_tensor_cores(name) is True


@pytest.mark.parametrize(
    "name",
    [
        "volta_sgemm_128x64_nn",
        "ampere_sgemm_32x32_sliced1x4_tn",
        "volta_scudnn_128x128_stridedB_splitK_small_nn_v1",
        "void implicit_convolve_sgemm<float, float, 1024, 6, 7, 3, 3, 5, 1, false, true, true>(int, int)",
        "void cudnn::cnn::wgrad_alg0_engine<float, 128, 6, 7, 3, 3, 5, false, 512>(int, int, int)",
        "void cutlass::Kernel2<cutlass_80_simt_sgemm_128x32_8x5_nn_align1>(cutlass_80_simt_sgemm_128x32_8x5_nn_align1::Params)",
        "sm90_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x32",
    ],
)
def test_fp32_kernel_names(name):
    assert is_eligible_kernel(name)
    assert uses_tensor_cores(name) is False


@pytest.mark.parametrize(
    "name",
    [
        KERNELS["elementwise"],
        "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, 512, true, 1>(cudnnTensorStruct, float const*)",
        "void fbgemm_gpu::permute_2D_lengths_kernel<int>(int, int, int const*, int const*, int*)",
        "void gemmk1_kernel<float, 256, 5, false, false, false, false, cublasGemvTensorStridedBatched<float const> >",
        "void cudnn::engines_precompiled::nchwToNhwcKernel<__nv_bfloat16, __nv_bfloat16, float, false, true>",
        "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)",
    ],
)
def test_not_eligible_kernel_names(name):
    assert not is_eligible_kernel(name)


@pytest.mark.slow  # slow pass: a real trace (or job) analysed whole; the README's fast command stays under 300 CPU s on a 2-core VM
def test_gp302_real_v100_samples_fire():
    for path in v100_samples():
        f = _gp302(path)
        assert f is not None, path
        share, cc = f.evidence
        assert cc.value == "7.0" and "compute capability 7.0" in f.message
        assert share.extra["tensor_core_share"] == 0  # the tb_plugin reports 0% tensor-core kernel time
        # ... and 68% of kernel time in tensor-core-eligible ops
        assert share.extra["eligible_share"] == pytest.approx(0.68, abs=0.03)
        assert share.value == pytest.approx(share.extra["eligible_share"], abs=0.005)
        assert share.extra["ops_half_inputs"] == 0 and share.extra["ops_fp32_inputs"] > 1000


@pytest.mark.parametrize(
    "name",
    [
        "gaunernst_bert-small-uncased__1016001.json.gz",
        "Falconsai_nsfw_image_detection__1016002.json.gz",
        "Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
        "facebook_timesformer-base-finetuned-k400__1016002.json.gz",
    ],
)
def test_gp302_real_h100_bf16_traces_do_not_fire(name):
    # These HF models ran in bf16: their GEMMs are cutlass tensorop/wmma bf16, sm90_xmma bf16 and
    # flash-attention kernels, and the matmul ops take c10::BFloat16 inputs. The one FP32 GEMM
    # (a 4 µs cutlass simt sgemm in Qwen) is noise.
    path = shared_path("hta", "TraceLens", "tests", "traces", "h100", name)
    assert _gp302(path) is None
    f = _gp302(path, min_fp32_share=0.0)  # forced: the numbers say why
    assert f.evidence[0].value < 0.01
    # nearly all the GEMM/conv work runs on tensor cores (softmax, elementwise and copy kernels are no
    # GEMM work and never count as tensor-core time, whatever their dtype: issue 37)
    extra = f.evidence[0].extra
    assert extra["tensor_core_share"] / extra["eligible_share"] > 0.95
    assert f.evidence[0].extra["ops_half_inputs"] > 10 * max(f.evidence[0].extra["ops_fp32_inputs"], 1)


def test_gp302_location_is_the_users_line(tmp_path):
    tb = TraceBuilder(**V100)
    for _ in range(3):
        with tb.step():
            with tb.python("model.py", 17, "forward"):
                tb.gemm("float", us=900, name="aten::linear")
            tb.cpu(us=50)
    f = _gp302(tb.write(tmp_path / "stack.json"))
    assert f is not None and f.location is not None
    assert (f.location.file, f.location.line) == ("model.py", 17)


@pytest.mark.parametrize("kernel", ["volta_dgemm_64x64_nn", "void gemm_kernel_nn<64, 4>(int, int)"])
def test_gp302_float64_is_named_fp64_with_float_advice(tmp_path, kernel):
    # float64 matmuls: by the kernel name (dgemm) or, for a name that does not say, by the op's double inputs
    tb = TraceBuilder(**V100)
    for _ in range(4):
        with tb.step():
            for _ in range(6):
                tb.gemm("double", us=300, name="aten::mm", kernel=kernel)
                with tb.op("aten::add_", input_types=["double", "double", "Scalar"]):
                    tb.kernel(KERNELS["elementwise"], us=100)
    f = _gp302(tb.write(tmp_path / "f64.json"))
    assert f is not None
    assert f.message.startswith("FP64 (float64) matmul/conv") and "FP32" not in f.message
    assert ".float()" in f.advice and "GradScaler" not in f.advice
    share = f.evidence[0]
    assert share.metric == "fp64_gemm_conv_share" and share.value == pytest.approx(0.75, abs=0.01)
    assert share.extra["ops_fp64_inputs"] == 24
    assert f.cost_us_per_step == pytest.approx(0.5 * 6 * 300, rel=0.01)

"""GP820 layout-transposes: synthetic convolutions with and without layout conversions, and real traces."""

from __future__ import annotations

from pathlib import Path

from gpuprof.analysis import analyze
from gpuprof.findings import Severity
from gpuprof.rules.layout import is_layout_transpose
from gpuprof_testing.realtraces import v100_samples
from gpuprof_testing.tracegen import TraceBuilder

CONV = "sm80_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize128x128x32"


def _convnet(tmp_path: Path, convert: bool, steps: int = 3) -> Path:
    """Ten FP16 convolutions per step; NCHW tensors make cuDNN convert before and after each."""
    tb = TraceBuilder()
    for _ in range(steps):
        with tb.step():
            for _ in range(10):
                with tb.op("aten::cudnn_convolution", input_types=["c10::Half", "c10::Half"]):
                    if convert:
                        tb.kernel("void cudnn::ops::nchwToNhwcKernel<__half, __half, float, false, true>", us=60)
                    tb.kernel(CONV, us=200)
                    if convert:
                        tb.kernel("void cudnn::ops::nhwcToNchwKernel<__half, __half, float, true, false>", us=60)
    return tb.write(tmp_path / f"conv_{convert}.json")


def _gp820(path: Path) -> list:
    return list(analyze(path, select=["GP820"]).findings)


def test_vocabulary() -> None:
    assert is_layout_transpose("void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true, (cudnnKernelDataType_t)2>")
    assert is_layout_transpose("void nhwcToNchwKernel<__half, __half, float, true, false>")
    assert is_layout_transpose("transpose_NCHW2NHWC")
    assert not is_layout_transpose(CONV) and not is_layout_transpose("volta_scudnn_128x64_relu_interior_nn_v1")


def test_gp820_bad(tmp_path: Path) -> None:
    (f,) = _gp820(_convnet(tmp_path, convert=True))
    ev = f.evidence[0]
    assert ev.value == 20 and ev.extra["to_nhwc"] == 30 and ev.extra["to_nchw"] == 30
    assert ev.extra["gpu_us_per_step"] == 1200.0 and f.cost_us_per_step == 1200.0
    assert f.severity is Severity.WARNING and "channels_last" in f.advice


def test_gp820_good(tmp_path: Path) -> None:
    assert _gp820(_convnet(tmp_path, convert=False)) == []


def test_gp820_real_v100_resnet50_is_info() -> None:
    # the tb_plugin ResNet-50 samples (FP32, NCHW): 3 conversions per step, ~0.1% of the step: info, not a warning
    for path in v100_samples()[:1]:
        (f,) = _gp820(path)
        assert f.evidence[0].value == 3 and f.severity is Severity.INFO
        assert 50 < f.cost_us_per_step < 200

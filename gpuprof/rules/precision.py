"""GP302: matrix multiplies and convolutions run in FP32 without tensor cores."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Iterable

from gpuprof.codespec import Option
from gpuprof.findings import Evidence, Finding, Severity, SourceLocation
from gpuprof.report import DeviceInfo
from gpuprof.rules.base import Rule, RuleContext, event_refs, register
from gpuprof.rules.cause import CauseFigure, kernels_per_step
from gpuprof.trace.metrics import TraceMetrics
from gpuprof.trace.model import DTYPE_DOUBLE, DTYPE_FLOAT, DTYPE_HALF, Event, dur_of, name_of, op_dtypes
from gpuprof.trace.precision import NARROW_FORMATS, TENSOR_CORE_FORMATS, name_precision
from gpuprof.units import fmt_us

__all__ = ["NoTensorCores", "PrecisionStats", "precision_stats", "is_eligible_kernel", "uses_tensor_cores",
           "device_capability"]

_LOCATION_TRIES = 200  # FP32 kernels tried when looking for a user source line
_NAME_CHARS = 300  # the markers sit in the first part of a (possibly mangled, templated) kernel name

# Kernels doing GEMM or convolution work, the work tensor cores / matrix cores accelerate.
_ELIGIBLE = re.compile(
    r"gemm|conv(?!ert)|cudnn|cutlass|xmma|wgmma|kernel2|dgrad|wgrad|fprop|winograd|nvjet|fmha"
    r"|flash_fwd|flash_bwd|flash_attn|flashattn|cijk_|mfma|xdlops|_xdl|ck::|ck_tile|2ck16tensor_operation|triton_tem_"
    r"|igemm|fft2d|scudnn"
)
# ... except helpers, layout shuffles, normalisation and matrix-vector kernels that happen to match.
_NOT_ELIGIBLE = re.compile(
    r"fbgemm|gemv|gemmk1|computeoffsets|computeboffsets|computewgrad|computesplitk|nchwtonhwc|nhwctonchw"
    r"|bn_fw|bn_bw|batch_norm|batchnorm|layer_norm|layernorm|rmsnorm|softmax|pool|scalepackedtensor|im2col"
    r"|transpose|split_embedding|reduce|depthwise|elementwise|fill|memset|copy"
)
# Names that say the kernel runs on tensor cores (NVIDIA) or matrix cores (AMD), Volta to Blackwell, CDNA1-3: the
# MMA instruction shapes cuBLAS/cuDNN/CUTLASS put in their names, the MMA instruction families, library kernel
# families that only exist as tensor-core kernels, and hipBLASLt's MFMA tile (``_MI16x16x...``). A dtype in the name
# (``bf16``, ``half``) says nothing by itself: softmax, elementwise and SIMT kernels carry dtypes too (issue 37).
_TENSOR_CORE = re.compile(
    r"(?<!\d)[hsi]?(?:884|1688|16816|16832|8816|161616)(?!\d)|hmma|imma|tensorop|wmma|nvjet|fmha|flash_fwd"
    r"|flash_bwd|flash_attn|flashattn|wgmma|_mi\d+x\d+|mfma|xdlops|_xdl|gtcx|tf32|tfloat32|e4m3|e5m2|e2m1"
)
# Matrix work beyond the GP302-eligible GEMM/convolution names: batched and Triton matmuls and attention kernels, whose
# names may still say tensor cores (``bmm_E4m3...``) or leave it unknown (``kernel_unified_attention_3d``).
_MATRIX = re.compile(r"matmul|bmm|attention|attn")
# Generic tensor-core GEMM families that are FP32 (no tensor cores) when every operand is f32.
_XMMA = re.compile(r"xmma|sm\d+_gemm|sm\d+_xmma")
_FP32_ONLY_XMMA = re.compile(r"f32f32_f32f32")
# Names that say the kernel runs on the SIMT path (FP32, FP64, complex, or FP16 storage with FP32 SIMT math such
# as ``maxwell_fp16_sgemm_fp16``): checked before the tensor-core markers, since such names can carry a dtype.
_SIMT = re.compile(r"simt|sgemm|scudnn|gemmsn|dgemm|cgemm|zgemm|gemv")
# Weaker FP32 hints: a float template argument or cuBLAS's single-precision tag, when nothing says tensor cores.
_FP32 = re.compile(r"<float|_s_b_|_sb_")
# Names that say the kernel computes in FP64 (or complex FP64): float64 tensors, whose fix is .float(), not AMP.
_FP64 = re.compile(r"dgemm|zgemm|<double|double>|double,|f64f64|fp64|dmma")
# Formats no FP32 kernel computes in: a GEMM named in one is never GP302's FP32 time.
_NEVER_FP32 = frozenset({"fp8", "fp4", "int8"})
# Kernel-name prefixes that reveal the architecture when the trace has no deviceProperties.
_ARCH_PREFIX = {"volta_": (7, 0), "turing_": (7, 5), "ampere_": (8, 0), "hopper_": (9, 0)}
_SM_PREFIX = re.compile(r"(?:^|[^a-z])sm_?(\d{2,3})_")
_AMD_MI = re.compile(r"mi\s?(\d{2,3})", re.I)

# Operators whose kernels tensor cores can run, used when the kernel name alone is ambiguous.
TC_OPS = frozenset(
    {
        "aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::addbmm", "aten::matmul", "aten::linear",
        "aten::_scaled_mm", "aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::convolution",
        "aten::_convolution", "aten::cudnn_convolution", "aten::cudnn_convolution_transpose",
        "aten::cudnn_convolution_backward_input", "aten::cudnn_convolution_backward_weight",
        "aten::convolution_backward", "aten::miopen_convolution", "aten::conv_transpose2d",
        "aten::_scaled_dot_product_flash_attention", "aten::_scaled_dot_product_efficient_attention",
        "aten::_scaled_dot_product_cudnn_attention", "aten::einsum",
    }
)  # fmt: skip


@functools.lru_cache(maxsize=16384)  # a trace has few distinct kernel names and many kernels
def is_eligible_kernel(name: str) -> bool:
    """A GEMM/convolution kernel (by name) that tensor cores could run."""
    low = name[:_NAME_CHARS].lower()
    return bool(_ELIGIBLE.search(low)) and not _NOT_ELIGIBLE.search(low)


@functools.lru_cache(maxsize=16384)
def uses_tensor_cores(name: str) -> bool | None:
    """Whether the kernel runs on tensor (NVIDIA) or matrix (AMD) cores, decided by the kernel's name alone (docs/views.md).

    False for SIMT GEMMs (``sgemm``, ``scudnn``, ``gemmSN``, ``simt``) and for every kernel that is no GEMM,
    convolution or attention kernel (softmax, elementwise, normalisation, copies, reductions: they never run on
    tensor cores, whatever dtype they handle); True when the name names a tensor-core instruction or a
    tensor-core-only library family, or a TF32/FP8/FP4 element type (``tfloat32_t``, ``e4m3``: formats only tensor
    cores compute); None
    ("unknown") for a GEMM, convolution or attention kernel whose name does not tell (a Triton template or matmul,
    a generic ``gemm_kernel``). A 16-bit dtype in a name never decides. The formats come from the precision
    catalogue (:mod:`gpuprof.trace.precision`).
    """
    low = name[:_NAME_CHARS].lower()
    if _SIMT.search(low):
        return False
    if not is_eligible_kernel(name) and not _MATRIX.search(low):
        return False
    if _XMMA.search(low) and _FP32_ONLY_XMMA.search(low) and "tf32" not in low:
        return False
    if _TENSOR_CORE.search(low) or _XMMA.search(low) or name_precision(name) in TENSOR_CORE_FORMATS:
        return True  # a format only tensor cores compute (the precision catalogue): DeepGEMM's ``fp8_gemm_kernel``
    if _FP32.search(low):
        return False
    return None


_op_flags = op_dtypes


@dataclass
class PrecisionStats:
    """Kernel time of the main device over the steps, split by tensor-core use.

    * ``kernel_us``: all compute kernels (not collectives).
    * ``eligible_us``: GEMM/convolution kernels (by name, or launched by a
      matmul/convolution operator), the work tensor cores could run.
    * ``tensor_core_us``: eligible kernels that ran on tensor cores or in a
      format narrower than FP32: the name says so (a tensor-core marker, or a
      format of the precision catalogue: FP8, FP4, INT8, BF16, FP16, TF32),
      or the name is ambiguous and the launching operator took FP16/BF16/FP8
      inputs.
    * ``unknown_us``: eligible kernels whose name does not tell and whose
      launching operator recorded no input dtype (a trace without
      ``record_shapes``): neither FP32 nor tensor cores, never a verdict.
    * ``fp64_us``: eligible kernels computing in FP64: the name says so
      (``dgemm``, ``<double>``), or the name is ambiguous and the launching
      operator took float64 inputs only. Never counted as FP32: its fix is
      ``.float()``, not mixed precision.
    * ``fp32_us``: eligible minus tensor-core and FP64 time: GEMM/conv work on the FP32 path.
    * ``ops_float`` / ``ops_half`` / ``ops_double``: matmul/convolution operators whose inputs
      were FP32 only / included FP16, BF16 or FP8 / were float64 (from "Input type").
    """

    kernel_us: float = 0.0
    eligible_us: float = 0.0
    tensor_core_us: float = 0.0
    fp32_us: float = 0.0
    fp64_us: float = 0.0
    unknown_us: float = 0.0
    fp64_kernels: list[Event] = field(default_factory=list)
    fp32_kernels: list[Event] = field(default_factory=list)
    fp32_by_name: dict[str, float] = field(default_factory=dict)
    ops_float: int = 0
    ops_half: int = 0
    ops_double: int = 0
    location: SourceLocation | None = None  # user line launching the longest FP32 (FP64) GEMM/conv kernel


def precision_stats(m: TraceMetrics) -> PrecisionStats | None:
    dev = m.main_device
    if dev is None or not m.steps:
        return None
    st = PrecisionStats()
    kernels = m.step_kernels
    st.kernel_us = sum(map(dur_of, kernels))
    # Per distinct name: the verdict when the name settles it, else None (the launching op decides).
    verdict: dict[str, str | None] = {}
    for name in set(map(name_of, kernels)):
        tc, eligible = uses_tensor_cores(name), is_eligible_kernel(name)
        if (eligible or tc is False) and _FP64.search(name[:_NAME_CHARS].lower()):
            verdict[name] = "fp64"
        elif eligible or tc is True:
            fmt = name_precision(name)  # the catalogue: a GEMM named in a narrower format is never FP32 work (an
            # FP8/FP4/INT8 one not even when its name also carries an FP32 hint, a ``<float>`` scale or accumulator)
            narrow = fmt in NARROW_FORMATS and (tc is None or fmt in _NEVER_FP32)
            verdict[name] = "tc" if narrow else None if tc is None else ("tc" if tc else "fp32")
        elif _NOT_ELIGIBLE.search(name[:_NAME_CHARS].lower()):
            verdict[name] = "no"  # not GEMM/conv work, whatever launched it
        else:
            verdict[name] = None  # eligible only when launched by a matmul/conv operator
    fp32_by_name = st.fp32_by_name
    for k in kernels:
        v = verdict[k.name]
        if v == "no":
            continue
        dur = k.dur
        if v is None:
            launch = m.launch_by_corr.get(k.corr)
            op = m.op_by_ext.get(launch.ext if launch is not None else k.ext)
            tc = uses_tensor_cores(k.name)
            if not (is_eligible_kernel(k.name) or tc is True or (op is not None and op.name in TC_OPS)):
                continue
            flags = _op_flags(op)
            if tc is None and not flags:  # neither the name nor a recorded input dtype tells: no verdict
                st.eligible_us += dur
                st.unknown_us += dur
                continue
            if tc is None:
                tc = bool(flags & DTYPE_HALF)
            v = "tc" if tc else "fp64" if flags & DTYPE_DOUBLE and not flags & (DTYPE_FLOAT | DTYPE_HALF) else "fp32"
        st.eligible_us += dur
        if v == "tc":
            st.tensor_core_us += dur
        elif v == "fp64":
            st.fp64_us += dur
            st.fp64_kernels.append(k)
        else:
            st.fp32_us += dur
            st.fp32_kernels.append(k)
            fp32_by_name[k.name] = fp32_by_name.get(k.name, 0.0) + dur
    tc_ops = TC_OPS & {s.name for s in m.op_stats}  # only the names this trace has
    # The longest FP32 (FP64 when it dominates) kernels first; backward kernels launched from autograd
    # threads have no Python stack.
    located = st.fp64_kernels if st.fp64_us > st.fp32_us else st.fp32_kernels
    for k in sorted(located, key=lambda e: -e.dur)[:_LOCATION_TRIES]:
        launch = m.launch_by_corr.get(k.corr)
        if launch is not None:
            st.location = m.stacks.location(launch.pid, launch.tid, launch.ts, op=m.op_by_ext.get(launch.ext))
            if st.location is not None:
                break
    for o in m.trace.ops:
        if o.name in tc_ops:
            flags = _op_flags(o)
            if flags & DTYPE_HALF:
                st.ops_half += 1
            elif flags & DTYPE_FLOAT:
                st.ops_float += 1
            elif flags & DTYPE_DOUBLE:
                st.ops_double += 1
    return st


def device_capability(m: TraceMetrics) -> tuple[DeviceInfo | None, tuple[int, int] | None, str]:
    """The main device, its tensor-core generation as (major, minor), and where that came from.

    NVIDIA: the compute capability from deviceProperties. AMD: CDNA Instinct
    parts (MI100 and later) are reported as (9, 0)-equivalent "capable"; older or
    unknown AMD parts as None. Without deviceProperties the architecture is read
    from kernel-name prefixes (``volta_sgemm`` -> 7.0, ``sm90_xmma`` -> 9.0).
    """
    dev = None
    for d in m.trace.devices:
        if d.id == m.main_device:
            dev = d
            break
    if dev is None and m.trace.devices:
        dev = m.trace.devices[0]
    if dev is not None:
        if dev.vendor == "amd":
            hit = _AMD_MI.search(dev.name)
            if hit and int(hit.group(1)) >= 100:
                return dev, (9, 0), f"{dev.name} (CDNA matrix cores)"
        elif dev.compute_capability is not None:
            cc = dev.compute_capability
            return dev, cc, f"{dev.name or 'GPU'} (compute capability {cc[0]}.{cc[1]})"
    for k in m.trace.kernels[:5000]:
        low = k.name.lower()
        for prefix, cc in _ARCH_PREFIX.items():
            if low.startswith(prefix) or f" {prefix}" in low:
                return dev, cc, f"compute capability {cc[0]}.{cc[1]}, inferred from kernel {k.name[:40]!r}"
        hit = _SM_PREFIX.search(low)
        if hit:
            num = int(hit.group(1))
            cc = (num // 10, num % 10)
            return dev, cc, f"compute capability {cc[0]}.{cc[1]}, inferred from kernel {k.name[:40]!r}"
    return dev, None, "unknown GPU"


def off_tensor_core_per_step(m: TraceMetrics) -> list[float] | None:
    """GP302's cause per step: the GEMM/conv kernels' time off the tensor cores (FP32 and FP64), by step."""
    st = m.memo(precision_stats)
    return None if st is None else kernels_per_step(m, st.fp32_kernels + st.fp64_kernels)


@register
class NoTensorCores(Rule):
    """Matrix multiplies and convolutions run in FP32 on a GPU with tensor cores.

    Tensor cores (NVIDIA compute capability 7.0 and later, AMD Instinct MI100
    and later) run FP16/BF16 (and on Ampere+ TF32) GEMMs and convolutions
    several times faster than the FP32 path. Detected from kernel names: the
    share of kernel time in GEMM/convolution kernels whose names show the FP32
    path (``volta_sgemm``, ``scudnn``, ``implicit_convolve_sgemm``,
    ``cutlass_*_simt_*``) or no tensor-core marker (``s1688``, ``h884``,
    ``16816``, ``tensorop``, ``hmma``, ``xmma`` with f16/bf16/tf32, ``nvjet``,
    flash attention, AMD ``Cijk_*_MI16x16`` / MFMA / composable-kernel), with
    the launching operator's input dtypes deciding ambiguous names. The
    estimated saving is a conservative fraction of that FP32 time.

    GEMM/convolution time in FP64 (``dgemm``, ``<double>`` kernels, or
    float64 inputs) is not FP32: when it outweighs the FP32 time, the finding
    says "FP64 (float64)" and its fix is ``.float()`` (the tensors should not
    be float64), not mixed precision.
    """

    code = "GP302"
    name = "no-tensor-cores"
    title = "FP32 GEMM/convolution time on a tensor-core GPU"
    cause = CauseFigure("GEMM/conv kernel time off tensor cores (FP32, FP64)", off_tensor_core_per_step)
    severity = Severity.WARNING
    options = (
        Option("min_fp32_share", 0.15, "report when FP32 GEMM/conv kernels take at least this share of kernel time"),
        Option("min_compute_capability", 7.0, "NVIDIA GPUs from this compute capability have tensor cores"),
        Option("saving_fraction", 0.5, "share of the FP32 GEMM/conv time that mixed precision is assumed to save"),
    )
    bad_example = """
        model = torchvision.models.resnet50().cuda()        # FP32 weights and activations
        for x, y in loader:
            loss = F.cross_entropy(model(x.cuda()), y.cuda())   # volta_sgemm / scudnn kernels
            loss.backward(); opt.step(); opt.zero_grad()
    """
    good_example = """
        model = torchvision.models.resnet50().cuda()
        torch.backends.cuda.matmul.allow_tf32 = True        # Ampere+: TF32 for the remaining FP32 matmuls
        torch.backends.cudnn.allow_tf32 = True
        for x, y in loader:
            with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
                loss = F.cross_entropy(model(x.cuda()), y.cuda())
            loss.backward(); opt.step(); opt.zero_grad()
    """

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        m = ctx.metrics
        st = m.memo(precision_stats)  # the cause (off_tensor_core_per_step) reads the same figures
        if st is None or st.kernel_us <= 0 or st.eligible_us <= 0:
            return
        dev, cc, where = device_capability(m)
        if cc is None or cc[0] + cc[1] / 10 < ctx.opt("min_compute_capability"):
            return
        if st.fp64_us > st.fp32_us and st.fp64_us / st.kernel_us >= ctx.opt("min_fp32_share"):
            yield self._fp64_finding(ctx, st, where)
            return
        fp32_share = st.fp32_us / st.kernel_us
        if fp32_share < ctx.opt("min_fp32_share"):
            return
        n = m.num_steps
        tc_share = st.tensor_core_us / st.kernel_us
        eligible_share = st.eligible_us / st.kernel_us
        saving = st.fp32_us / n * ctx.opt("saving_fraction")
        top = sorted(st.fp32_by_name.items(), key=lambda kv: -kv[1])[:3]
        ops = ""
        if st.ops_float or st.ops_half:
            ops = f"; {st.ops_float} of {st.ops_float + st.ops_half} matmul/conv ops take FP32 inputs"
        if cc[0] >= 8:  # NVIDIA Ampere and later, AMD CDNA: BF16 and TF32 tensor (matrix) cores
            advice = (
                'Run the forward pass under torch.autocast(device_type="cuda", dtype=torch.bfloat16) '
                "(with float16 instead, add torch.amp.GradScaler('cuda') around backward/step); "
                "at the very least enable TF32 for the FP32 matmuls and convolutions: "
                'torch.set_float32_matmul_precision("high") and torch.backends.cudnn.allow_tf32 = True'
            )
        else:  # Volta and Turing (V100, T4): FP16 tensor cores only, no BF16 or TF32 ones
            advice = (
                'Run the forward pass under torch.autocast(device_type="cuda", dtype=torch.float16), and when '
                "training scale the loss with torch.amp.GradScaler('cuda') (scaler.scale(loss).backward(); "
                f"scaler.step(opt); scaler.update()): this GPU (compute capability {cc[0]}.{cc[1]}) has float16 tensor "
                "cores but none for bfloat16 or TF32"
            )
        advice += ". Keep channel counts and matrix dimensions multiples of 8 so the tensor-core kernels apply."
        yield self.finding(
            ctx,
            f"FP32 matmul/conv without tensor cores on {where}: {fp32_share:.0%} of kernel time "
            f"({fmt_us(st.fp32_us / n)} per step) in FP32 GEMM/conv kernels, {tc_share:.0%} on tensor cores"
            f"{ops}",
            advice,
            evidence=[
                Evidence("fp32_gemm_conv_share", round(fp32_share, 4), ctx.opt("min_fp32_share"), "fraction",
                         events=event_refs(st.fp32_kernels),
                         extra={"compute_capability": f"{cc[0]}.{cc[1]}", "device": dev.name if dev is not None else None,
                                "tensor_core_share": round(tc_share, 4), "eligible_share": round(eligible_share, 4),
                                "fp32_us_per_step": round(st.fp32_us / n, 1),
                                "unknown_share": round(st.unknown_us / st.kernel_us, 4),
                                "ops_fp32_inputs": st.ops_float, "ops_half_inputs": st.ops_half,
                                "top_fp32_kernels": {k[:120]: round(v / n, 1) for k, v in top}}),
                Evidence("compute_capability", f"{cc[0]}.{cc[1]}", ctx.opt("min_compute_capability"), "", extra={"source": where}),
            ],
            cost_us_per_step=saving,
            cost_label=f"estimated saving with mixed precision ({ctx.opt('saving_fraction'):.0%} of the FP32 GEMM/conv time)",
            location=st.location,
        )

    def _fp64_finding(self, ctx: RuleContext, st: PrecisionStats, where: str) -> Finding:
        """The GEMM/conv time is float64: named FP64 (never FP32), with .float() as the fix."""
        n = ctx.metrics.num_steps
        share = st.fp64_us / st.kernel_us
        ops = ""
        if st.ops_double:
            ops = f"; {st.ops_double} of {st.ops_double + st.ops_float + st.ops_half} matmul/conv ops take float64 inputs"
        return self.finding(
            ctx,
            f"FP64 (float64) matmul/conv on {where}: {share:.0%} of kernel time ({fmt_us(st.fp64_us / n)} per step) "
            f"in FP64 GEMM/conv kernels{ops}",
            "The tensors are float64 (torch.float64: often from numpy arrays or dtype=torch.double). Convert the model "
            "and its inputs to float32 with .float() (model.float(); x = x.float()), or create them as float32: FP64 "
            "runs at a fraction of the FP32 rate (1/2 on datacenter GPUs, 1/32 to 1/64 on others) and never on FP16/BF16 "
            "tensor cores. Then mixed precision (torch.autocast) can apply.",
            evidence=[Evidence("fp64_gemm_conv_share", round(share, 4), ctx.opt("min_fp32_share"), "fraction",
                               events=event_refs(st.fp64_kernels),
                               extra={"fp64_us_per_step": round(st.fp64_us / n, 1), "ops_fp64_inputs": st.ops_double,
                                      "fp32_us_per_step": round(st.fp32_us / n, 1)})],
            cost_us_per_step=st.fp64_us / n * ctx.opt("saving_fraction"),
            cost_label=f"estimated saving in float32 ({ctx.opt('saving_fraction'):.0%} of the FP64 GEMM/conv time)",
            location=st.location,
        )

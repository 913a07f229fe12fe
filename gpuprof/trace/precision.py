"""The precision catalogue: what math a GEMM or kernel runs, read from its name (docs/views.md, "Precision").

One table (:data:`FAMILIES`) of the number formats kernels compute in, NVIDIA's
and AMD's naming alike, that every view reads: the kernels view's precision,
the MFU peak each kernel is priced at (:mod:`gpuprof.trace.peaks`), and GP302,
which never counts a kernel of a narrow or tensor-core-only format as FP32.

* ``fp64``: ``dgemm``/``zgemm``, ``<double>``, ``f64f64``; hipBLASLt/Tensile ``Cijk_..._D``.
* ``fp8`` (E4M3/E5M2, FNUZ too): ``e4m3``/``e5m2`` (``float_e4m3_t``, ``__nv_fp8_e4m3``, TensorRT-LLM's
  ``bmm_E4m3...``, ``fmha..._QkvE4m3``), ``fp8`` (DeepGEMM's ``deep_gemm::fp8_gemm_kernel``, vLLM's
  ``cutlass_3x_gemm_fp8_blockwise``, cuBLASLt ``sm90_xmma_gemm_e4m3e4m3...``), ``f8f8``; Tensile ``Cijk_..._F8``/
  ``_B8`` (``F8N``/``B8N``: FNUZ). A scale factor's ``ue4m3``/``ue8m0`` is no FP8 operand.
* ``fp4`` (NVFP4/MXFP4, E2M1): ``e2m1``, ``nvfp4``, ``mxfp4``, ``fp4``. With an FP8 operand beside it
  (``MxE2m1MxE4m3``) the math is FP8's (Blackwell's mixed FP8/FP6/FP4 MMA runs at the FP8 rate).
* ``int8``: ``imma``, the MMA shapes ``i8816``/``i16832``/``i16864``, ``int8_gemm``, ``i8i8``, Tensile ``_I8``.
* ``bf16``: ``bf16``, ``bfloat16``; Tensile ``_BBS_``/``_BSS_``/``_B_`` (bfloat16 operands).
* ``tf32``: ``tf32``, ``tfloat32``; Tensile ``_X`` (XF32 operands).
* ``fp16``: ``h884``/``h1688``/``h16816``, ``fp16``, ``f16f16``, ``half``; Tensile ``_HHS_``/``_HSS_``/``_H_``.
* ``fp32``: ``sgemm``, ``scudnn``, ``<float>``, cuBLAS ``_s_b_``/``_sb_``, ``simt``; Tensile ``_S``/``_SB``.

Weight-only kernels (16-bit activations times 4- or 8-bit weights: Triton's ``bf16xbf16xmxfp4``; Tensile's
``F8H``: an FP8 and an FP16 operand) compute in the 16-bit format: the narrow operand is widened
first. Otherwise the first family in table order that the name states decides (a GEMM naming both FP8 inputs
and a BF16 output is FP8). A name that states none leaves the launching operators' input dtype to decide,
with FP32 inputs on a tensor-core kernel counted as TF32.
"""

from __future__ import annotations

import functools
import re

__all__ = ["FAMILIES", "TENSOR_CORE_FORMATS", "NARROW_FORMATS", "kernel_precision", "name_precision"]

# Tensile/hipBLASLt kernel names: ``Cijk_<A index>_<B index>_<types>_...``; the type codes in the order of the
# operand, destination and compute types (``BBS``: bf16 operands, bf16 result, fp32 accumulation; ``F8H``: an FP8
# and an FP16 operand; ``SB``: fp32, batched).
_TENSILE = re.compile(r"(?:^|[^a-z0-9])cijk_a[a-z]+_b[a-z]+_([a-z0-9]+)")
_TENSILE_CODE = re.compile(r"4xi8|f8n|b8n|f8|b8|i8|[sdhbxicz]")
_TENSILE_FORMAT = {"4xi8": "int8", "f8n": "fp8", "b8n": "fp8", "f8": "fp8", "b8": "fp8", "i8": "int8", "s": "fp32",
                   "d": "fp64", "h": "fp16", "b": "bf16", "x": "tf32", "c": "fp32", "z": "fp64"}

# 16-bit activations times narrow weights: the math is 16-bit (the weights are widened)
_WEIGHT_ONLY = re.compile(r"(bf16|fp16|f16)x(?:bf16|fp16|f16)x(?:mx|nv)?(?:fp4|fp8|int4|int8|e2m1|e4m3)")

# (family, pattern) in the order that decides a name stating several (see the module docstring)
FAMILIES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("fp64", re.compile(r"dgemm|zgemm|<double|double>|fp64|f64f64")),
    ("fp8", re.compile(r"(?<!u)e4m3|e5m2|fp8|f8f8|float8")),
    ("fp4", re.compile(r"e2m1|nvfp4|mxfp4|fp4")),
    # (no bare ``s8``: mangled names carry ``S8_`` substitutions, as composable_kernel's ``...ES8_S8_...``)
    ("int8", re.compile(r"imma|(?<!\d)i(?:8816|16832|16864)(?!\d)|int8gemm|int8_gemm|gemm_int8|i8i8")),
    ("bf16", re.compile(r"bf16|bfloat16|_bbs_|_bss_")),
    ("tf32", re.compile(r"tf32|tfloat32")),
    ("fp16", re.compile(r"(?<!\d)h(?:884|1688|16816)|fp16|f16f16|<half|<c10::half|_hhs_|_hss_|half")),
    ("fp32", re.compile(r"sgemm|scudnn|<float|float>|_s_b_|_sb_|simt")),
)

# formats only tensor (matrix) cores compute: a GEMM in one of them runs on them whatever else its name says
TENSOR_CORE_FORMATS = frozenset({"fp8", "fp4", "tf32"})
# formats narrower than FP32: a GEMM in one of them is never FP32 work (GP302)
NARROW_FORMATS = frozenset({"fp8", "fp4", "int8", "bf16", "fp16", "tf32"})
_WIDTH = {"fp4": 0, "int8": 1, "fp8": 1, "fp16": 2, "bf16": 2, "tf32": 3, "fp32": 4, "fp64": 5}


def _tensile(low: str) -> str | None:
    """The math format of a Tensile/hipBLASLt kernel name, None when it is none or names no type."""
    hit = _TENSILE.search(low)
    if hit is None:
        return None
    codes = _TENSILE_CODE.findall(hit.group(1))
    if not codes or "".join(codes) != hit.group(1):
        return None
    first = _TENSILE_FORMAT.get(codes[0])
    second = _TENSILE_FORMAT.get(codes[1]) if len(codes) == 2 else None
    if first is not None and second is not None and _WIDTH[first] < _WIDTH[second] <= _WIDTH["bf16"]:
        return second  # two operand formats (``F8H``): the narrow one is widened
    return first


@functools.lru_cache(maxsize=16384)
def name_precision(name: str) -> str | None:
    """The precision the kernel name states (module docstring), None when it states none."""
    low = name[:300].lower()
    by_tensile = _tensile(low)
    if by_tensile is not None:
        return by_tensile
    weight_only = _WEIGHT_ONLY.search(low)
    if weight_only is not None:
        return "bf16" if weight_only.group(1) == "bf16" else "fp16"
    for precision, pattern in FAMILIES:
        if pattern.search(low):
            return precision
    return None


def kernel_precision(name: str, op_dtype: str | None, tensor_cores: bool | None) -> str | None:
    """The kernel's precision (module docstring); None when neither its name nor its operator tells."""
    by_name = name_precision(name)
    if by_name is not None:
        return by_name
    if op_dtype == "fp32" and tensor_cores:
        return "tf32"
    return op_dtype if op_dtype != "mixed" else None

"""What math a kernel runs: FP64, FP32, TF32, BF16, FP16 or FP8 (docs/views.md).

The kernel's name decides when it says (``dgemm``/``<double>`` FP64,
``sgemm``/``scudnn`` FP32, ``tf32``, ``bf16``, ``h884``/``fp16``, ``e4m3``/``fp8``);
otherwise the launching operators' input dtype does, with FP32 inputs on a
tensor-core kernel counted as TF32.
"""

from __future__ import annotations

import functools
import re

__all__ = ["kernel_precision", "name_precision"]

_NAME_PRECISION = (
    ("fp64", re.compile(r"dgemm|zgemm|<double|double>|fp64|f64f64")),
    ("fp8", re.compile(r"e4m3|e5m2|fp8|f8f8")),
    ("bf16", re.compile(r"bf16|bfloat16|_bbs_|_bss_")),
    ("tf32", re.compile(r"tf32|tfloat32")),
    ("fp16", re.compile(r"(?<!\d)h(?:884|1688|16816)|fp16|f16f16|<half|<c10::half|_hhs_|_hss_|half")),
    ("fp32", re.compile(r"sgemm|scudnn|<float|float>|_s_b_|_sb_|simt")),
)


@functools.lru_cache(maxsize=16384)
def name_precision(name: str) -> str | None:
    """The precision the kernel name states, None when it states none."""
    low = name[:300].lower()
    for precision, pattern in _NAME_PRECISION:
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

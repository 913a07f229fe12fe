"""FLOP estimates of matrix multiplies from their input shapes (docs/views.md).

``estimate_flops(name, input_dims_text)`` reads the operator's ``Input Dims``
(record_shapes) and counts a multiply-add as 2 FLOPs:

* ``aten::mm`` ``[M,K] @ [K,N]``: 2·M·K·N; ``aten::addmm`` the same from its 2nd and 3rd inputs;
* ``aten::bmm`` ``[B,M,K] @ [B,K,N]``: 2·B·M·K·N; ``aten::baddbmm`` from its 2nd and 3rd inputs;
* ``aten::linear`` ``x[..., K]``, ``W[N, K]``: 2·(x's elements / K)·K·N;
* ``aten::matmul`` of two inputs with at least 2 dims each: 2·(batch of the first)·M·K·N.

Convolutions are not estimated: ``Input Dims`` holds no stride, padding or
dilation, so the output size is unknown; their FLOPs come only from a trace
recorded ``with_flops=True`` (not read yet: None). The backward operators'
FLOPs are not estimated either; their kernels show time without TFLOP/s.
"""

from __future__ import annotations

import functools
import json
import math

__all__ = ["estimate_flops", "MATMUL_OPS"]

MATMUL_OPS = frozenset({"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::linear", "aten::matmul"})


@functools.lru_cache(maxsize=65536)  # per distinct (operator, shapes) of a trace
def estimate_flops(name: str, dims_text: str | None) -> float | None:
    """FLOPs of one call (module docstring), None when the operator or its shapes give no estimate."""
    if name not in MATMUL_OPS or not dims_text:
        return None
    try:
        dims = json.loads(dims_text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(dims, list):
        return None
    shapes: list[list[int] | None] = [d if isinstance(d, list) and all(type(x) is int and x >= 0 for x in d) else None for d in dims]
    if name in ("aten::addmm", "aten::baddbmm"):
        shapes = shapes[1:]
    if len(shapes) < 2 or shapes[0] is None or shapes[1] is None:
        return None
    a: list[int] = shapes[0]
    b: list[int] = shapes[1]
    if name in ("aten::mm", "aten::addmm") and len(a) == 2 and len(b) == 2 and a[1] == b[0]:
        return 2.0 * float(a[0] * a[1] * b[1])
    if name in ("aten::bmm", "aten::baddbmm") and len(a) == 3 and len(b) == 3 and a[2] == b[1]:
        return 2.0 * float(a[0] * a[1] * a[2] * b[2])
    if name == "aten::linear" and len(a) >= 1 and len(b) == 2 and a[-1] == b[1]:
        return 2.0 * float(math.prod(a) * b[0])
    if name == "aten::matmul" and len(a) >= 2 and len(b) >= 2 and a[-1] == b[-2]:
        return 2.0 * float(math.prod(a[:-1]) * a[-1] * b[-1])
    return None

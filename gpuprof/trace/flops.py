"""FLOP estimates of matrix multiplies and convolutions from their input shapes (docs/views.md).

``estimate_flops(name, input_dims_text, concrete_inputs_text)`` reads the
operator's ``Input Dims`` (record_shapes) and, for convolutions, its
``Concrete Inputs`` (the scalar and list arguments torch >= 2.1 records with
them), and counts a multiply-add as 2 FLOPs:

* ``aten::mm`` ``[M,K] @ [K,N]``: 2·M·K·N; ``aten::addmm`` the same from its 2nd and 3rd inputs;
* ``aten::bmm`` ``[B,M,K] @ [B,K,N]``: 2·B·M·K·N; ``aten::baddbmm`` from its 2nd and 3rd inputs;
* ``aten::linear`` ``x[..., K]``, ``W[N, K]``: 2·(x's elements / K)·K·N;
* ``aten::matmul`` of two inputs with at least 2 dims each: 2·(batch of the first)·M·K·N;
* convolutions (``aten::conv1d/2d/3d``, ``convolution``, ``_convolution``,
  ``cudnn_convolution``, ``mkldnn_convolution``, ``miopen_convolution``), input
  ``[N, Cin, *S]``, weight ``[Cout, Cin/groups, *K]``: 2·N·Cout·prod(S_out)·(Cin/groups)·prod(K),
  with S_out = ⌊(S + 2·padding − dilation·(K−1) − 1) / stride⌋ + 1 from the
  recorded stride, padding and dilation (torch's own ``with_flops`` formula
  for ``aten::conv2d``). Without them (no ``Concrete Inputs``: torch before
  2.1, or ``padding="same"``, which is recorded as an empty string) there is
  no estimate: the output size is not guessed;
* transposed convolutions (``aten::conv_transpose1d/2d/3d``,
  ``cudnn_convolution_transpose``, ``miopen_convolution_transpose``, and
  ``convolution``/``_convolution`` with ``transposed=True``), weight
  ``[Cin, Cout/groups, *K]``: 2·N·Cin·prod(S)·(Cout/groups)·prod(K) (every
  input element meets every weight of its group; needs no stride);
* ``aten::convolution_backward`` (its inputs: grad_output, input, weight):
  the forward's FLOPs once for each of grad_input and grad_weight that its
  ``output_mask`` asks for (the bias gradient, a sum, is not counted); it
  needs ``Concrete Inputs`` for the mask and the ``transposed`` flag.

The backward of a matmul runs as its own ``aten::mm``/``aten::bmm`` calls,
estimated as above. No other backward operator (attention, normalisation,
pooling...) is estimated, nor attention's forward: their kernels show time
without FLOPs.
"""

from __future__ import annotations

import functools
import json
import math

__all__ = ["estimate_flops", "MATMUL_OPS", "CONV_OPS", "ESTIMATED_OPS"]

MATMUL_OPS = frozenset({"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::linear", "aten::matmul"})

# convolution name -> positions in its arguments of (stride, padding, dilation, transposed); transposed is
# the position of the flag, or the fixed value for operators that are always (never) transposed
_CONV_ARGS: dict[str, tuple[int, int, int, int | bool]] = {
    "aten::conv1d": (3, 4, 5, False),
    "aten::conv2d": (3, 4, 5, False),
    "aten::conv3d": (3, 4, 5, False),
    "aten::convolution": (3, 4, 5, 6),
    "aten::_convolution": (3, 4, 5, 6),
    "aten::cudnn_convolution": (3, 2, 4, False),  # (self, weight, padding, stride, dilation, groups, ...): no bias
    "aten::mkldnn_convolution": (4, 3, 5, False),  # (self, weight, bias, padding, stride, dilation, groups)
    "aten::miopen_convolution": (4, 3, 5, False),
    "aten::conv_transpose1d": (3, 4, 7, True),
    "aten::conv_transpose2d": (3, 4, 7, True),
    "aten::conv_transpose3d": (3, 4, 7, True),
    "aten::cudnn_convolution_transpose": (4, 2, 5, True),
    "aten::miopen_convolution_transpose": (5, 3, 6, True),
}
_CONV_BACKWARD = "aten::convolution_backward"  # (grad_output, input, weight, bias_sizes, stride, padding,
# dilation, transposed, output_padding, groups, output_mask)
CONV_OPS = frozenset(_CONV_ARGS) | {_CONV_BACKWARD}
ESTIMATED_OPS = MATMUL_OPS | CONV_OPS


@functools.lru_cache(maxsize=65536)  # per distinct (operator, shapes, arguments) of a trace
def estimate_flops(name: str, dims_text: str | None, concrete_text: str | None = None) -> float | None:
    """FLOPs of one call (module docstring), None when the operator or its recorded inputs give no estimate."""
    if name not in ESTIMATED_OPS or not dims_text:
        return None
    try:
        flops = _estimate(name, dims_text, concrete_text)
    except OverflowError:  # sizes from a hostile file whose product no float holds
        return None
    return flops if flops is not None and math.isfinite(flops) else None


def _estimate(name: str, dims_text: str, concrete_text: str | None) -> float | None:
    shapes = _shapes(dims_text)
    if shapes is None:
        return None
    if name in MATMUL_OPS:
        return _matmul(name, shapes)
    args = _concrete(concrete_text)
    if name == _CONV_BACKWARD:
        return _conv_backward(shapes, args)
    stride_i, pad_i, dil_i, transposed = _CONV_ARGS[name]
    if not isinstance(transposed, bool):
        flag = _arg(args, transposed)
        if not isinstance(flag, bool):
            return None
        transposed = flag
    if len(shapes) < 2 or shapes[0] is None or shapes[1] is None:
        return None
    if transposed:
        return _conv_transposed(shapes[0], shapes[1])
    return _conv(shapes[0], shapes[1], _arg(args, stride_i), _arg(args, pad_i), _arg(args, dil_i))


def _shapes(dims_text: str) -> list[list[int] | None] | None:
    try:
        dims = json.loads(dims_text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(dims, list):
        return None
    return [d if isinstance(d, list) and all(type(x) is int and x >= 0 for x in d) else None for d in dims]


def _matmul(name: str, shapes: list[list[int] | None]) -> float | None:
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


Arg = int | bool | list[int] | list[bool] | None


def _concrete(text: str | None) -> list[Arg]:
    """The ``Concrete Inputs`` as values: '' (a tensor, or a string argument) None, '[2, 2]' a list, '1' an int,
    'False' a bool, '[True, False]' a list of bools (torch writes Python's spelling, not JSON's)."""
    if not text:
        return []
    try:
        items = json.loads(text)
    except (ValueError, RecursionError):
        return []
    if not isinstance(items, list):
        return []
    out: list[Arg] = []
    for s in items:
        v: Arg = None
        if s in ("True", "False"):
            v = s == "True"
        elif isinstance(s, str) and s.startswith("[") and ("True" in s or "False" in s):
            parts = [t.strip() for t in s[1:-1].split(",")] if s.endswith("]") else []
            v = [t == "True" for t in parts] if parts and all(t in ("True", "False") for t in parts) else None
        elif isinstance(s, str) and s:
            try:
                got = json.loads(s)
            except (ValueError, RecursionError):
                got = None
            if type(got) is int or (isinstance(got, list) and all(type(x) is int for x in got)):
                v = got
        out.append(v)
    return out


def _arg(args: list[Arg], i: int) -> Arg:
    return args[i] if i < len(args) else None


def _per_dim(value: Arg, n: int) -> list[int] | None:
    """A stride/padding/dilation for ``n`` spatial dims: a list of n ints, or of one (broadcast), or an int."""
    if type(value) is int:
        return [value] * n
    if isinstance(value, list) and len(value) in (1, n):
        ints = [v for v in value if type(v) is int]
        if len(ints) == len(value):
            return ints * n if len(ints) == 1 else ints
    return None


def _conv(x: list[int], w: list[int], stride: Arg, padding: Arg, dilation: Arg) -> float | None:
    n = len(x) - 2
    if n < 1 or len(w) != len(x):
        return None
    s, p, d = _per_dim(stride, n), _per_dim(padding, n), _per_dim(dilation, n)
    if s is None or p is None or d is None or min(s) < 1 or min(d) < 1 or min(p) < 0:
        return None
    out = [(x[2 + i] + 2 * p[i] - d[i] * (w[2 + i] - 1) - 1) // s[i] + 1 for i in range(n)]
    if min(out) < 1:
        return None
    return 2.0 * float(x[0] * w[0] * math.prod(out) * w[1] * math.prod(w[2:]))


def _conv_transposed(x: list[int], w: list[int]) -> float | None:
    if len(x) < 3 or len(w) != len(x) or x[1] != w[0]:
        return None
    return 2.0 * float(x[0] * x[1] * math.prod(x[2:]) * w[1] * math.prod(w[2:]))


def _conv_backward(shapes: list[list[int] | None], args: list[Arg]) -> float | None:
    if len(shapes) < 3 or shapes[0] is None or shapes[1] is None or shapes[2] is None:
        return None
    gy, x, w = shapes[0], shapes[1], shapes[2]
    transposed, mask = _arg(args, 7), _arg(args, 10)
    if not isinstance(transposed, bool) or len(args) < 11:
        return None
    if not isinstance(mask, list) or len(x) < 3 or len(gy) != len(x) or len(w) != len(x):
        return None
    forward: float | None
    if transposed:  # the forward's input is x
        forward = _conv_transposed(x, w)
    elif gy[1] == w[0]:  # the forward's output is grad_output's shape
        forward = 2.0 * float(gy[0] * gy[1] * math.prod(gy[2:]) * w[1] * math.prod(w[2:]))
    else:
        return None
    if forward is None:
        return None
    return forward * sum(1 for m in mask[:2] if m)

"""The dtype-mismatch error explained (GP614): which tensor, which line, the fix.

PyTorch's dtype errors name neither the module nor the tensor ("mat1 and mat2
must have the same dtype, but got Double and Float"). When one leaves the
user's step, :func:`explain_dtype_error` walks its traceback the way GP613
does for a device mismatch: the innermost ``nn.Module`` that raised it (its
parameters and buffers with their dtypes, the tensors it received), else the
tensors at the user's innermost line; and names the likely fix from the
dtypes it found (a float64 batch: usually NumPy's default dtype; a half
batch into a float32 model: autocast; float class targets: ``.long()``).

Unlike GP613, the user's exception is never replaced: it propagates
unchanged (the same object, type and message); the explanation is GP614's
finding in the report.
"""

from __future__ import annotations

import re
from typing import Any

from gpuprof.capture.guard import safe_text
from gpuprof.capture.placement import _frames, _innermost_user, _module_path, _own_tensors, _shape
from gpuprof.findings import Evidence, Finding
from gpuprof.runtimecodes import runtime_check

__all__ = ["is_dtype_error", "explain_dtype_error"]

# How PyTorch words a dtype mismatch (torch 2.x, CPU and CUDA kernels; the RNN modules raise ValueError).
_DTYPE_ERROR = re.compile(
    r"must have the same dtype|to have the same dtype|expected scalar type \w+ but found \w+"
    r"|Found dtype \w+ but expected \w+|Input type \(\w+\) and (bias|weight) type \(\w+\) should be the same"
    r"|expected target dtype to be|to have one of the following scalar types|RNN input dtype"
    r"|mixed dtype \(CPU\): all inputs must share same datatype|dtypes match|Expected object of scalar type"
    r"|can't be cast to the desired output type")

_FLOATS = ("torch.float64", "torch.float32", "torch.float16", "torch.bfloat16")


def is_dtype_error(err: BaseException) -> bool:
    if not isinstance(err, (RuntimeError, ValueError)):
        return False
    return _DTYPE_ERROR.search(safe_text(err, 2000)) is not None  # the user's error: its __str__ may raise


def _dtype(t: Any) -> str:
    return str(t.dtype)


def _fix(first: str, inputs: list[tuple[str, Any]], own: list[tuple[str, str, Any]], default: str) -> str:
    """The likely fix, from the message and the dtypes involved."""
    in_dtypes = {_dtype(t) for _, t in inputs}
    own_dtypes = {_dtype(t) for _, _, t in own if t.is_floating_point()}
    if "target dtype" in first or "expected scalar type Long" in first:
        return "class-index targets must be int64: pass target.long() to the loss (or build them with dtype=torch.long)."
    if "following scalar types: Long, Int" in first:
        return "indices must be integers: pass idx.long() to the embedding/indexing op."
    double_data = "torch.float64" in in_dtypes and "torch.float64" not in own_dtypes
    if double_data or re.search(r"\bDouble and Float\b|\(double\) and (bias|weight) type \(float\)"
                                r"|dtype \(torch\.float64\) does not match weight dtype \(torch\.float32\)", first):
        extra = (" torch.set_default_dtype(torch.float64) is in effect: tensors made without dtype= are float64; "
                 "remove it or create the data with dtype=torch.float32." if default == "torch.float64" else "")
        return ("the data is float64 (NumPy's default dtype: torch.from_numpy keeps it) while the model is float32: "
                "convert the batch with x.float() (torch.from_numpy(a).float(), or a.astype(np.float32) in the "
                "Dataset); use model.double() only if FP64 is really meant (it is many times slower on GPUs)."
                + extra)
    if in_dtypes & {"torch.float16", "torch.bfloat16"} and "torch.float32" in own_dtypes:
        return ("the input is half precision while the model is float32: run the forward under "
                "torch.autocast(device_type=..., dtype=...) (which casts per op), or convert the model with "
                "model.to(dtype).")
    if any(d not in _FLOATS for d in in_dtypes) and own_dtypes:
        return "the input is an integer tensor: convert it with x.float() (or x.to(model's dtype)) before the model."
    return ("convert one side to the other's dtype: x.to(weight.dtype) for the data, or model.to(dtype) for the "
            "model.")


def explain_dtype_error(err: BaseException, known_roots: list[Any]) -> Finding:
    """GP614's finding for ``err`` (never changes ``err``)."""
    import torch

    frames = _frames(err.__traceback__)
    module_frames = [f for f in frames if isinstance(f.f_locals.get("self"), torch.nn.Module)]
    uf, loc = _innermost_user(frames)
    text = safe_text(err, 2000).strip()
    first = text.splitlines()[0] if text else type(err).__name__
    path = None
    own: list[tuple[str, str, Any]] = []
    inputs: list[tuple[str, Any]] = []
    if module_frames:
        inner = module_frames[-1]
        module = inner.f_locals["self"]
        path = _module_path(module, list(known_roots) + [module_frames[0].f_locals["self"]])
        own = list(_own_tensors(module))
        own_ids = {id(t) for _, _, t in own}
        inputs = [(n, v) for n, v in inner.f_locals.items()
                  if isinstance(v, torch.Tensor) and n != "self" and id(v) not in own_ids]
    elif uf is not None:
        inputs = [(n, v) for n, v in uf.f_locals.items() if isinstance(v, torch.Tensor)][:12]
    described = ([f"{kind} `{name}` {_shape(t)} {t.dtype}" for kind, name, t in own[:6]]
                 + [f"input `{n}` {_shape(t)} {t.dtype}" for n, t in inputs[:6]])
    default = str(torch.get_default_dtype())
    fix = _fix(first, inputs, own, default)
    where = f" in module `{path}` ({type(module_frames[-1].f_locals['self']).__name__})" if path else ""
    at = f" at {loc}" if loc is not None else ""
    check = runtime_check("GP614")
    return Finding(
        code=check.code, name=check.name, severity=check.severity,
        message=f"the step raised a dtype-mismatch error{where}{at}: {first}"
                + (f" ({'; '.join(described)})" if described else ""),
        advice=fix[0].upper() + fix[1:],
        evidence=(Evidence("error", first, None, "",
                           extra={"module": path, "default_dtype": default,
                                  "tensors": {f"{k}:{n}": f"{_shape(t)} {t.dtype}" for k, n, t in own[:12]},
                                  "inputs": {n: f"{_shape(t)} {t.dtype}" for n, t in inputs[:12]}}),),
        location=loc, origin="runtime", source=path,
    )

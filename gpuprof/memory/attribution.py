"""What a block of GPU memory *is*: its category, stage and module, read from the allocation's stack.

Every allocation in a snapshot carries the stack that made it (``frames``,
innermost first). Some frames say plainly what the tensor is for:

* a cuBLAS or cuDNN workspace (the C++ frame that asks the allocator for it:
  ``at::cuda::getNewWorkspace``, a ``cudnn`` workspace frame) ->
  **library_workspaces**, whatever pass asked for it first;
* a frame in ``torch/optim/`` -> **optimizer_state** (Adam's ``exp_avg``,
  SGD's momentum buffers), stage *optimizer*;
* the autograd engine's ``AccumulateGrad`` (C++ frames, ``stacks='all'``) ->
  **gradients**; any other frame of the backward pass (the engine, a
  ``*Backward`` node, ``Tensor.backward``, a compiled backward graph) ->
  **temporaries** of stage *backward* (intermediate gradients die inside it);
* DataParallel's replicated weights (``torch/nn/parallel/replicate.py``,
  ``comm.broadcast_coalesced``) -> **parameters**, stage *forward*;
* ``nn.Module.to()/cuda()/_apply()/load_state_dict()``, ``torch.nn.init``,
  an ``nn`` layer's ``__init__``/``reset_parameters``, ``from_pretrained`` ->
  **parameters** (and buffers), stage *setup*;
* a frame inside ``nn.Module.__call__`` (a module's forward, eager or
  compiled) -> **activations**, stage *forward*, or *evaluation* under an
  evaluation function;
* any other Python stack (the loss, inputs moved to the device, a data
  loader) -> **temporaries**;
* no stack, or a C++ stack that names none of these -> **unattributed**: a
  share stated as such, never guessed away.

Allocations made before the history began carry no stack (the blocks of a
snapshot record it only when history was on): they are unattributed too.
The module of an allocation is the innermost ``forward`` called through
``nn.Module.__call__``, named with the line that called it; an allocation in
``torch.compile``'s generated code (``/tmp/torchinductor_*/..``) belongs to
the compiled graph and to the user function it was compiled from, not to a
generated line. Classification is cached per frames list (snapshots share
one list among entries with the same stack), so a million entries cost a few
thousand walks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import reduce
from operator import or_
from typing import Any, Sequence

__all__ = ["CATEGORIES", "BLOCK_CATEGORIES", "STAGES", "StackKind", "KindTable", "UNKNOWN_KIND", "annotation_stage"]

# The keys of every ``categories`` object, in display order. All but non_pytorch add up to PyTorch's reserved bytes.
CATEGORIES: tuple[str, ...] = ("parameters", "gradients", "optimizer_state", "activations", "temporaries",
                               "library_workspaces", "allocator_cache", "non_pytorch", "unattributed")
# What a live block can be (allocator_cache and non_pytorch are not blocks).
BLOCK_CATEGORIES: tuple[str, ...] = ("parameters", "gradients", "optimizer_state", "activations", "temporaries",
                                     "library_workspaces", "unattributed")
STAGES: tuple[str, ...] = ("setup", "data", "forward", "backward", "optimizer", "evaluation", "other", "unknown")


@dataclass(frozen=True)
class StackKind:
    """What one allocation stack says: category, stage, module (``""``: none) and why (the deciding frame)."""

    category: str
    stage: str
    module: str = ""
    reason: str = ""
    # what makes growth here one-time rather than a leak, besides the category: "autocast" (made under autocast:
    # cast copies and lower-precision outputs), "cache" (a pre-allocated cache such as a KV cache); "" none
    trait: str = ""


UNKNOWN_KIND = StackKind("unattributed", "unknown", "", "no stack recorded")

_MAX_FRAMES = 512
# pre-allocated caches: transformers' cache_utils (DynamicCache/StaticCache), vLLM-style kv_cache, *_setup_cache
_CACHE = re.compile(r"(?i)kv_?cache|cache_utils|static_?cache|setup_caches?\b|allocate_cache")
_INDUCTOR = re.compile(r"torchinductor_[^/]*/(?:[^/]+/)*([^/]+)\.py$")
_PARAM_MODULE_FNS = frozenset({"_apply", "to", "cuda", "half", "float", "double", "bfloat16", "type", "to_empty",
                               "load_state_dict", "_load_from_state_dict", "register_parameter", "register_buffer"})
_PARAM_LIBRARY_FNS = frozenset({"from_pretrained", "_load_pretrained_model", "_load_state_dict_into_meta_model",
                                "set_module_tensor_to_device", "load_checkpoint_and_dispatch", "dispatch_model"})
_EVAL_FNS = frozenset({"evaluate", "eval_step", "evaluation_loop", "validation_step", "test_step", "predict_step",
                       "prediction_step", "validate", "evaluation_step", "_evaluation_step", "val_step", "generate"})
_CALL_FNS = frozenset({"_call_impl", "_wrapped_call_impl"})
_AUTOGRAD_PY_FNS = frozenset({"backward", "_engine_run_backward", "run_backward", "grad"})


def _path(f: dict[str, Any]) -> str:
    fn = f.get("filename")
    return fn.replace("\\", "/") if isinstance(fn, str) else ""


def _name(f: dict[str, Any]) -> str:
    n = f.get("name")
    return n if isinstance(n, str) else ""


def _line(f: dict[str, Any]) -> int | None:
    v = f.get("line")
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _base(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def _is_module_py(path: str) -> bool:
    return path.endswith("torch/nn/modules/module.py")


def _is_torch(path: str) -> bool:
    return "/torch/" in path or path.startswith("torch/")


# What one frame says, as bits: computed once per frame dict (PyTorch shares frame dicts among stacks, so a
# snapshot of 600,000 frames has a few thousand), OR-ed over a stack to decide its kind.
_OPTIM, _ACCUM, _BWD, _AOT_BWD, _PARAM, _CALL, _MODULE_PY, _EVAL = 1, 2, 4, 8, 16, 32, 64, 128
_USER_INIT, _DATA, _PY, _PYTHON, _INDUCTOR_F, _DYNAMO_EVAL, _USER_PY, _AUTOCAST, _CACHE_F = (
    256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536)
_CUBLAS_WS, _CUDNN_WS, _REPLICA = 131072, 262144, 524288

# A library's workspace, named by the C++ frame that asks the caching allocator for it (stacks='all'): cuBLAS's
# (at::cuda::getNewWorkspace under getCurrentCUDABlasHandle, the cuBLASLt workspace) and cuDNN's (a cudnn frame
# that names a workspace). They are allocated once per handle and stream and kept for the process's life.
_CUBLAS_WS_FNS = ("at::cuda::getNewWorkspace", "getCUDABlasLtWorkspace", "getCurrentCUDABlasLtHandle",
                  "at::cuda::getCurrentCUDABlasHandle")
# DataParallel copies the module's parameters and buffers to every device at every forward: torch.nn.parallel's
# replicate() (replicate.py) through the Broadcast autograd function (comm.broadcast_coalesced); Scatter and Gather
# (inputs and outputs) go through comm.scatter/gather and stay what their stacks say.


def frame_flags(f: dict[str, Any]) -> int:
    p, nm = _path(f), _name(f)
    torch_ = _is_torch(p)
    module_py = _is_module_py(p)
    py = p.endswith(".py")
    fl = 0
    if "/torch/optim/" in p and "lr_scheduler" not in p:
        fl |= _OPTIM
    if "AccumulateGrad" in nm:
        fl |= _ACCUM
    aot_bwd = nm in ("backward", "call_compiled_backward") and "/_aot_autograd/" in p
    if aot_bwd:
        fl |= _AOT_BWD
    if ("torch::autograd::Engine" in nm or "torch::autograd::generated::" in nm or aot_bwd
            or (nm in _AUTOGRAD_PY_FNS and ("/torch/autograd/" in p or p.endswith("torch/_tensor.py")))):
        fl |= _BWD
    if (module_py and nm in _PARAM_MODULE_FNS) or p.endswith(("torch/nn/init.py", "torch/nn/parameter.py")) \
            or ("/torch/nn/modules/" in p and nm in ("__init__", "reset_parameters")) or nm in _PARAM_LIBRARY_FNS:
        fl |= _PARAM
    if module_py:
        fl |= _MODULE_PY
        if nm in _CALL_FNS:
            fl |= _CALL
    if nm in _EVAL_FNS:
        fl |= _EVAL
    python = py or p.startswith("<")
    if python:
        fl |= _PYTHON
    if nm == "__init__" and python and not torch_ and "/site-packages/" not in p:
        fl |= _USER_INIT
    if "/torch/utils/data/" in p:
        fl |= _DATA
    if py:
        fl |= _PY
        if not torch_ and "/site-packages/" not in p:
            fl |= _USER_PY
        if _INDUCTOR.search(p):
            fl |= _INDUCTOR_F
        if p.endswith("torch/_dynamo/eval_frame.py"):
            fl |= _DYNAMO_EVAL
    if "at::autocast::" in nm or p.endswith("torch/amp/autocast_mode.py"):
        fl |= _AUTOCAST
    if _CACHE.search(nm) or _CACHE.search(_base(p)):
        fl |= _CACHE_F
    if not py and nm.startswith(_CUBLAS_WS_FNS):
        fl |= _CUBLAS_WS
    elif not py and "cudnn" in nm.lower() and "workspace" in nm.lower():
        fl |= _CUDNN_WS
    if (py and (p.endswith("torch/nn/parallel/replicate.py")
                or (p.endswith("torch/nn/parallel/comm.py") and nm.startswith("broadcast")))) \
            or (not py and "broadcast_coalesced" in nm):
        fl |= _REPLICA
    return fl


def _module_of(fr: Sequence[dict[str, Any]], fl: Sequence[int]) -> str:
    """The module or compiled graph an allocation belongs to ("" when none)."""
    n = len(fr)
    for i in range(n):  # innermost first: a compiled graph wins over the frames it was traced from
        if not fl[i] & _INDUCTOR_F:
            continue
        m = _INDUCTOR.search(_path(fr[i]))
        graph = m.group(1)[:12] if m else "?"
        # The user function that was compiled: the first user frame outside torch after dynamo's eval_frame wrapper.
        for j in range(i + 1, n):
            if fl[j] & _DYNAMO_EVAL:
                for k in range(j + 1, n):
                    if fl[k] & _USER_PY:
                        return f"compiled graph {graph} ({_base(_path(fr[k]))}:{_line(fr[k])} {_name(fr[k])})"
                break
        # The frames right outside the generated one are the user's source lines the graph was traced from,
        # innermost first (Inductor records them); the outermost of them is in the compiled function itself. A
        # backward graph is run by the autograd engine, so no user frame calls it: that function names it (a
        # forward graph is named by the user frame dynamo's wrapper ran, below; this line when there is none).
        src = -1
        for j in range(i + 1, n):
            if fl[j] & _USER_PY:
                src = j
            elif fl[j] & _PY:
                break
        if any(x & _AOT_BWD for x in fl):
            # named by the function, not a line: each node of the graph was traced from another line of it
            if src >= 0:
                return f"compiled graph {graph} (backward of {_base(_path(fr[src]))} {_name(fr[src])})"
            return f"compiled graph {graph} (backward)"
        if src >= 0:
            return f"compiled graph {graph} ({_base(_path(fr[src]))}:{_line(fr[src])} {_name(fr[src])})"
        return f"compiled graph {graph}"
    py = [i for i in range(n) if fl[i] & _PY]  # C++ frames (stacks='all') sit between Python ones
    for x in range(len(py) - 1):  # the innermost forward called through nn.Module.__call__
        i, up = py[x], py[x + 1]
        if fl[up] & _CALL and not fl[i] & _MODULE_PY:
            caller = ""
            for k in py[x + 2:]:  # the line that called it: the next frame outside module.py / dynamo
                if not fl[k] & (_MODULE_PY | _DYNAMO_EVAL):
                    caller = f" at {_base(_path(fr[k]))}:{_line(fr[k])}"
                    break
            return f"{_base(_path(fr[i]))}:{_name(fr[i])}{caller}"
    return ""


class FlagCache:
    """id(frame) -> :func:`frame_flags`, keeping each frame alive (so no other object can take its id)."""

    def __init__(self) -> None:
        self.flags: dict[int, int] = {}
        self._alive: list[Any] = []

    def of(self, frames: Sequence[Any]) -> list[int]:
        get = self.flags.get
        fl = [get(id(f), -1) for f in frames]  # one C-level loop: stacks are long, frame objects few and shared
        if -1 in fl:
            for i, f in enumerate(frames):
                if fl[i] == -1:
                    x = frame_flags(f) if isinstance(f, dict) else 0
                    self.flags[id(f)] = x
                    self._alive.append(f)
                    fl[i] = x
        return fl


def classify(frames: Any, cache: FlagCache | None = None) -> StackKind:
    """The :class:`StackKind` of one ``frames`` list (innermost first). The first rule that matches wins (see
    the module docstring); ``trait`` says what makes growth here one-time: "autocast", "cache" or ""."""
    if not isinstance(frames, (list, tuple)) or not frames:
        return UNKNOWN_KIND
    # Bounded work per distinct stack whatever a hostile file holds: real stacks (C++ frames included) are a few
    # hundred frames; what decides a kind sits within them.
    fr = frames[:_MAX_FRAMES]
    fl = (cache or FlagCache()).of(fr)
    allf = reduce(or_, fl, 0)
    if not allf and not any(isinstance(f, dict) for f in fr):  # frames in name only: no stack to read
        return UNKNOWN_KIND
    k = _decide(fr, fl, allf)
    trait = "autocast" if allf & _AUTOCAST else ("cache" if allf & _CACHE_F else "")
    return StackKind(k.category, k.stage, k.module, k.reason, trait) if trait else k


def _first(fr: Sequence[dict[str, Any]], fl: Sequence[int], bit: int) -> dict[str, Any]:
    return next(f for f, x in zip(fr, fl) if x & bit)


def _decide(fr: Sequence[dict[str, Any]], fl: Sequence[int], allf: int) -> StackKind:
    module = _module_of(fr, fl) if allf & (_INDUCTOR_F | _CALL) else ""
    stage = "backward" if allf & (_ACCUM | _BWD) else ("forward" if module or allf & _CALL else "other")
    if allf & _CUBLAS_WS:  # 0. a library's workspace, whoever's matmul asked for it first
        return StackKind("library_workspaces", stage, module, "cuBLAS workspace (at::cuda::getNewWorkspace)")
    if allf & _CUDNN_WS:
        f = _first(fr, fl, _CUDNN_WS)
        return StackKind("library_workspaces", stage, module, f"cuDNN workspace ({_name(f)[:80]})")
    if allf & _OPTIM:  # 1. the optimizer
        f = _first(fr, fl, _OPTIM)
        return StackKind("optimizer_state", "optimizer", "", f"torch/optim/{_base(_path(f))} ({_name(f)})")
    if allf & _ACCUM:  # 2. the backward pass
        return StackKind("gradients", "backward", module, "autograd AccumulateGrad")
    if allf & _BWD:
        f = _first(fr, fl, _BWD)
        nm = _name(f)
        why = "the autograd engine (backward)" if "::" in nm else f"{nm} in {_base(_path(f))} (backward)"
        return StackKind("temporaries", "backward", module, why)
    if allf & _REPLICA:  # 3. DataParallel's copies of the parameters and buffers, made at every forward
        f = _first(fr, fl, _REPLICA)
        return StackKind("parameters", "forward", module, f"DataParallel replica ({_base(_path(f))} {_name(f)})")
    if allf & _PARAM:  # 3. parameters and buffers made or moved
        f = _first(fr, fl, _PARAM)
        return StackKind("parameters", "setup", "", f"{_base(_path(f))} ({_name(f)})")
    evaluating = bool(allf & _EVAL)
    if module or allf & _CALL:  # 4. a module's forward (eager or compiled), in training or evaluation
        return StackKind("activations", "evaluation" if evaluating else "forward", module,
                         "forward of a module" if not evaluating else "forward under an evaluation function")
    if allf & _USER_INIT:  # 5. a user __init__ outside any forward: parameters/buffers of the user's module
        f = _first(fr, fl, _USER_INIT)
        return StackKind("parameters", "setup", "", f"{_base(_path(f))} (__init__)")
    if allf & _DATA:
        return StackKind("temporaries", "data", "", "data loading")
    if allf & _PYTHON:
        return StackKind("temporaries", "evaluation" if evaluating else "other", "", "outside a module's forward")
    return StackKind("unattributed", "unknown", "", "a C++ stack naming no known owner")


class KindTable:
    """Interns :class:`StackKind` values; kind ids are small ints (0: no stack, unattributed)."""

    UNKNOWN = 0

    def __init__(self) -> None:
        self.kinds: list[StackKind] = [UNKNOWN_KIND]
        self._ids: dict[StackKind, int] = {UNKNOWN_KIND: 0}
        self._by_list: dict[int, tuple[Any, int]] = {}  # id(frames list) -> (list kept alive, kind id)
        self._frames = FlagCache()  # what each frame says, once per frame object

    def __len__(self) -> int:
        return len(self.kinds)

    def kind_of(self, frames: Any) -> int:
        if not frames or not isinstance(frames, (list, tuple)):
            return self.UNKNOWN
        cached = self._by_list.get(id(frames))
        if cached is not None and cached[0] is frames:
            return cached[1]
        k = classify(frames, self._frames)
        kid = self._ids.get(k)
        if kid is None:
            kid = len(self.kinds)
            self.kinds.append(k)
            self._ids[k] = kid
        self._by_list[id(frames)] = (frames, kid)
        return kid

    def add(self, kind: StackKind) -> int:
        kid = self._ids.get(kind)
        if kid is None:
            kid = len(self.kinds)
            self.kinds.append(kind)
            self._ids[kind] = kid
        return kid


def annotation_stage(name: str) -> str | None:
    """The stage a ``record_function`` annotation names (``None``: it names none, e.g. ``ProfilerStep#3``)."""
    low = name.lower()
    if low.startswith("optimizer.") or "optimizer" in low or "zero_grad" in low:
        return "optimizer"
    if "backward" in low:
        return "backward"
    if "forward" in low:
        return "forward"
    if "dataloader" in low or low.startswith("data"):
        return "data"
    if "eval" in low or "valid" in low or "test" in low:
        return "evaluation"
    return None

"""What a block of GPU memory *is*: its category, stage and module, read from the allocation's stack.

Every allocation in a snapshot carries the stack that made it (``frames``,
innermost first). Some frames say plainly what the tensor is for:

* a frame in ``torch/optim/`` -> **optimizer_state** (Adam's ``exp_avg``,
  SGD's momentum buffers), stage *optimizer*;
* the autograd engine's ``AccumulateGrad`` (C++ frames, ``stacks='all'``) ->
  **gradients**; any other frame of the backward pass (the engine, a
  ``*Backward`` node, ``Tensor.backward``, a compiled backward graph) ->
  **temporaries** of stage *backward* (intermediate gradients die inside it);
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
from typing import Any, Sequence

__all__ = [
    "CATEGORIES",
    "BLOCK_CATEGORIES",
    "STAGES",
    "StackKind",
    "KindTable",
    "UNKNOWN_KIND",
    "annotation_stage",
]

# The keys of every ``categories`` object, in display order. All but non_pytorch add up to PyTorch's reserved bytes.
CATEGORIES: tuple[str, ...] = ("parameters", "gradients", "optimizer_state", "activations", "temporaries",
                               "allocator_cache", "non_pytorch", "unattributed")
# What a live block can be (allocator_cache and non_pytorch are not blocks).
BLOCK_CATEGORIES: tuple[str, ...] = ("parameters", "gradients", "optimizer_state", "activations", "temporaries",
                                     "unattributed")
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


def _is_python(path: str) -> bool:
    return path.endswith(".py") or path.startswith("<")


def _module_of(frames: Sequence[dict[str, Any]], paths: Sequence[str]) -> str:
    """The module or compiled graph an allocation belongs to ("" when none)."""
    n = len(frames)
    for i, p in enumerate(paths):  # innermost first: a compiled graph wins over the frames it was traced from
        m = _INDUCTOR.search(p)
        if m is None:
            continue
        graph = m.group(1)[:12]
        # The user function that was compiled: the first user frame outside torch after dynamo's eval_frame wrapper.
        for j in range(i + 1, n):
            if paths[j].endswith("torch/_dynamo/eval_frame.py"):
                for k in range(j + 1, n):
                    q = paths[k]
                    if q.endswith(".py") and not _is_torch(q) and "/site-packages/" not in q:
                        return f"compiled graph {graph} ({_base(q)}:{_line(frames[k])} {_name(frames[k])})"
                break
        if any("/_aot_autograd/" in q and _name(frames[k]) in ("backward", "call_compiled_backward")
               for k, q in enumerate(paths)):
            return f"compiled graph {graph} (backward)"  # run by the autograd engine: no user function calls it
        return f"compiled graph {graph}"
    py = [i for i in range(n) if paths[i].endswith(".py")]  # C++ frames (stacks='all') sit between Python ones
    for x in range(len(py) - 1):  # the innermost forward called through nn.Module.__call__
        i, up = py[x], py[x + 1]
        if _is_module_py(paths[up]) and _name(frames[up]) in _CALL_FNS and not _is_module_py(paths[i]):
            caller = ""
            for k in py[x + 2:]:  # the line that called it: the next frame outside module.py / dynamo
                q = paths[k]
                if not _is_module_py(q) and not q.endswith("torch/_dynamo/eval_frame.py"):
                    caller = f" at {_base(q)}:{_line(frames[k])}"
                    break
            return f"{_base(paths[i])}:{_name(frames[i])}{caller}"
    return ""


def _trait(paths: Sequence[str], names: Sequence[str]) -> str:
    for p, nm in zip(paths, names):
        if "at::autocast::" in nm or p.endswith("torch/amp/autocast_mode.py"):
            return "autocast"
    for p, nm in zip(paths, names):
        if _CACHE.search(nm) or _CACHE.search(_base(p)):
            return "cache"
    return ""


def classify(frames: Any) -> StackKind:
    """The :class:`StackKind` of one ``frames`` list (innermost first), with its trait (see :func:`_trait`)."""
    k = _classify(frames)
    if k is UNKNOWN_KIND:
        return k
    fr = [f for f in frames[:_MAX_FRAMES] if isinstance(f, dict)]
    trait = _trait([_path(f) for f in fr], [_name(f) for f in fr])
    return StackKind(k.category, k.stage, k.module, k.reason, trait) if trait else k


def _classify(frames: Any) -> StackKind:
    if not isinstance(frames, (list, tuple)) or not frames:
        return UNKNOWN_KIND
    # Bounded work per distinct stack whatever a hostile file holds: real stacks (C++ frames included) are a few
    # hundred frames; what decides a kind sits within them.
    fr = [f for f in frames[:_MAX_FRAMES] if isinstance(f, dict)]
    if not fr:
        return UNKNOWN_KIND
    paths = [_path(f) for f in fr]
    names = [_name(f) for f in fr]
    module = _module_of(fr, paths)
    has_python = any(_is_python(p) for p in paths)
    # 1. the optimizer
    for p, nm in zip(paths, names):
        if "/torch/optim/" in p and "lr_scheduler" not in p:
            return StackKind("optimizer_state", "optimizer", "", f"torch/optim/{_base(p)} ({nm})")
    # 2. the backward pass
    for nm in names:
        if "AccumulateGrad" in nm:
            return StackKind("gradients", "backward", module, "autograd AccumulateGrad")
    for p, nm in zip(paths, names):
        if ("torch::autograd::Engine" in nm or "torch::autograd::generated::" in nm
                or (nm in _AUTOGRAD_PY_FNS and ("/torch/autograd/" in p or p.endswith("torch/_tensor.py")))
                or (nm in ("backward", "call_compiled_backward") and "/_aot_autograd/" in p)):
            why = "the autograd engine (backward)" if "::" in nm else f"{nm} in {_base(p)} (backward)"
            return StackKind("temporaries", "backward", module, why)
    # 3. parameters and buffers made or moved
    for p, nm in zip(paths, names):
        if (_is_module_py(p) and nm in _PARAM_MODULE_FNS) or p.endswith("torch/nn/init.py") \
                or p.endswith("torch/nn/parameter.py") \
                or ("/torch/nn/modules/" in p and nm in ("__init__", "reset_parameters")) \
                or nm in _PARAM_LIBRARY_FNS:
            return StackKind("parameters", "setup", "", f"{_base(p)} ({nm})")
    # 4. a module's forward (eager or compiled), in training or evaluation
    in_forward = bool(module) or any(_is_module_py(p) and nm in _CALL_FNS for p, nm in zip(paths, names))
    evaluating = any(nm in _EVAL_FNS for nm in names)
    if in_forward:
        return StackKind("activations", "evaluation" if evaluating else "forward", module,
                         "forward of a module" if not evaluating else "forward under an evaluation function")
    # 5. a user __init__ outside any forward: parameters/buffers created by the user's module
    for p, nm in zip(paths, names):
        if nm == "__init__" and _is_python(p) and not _is_torch(p) and "/site-packages/" not in p:
            return StackKind("parameters", "setup", "", f"{_base(p)} (__init__)")
    if any("/torch/utils/data/" in p for p in paths):
        return StackKind("temporaries", "data", "", "data loading")
    if has_python:
        return StackKind("temporaries", "evaluation" if evaluating else "other", "", "outside a module's forward")
    return StackKind("unattributed", "unknown", "", "a C++ stack naming no known owner")


class KindTable:
    """Interns :class:`StackKind` values; kind ids are small ints (0: no stack, unattributed)."""

    UNKNOWN = 0

    def __init__(self) -> None:
        self.kinds: list[StackKind] = [UNKNOWN_KIND]
        self._ids: dict[StackKind, int] = {UNKNOWN_KIND: 0}
        self._by_list: dict[int, tuple[Any, int]] = {}  # id(frames list) -> (list kept alive, kind id)

    def __len__(self) -> int:
        return len(self.kinds)

    def kind_of(self, frames: Any) -> int:
        if not frames or not isinstance(frames, (list, tuple)):
            return self.UNKNOWN
        cached = self._by_list.get(id(frames))
        if cached is not None and cached[0] is frames:
            return cached[1]
        k = classify(frames)
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

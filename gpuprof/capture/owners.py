"""The run's facts about who owns GPU memory: the storages of parameters, gradients and optimizer states.

A snapshot's stacks cannot name memory allocated before its history began (the model loaded, the
optimizer's state made before the ring started): the analysis calls it unattributed. The capture knows
better: the optimizers the loop steps (found by ``torch.optim``'s global step hook) hold the parameters,
their ``.grad`` and their state, and the models given to ``gpuprof.profile(models=...)`` hold parameters
and buffers. At an out-of-memory dump, :func:`tensor_owners` lists their CUDA storages
(``{"device", "ptr", "bytes", "category"}``) into the snapshot's ``"gpuprof"`` key; the snapshot parser
then names the blocks holding them (:func:`gpuprof.memory.snapshot.parse_snapshot`). Only storage
pointers and sizes are read: nothing is copied or synchronised.
"""

from __future__ import annotations

import weakref
from typing import Any, Iterable

__all__ = ["OwnerRegistry", "MAX_OWNED"]

MAX_OWNED = 200_000  # tensors listed at most (a model with more parameters than this is listed in part)


class OwnerRegistry:
    """Optimizers seen stepping and the models given; :meth:`owners` lists their CUDA storages."""

    def __init__(self, models: Iterable[Any] = ()) -> None:
        self._optimizers: "weakref.WeakSet[Any]" = weakref.WeakSet()
        self._models = [weakref.ref(m) for m in models]
        self._handle: Any = None

    def install(self) -> bool:
        from torch.optim.optimizer import register_optimizer_step_post_hook

        self._handle = register_optimizer_step_post_hook(self._seen)
        return True

    def uninstall(self) -> None:
        h, self._handle = self._handle, None
        if h is not None:
            h.remove()

    def _seen(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self._optimizers.add(optimizer)

    def owners(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        seen: set[int] = set()

        def add(t: Any, category: str) -> None:
            if len(out) >= MAX_OWNED or t is None or not getattr(t, "is_cuda", False):
                return
            try:
                st = t.untyped_storage()
                ptr, nbytes = int(st.data_ptr()), int(st.nbytes())
            except Exception:  # noqa: BLE001 - a tensor subclass without a plain storage: not listed
                return
            if ptr and ptr not in seen:
                seen.add(ptr)
                out.append({"device": int(t.device.index or 0), "ptr": ptr, "bytes": nbytes, "category": category})

        for opt in list(self._optimizers):
            for group in getattr(opt, "param_groups", ()):
                for p in group.get("params", ()):
                    add(p, "parameters")
                    add(getattr(p, "grad", None), "gradients")
            for state in getattr(opt, "state", {}).values():
                if isinstance(state, dict):
                    for v in state.values():
                        add(v, "optimizer_state")
        for ref in self._models:
            m = ref()
            if m is None:
                continue
            for p in m.parameters():
                add(p, "parameters")
                add(p.grad, "gradients")
            for b in m.buffers():
                add(b, "parameters")
        return out

"""What the memory advice needs to know of the GPU and the run: bfloat16 support, training or inference.

Mixed-precision advice differs by device and mode: bfloat16 runs on NVIDIA
GPUs of compute capability 8.0 and later (Ampere: A100, A10, RTX 30xx; not a
T4, V100 or RTX 20xx) and on AMD Instinct MI200/MI300; float16 training
needs a ``GradScaler``, inference never does.
"""

from __future__ import annotations

import re

from gpuprof.memory.frames import SiteTable

__all__ = ["bf16_support", "run_mode", "precision_advice"]

# NVIDIA GPUs without bfloat16 compute, by name, when the compute capability is not recorded
_NO_BF16 = re.compile(r"\b(T4|V100|P100|P40|P4|K80|M60|Titan V|Quadro RTX|RTX 20\d\d|GTX|Tesla)\b", re.I)
_BF16 = re.compile(r"\b(A100|A10G?|A30|A40|A6000|L4|L40S?|H100|H200|H20|B100|B200|GB200|RTX (30|40|50)\d\d|"
                   r"RTX A\d+|MI2\d\d|MI3\d\d|MI355)\b", re.I)


def bf16_support(vendor: str, compute_capability: tuple[int, int] | None, name: str) -> bool | None:
    """Whether the GPU computes in bfloat16; None when its name and capability do not say."""
    if compute_capability is not None and (vendor or "nvidia") == "nvidia":
        return compute_capability >= (8, 0)
    if name and _BF16.search(name):
        return True
    if name and _NO_BF16.search(name):
        return False
    if vendor == "amd" and name and "instinct" in name.lower():
        return True
    return None


_INFERENCE = ("inference_mode", "no_grad", "decorate_context", "grad_mode")


def run_mode(sites: SiteTable) -> str:
    """``training`` when a backward pass allocated, ``inference`` when a stack shows ``torch.no_grad()`` /
    ``torch.inference_mode()`` and none shows a backward pass, else ``unknown`` (a forward-only history may still
    be training: an out-of-memory in the forward pass never reaches backward)."""
    inference = False
    for s in sites.sites:
        text = s.label + " " + " ".join(s.stack[:24])
        if "Backward" in text or "backward" in text:
            return "training"
        if any(w in text for w in _INFERENCE):
            inference = True
    return "inference" if inference else "unknown"


def precision_advice(bf16: bool | None, mode: str) -> str:
    """The mixed-precision part of memory advice, for this GPU and this kind of run (:func:`run_mode`)."""
    if mode == "inference":
        if bf16 is False:
            return "half precision for inference (the model in float16, or torch.autocast(dtype=torch.float16)) " \
                   "under torch.inference_mode()"
        return "half precision for inference (bfloat16 or float16 weights, or torch.autocast) under " \
               "torch.inference_mode()"
    scaler = "a torch.amp.GradScaler" if mode == "training" else "a torch.amp.GradScaler if you train"
    if bf16 is True:
        return "mixed precision (torch.autocast(dtype=torch.bfloat16))"
    if bf16 is False:
        return f"mixed precision (torch.autocast(dtype=torch.float16) with {scaler}: this GPU has no bfloat16)"
    return f"mixed precision (torch.autocast: bfloat16 on GPUs that have it, Ampere or newer; float16 with {scaler} " \
           "otherwise)"

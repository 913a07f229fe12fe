"""``--variants auto``: which variants the findings of the baseline's analysis suggest (docs/try.md, "Variants from
the findings"), and the findings whose fix needs a code change (listed with their predicted saving only)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuprof.trials.variants import Variant

__all__ = ["SUGGESTS", "CODE_CHANGE", "Suggestion", "suggest", "code_change_rows"]

#: finding code -> the catalogue's variants it suggests, in order of preference ("num_workers=*": every worker count
#: of the catalogue). A variant not in this machine's catalogue (a CUDA-only one on a CPU) is left out. Findings that
#: name a symptom, not a cause (GP101: the GPU idle, for whatever reason) suggest nothing: their cost would be
#: claimed for a change that may not touch it.
SUGGESTS: dict[str, tuple[str, ...]] = {
    "GP102": ("num_workers=*",),
    "GP103": ("num_workers=*", "prefetch_factor=4"),
    "GP601": ("num_workers=*",),
    "GP602": ("pin_memory",),
    "GP604": ("persistent_workers",),
    "GP606": ("prefetch_factor=4", "persistent_workers"),
    "GP607": ("num_workers=*",),
    "GP603": ("num_workers=*",),  # too many workers: fewer, bounded by the cores
    "GP201": ("pin_memory",),  # pageable copies: the DataLoader's batches pinned (the user's own copies: below)
    "GP301": ("compile", "foreach"),
    "GP308": ("compile", "foreach"),
    "GP302": ("matmul_precision=high", "autocast=bf16", "autocast=fp16"),
    "GP621": ("matmul_precision=high",),
    "GP307": ("autocast=bf16", "compile"),
    "GP862": ("autocast=bf16",),
    "GP620": ("cudnn_benchmark",),
    "GP820": ("channels_last",),
    "GP840": ("zero_grad_set_to_none",),
    "GP842": ("fused", "foreach"),
    "GP810": ("compile",),
}

#: finding code -> the change only the user's code can make (no launcher setting does it)
CODE_CHANGE: dict[str, str] = {
    "GP201": "copy from pinned memory with non_blocking=True (tensor.pin_memory() once, or the DataLoader's "
             "pin_memory=True for its batches)",
    "GP202": "x.to(device, non_blocking=True) from pinned memory",
    "GP203": "move the per-step .item() / .cpu() / print of a tensor out of the step (log every N steps)",
    "GP204": "keep per-step values on the device and read them every N steps",
    "GP205": "allocate once outside the step (reuse buffers); avoid synchronous runtime calls in the step",
    "GP304": "use torch.nn.functional.scaled_dot_product_attention",
    "GP305": "pad the matrix dimensions to multiples of 8",
    "GP402": "move the computation to the GPU",
    "GP630": "remove the host synchronisation at the named line (or do it every N steps)",
    "GP622": "turn autograd anomaly detection off outside debugging",
    "GP624": "drop torch.use_deterministic_algorithms(True) where determinism is not needed",
    "GP841": "run gc.collect() / torch.save every N steps, not every step",
    "GP843": "wrap evaluation in torch.no_grad() (or torch.inference_mode())",
    "GP852": "unscale the gradients (scaler.unscale_(optimizer)) before clipping them",
    "GP860": "use torch.amp.GradScaler with float16 autocast",
}


@dataclass(frozen=True)
class Suggestion:
    """One variant the findings suggest: the codes that suggest it and their predicted saving per step."""

    variant: Variant
    codes: tuple[str, ...]
    cost_us: float | None  # the largest cost per step among the suggesting findings
    what_if_us: float | None  # the largest what-if saving among them


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def _max(xs: list[float | None]) -> float | None:
    vals = [x for x in xs if x is not None]
    return max(vals) if vals else None


def suggest(findings: list[Any], available: list[Variant]) -> list[Suggestion]:
    """The variants of ``available`` (this machine's catalogue) that ``findings`` (the analysis report's typed
    findings) suggest, costliest finding first, each once."""
    by_name = {v.name: v for v in available}
    workers = [v for v in available if v.settings.num_workers is not None]
    chosen: dict[str, tuple[Variant, list[str], list[float | None], list[float | None]]] = {}
    ranked = sorted(findings, key=lambda f: -(_num(getattr(f, "cost_us_per_step", None)) or 0.0))
    for f in ranked:
        code = str(getattr(f, "code", ""))
        for name in SUGGESTS.get(code, ()):
            picks = workers if name == "num_workers=*" else [by_name[name]] if name in by_name else []
            for v in picks:
                entry = chosen.setdefault(v.name, (v, [], [], []))
                if code not in entry[1]:
                    entry[1].append(code)
                    entry[2].append(_num(getattr(f, "cost_us_per_step", None)))
                    entry[3].append(_num(getattr(f, "what_if_saving_us", None)))
    return [Suggestion(v, tuple(codes), _max(costs), _max(whatifs)) for v, codes, costs, whatifs in chosen.values()]


def code_change_rows(findings: list[Any]) -> list[dict[str, Any]]:
    """The findings whose fix needs a code change: what to change, where, and the predicted saving (the
    finding's cost per step and its what-if), never measured by a trial."""
    rows = []
    for f in findings:
        code = str(getattr(f, "code", ""))
        change = CODE_CHANGE.get(code)
        if change is None:
            continue
        loc = getattr(f, "location", None)
        where = f"{loc.file}:{loc.line}" if loc is not None and getattr(loc, "file", None) else None
        rows.append({"code": code, "message": str(getattr(f, "message", "")), "change": change, "location": where,
                     "predicted_saving_us": _num(getattr(f, "cost_us_per_step", None)),
                     "predicted_what_if_us": _num(getattr(f, "what_if_saving_us", None))})
    rows.sort(key=lambda r: -(_num(r["predicted_saving_us"]) or 0.0))
    return rows

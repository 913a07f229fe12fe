"""The catalogue of variants ``gpuprof try`` applies without editing the script, and ``--set`` (docs/try.md)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

import msgspec

from gpuprof.errors import GpuprofError
from gpuprof.run.options import TrialSettings

__all__ = ["Variant", "catalogue", "parse_set", "plan_trials", "TryUsageError", "NUMERIC_SETTINGS",
           "DATALOADER", "NUMERICS", "TOLERANCE", "numerics_of", "compile_unavailable", "combine"]


class TryUsageError(GpuprofError):
    """Bad usage of ``gpuprof try`` (exit code 2, one line)."""


#: the numerics class of each setting that may change the numbers the job computes (docs/try.md, "Numerics");
#: every other setting is ``exact``: the baseline's losses bit for bit
NUMERICS = {
    # cuDNN may run convolutions in TF32 (torch.backends.cudnn.allow_tf32 is on by default): another algorithm or
    # layout may round as TF32 does, so these take the precision class's tolerance
    "cudnn_benchmark": "precision", "channels_last": "precision", "optimizer_foreach": "reordered",
    "optimizer_fused": "reordered", "matmul_precision": "precision", "autocast": "reduced-precision",
    "compile": "compile",
}
#: per class: the largest relative difference of a step's loss from the baseline's that keeps the numerics
TOLERANCE = {"exact": 0.0, "reordered": 1e-3, "compile": 1e-3, "precision": 1e-2, "reduced-precision": 5e-2}
NUMERIC_SETTINGS = frozenset(NUMERICS)
DATALOADER = frozenset({"num_workers", "persistent_workers", "pin_memory", "prefetch_factor"})
_CUDA_ONLY = frozenset({"pin_memory", "matmul_precision", "cudnn_benchmark"})


def numerics_of(given: Mapping[str, object]) -> str:
    """The loosest numerics class of the settings given (a combined variant takes the loosest of its parts)."""
    classes = [NUMERICS.get(k, "exact") for k in given]
    return max(classes, key=lambda c: TOLERANCE[c], default="exact")

#: names ``--set`` accepts -> the settings' field
_ALIASES = {"num_workers": "num_workers", "persistent_workers": "persistent_workers", "pin_memory": "pin_memory",
            "prefetch_factor": "prefetch_factor", "matmul_precision": "matmul_precision",
            "float32_matmul_precision": "matmul_precision", "allow_tf32": "allow_tf32",
            "cudnn_benchmark": "cudnn_benchmark", "cudnn.benchmark": "cudnn_benchmark",
            "zero_grad_set_to_none": "zero_grad_set_to_none", "set_to_none": "zero_grad_set_to_none",
            "autocast": "autocast", "amp": "autocast", "channels_last": "channels_last", "compile": "compile",
            "torch_compile": "compile", "foreach": "optimizer_foreach", "fused": "optimizer_fused"}
_BOOLEAN = frozenset({"persistent_workers", "pin_memory", "cudnn_benchmark", "zero_grad_set_to_none", "channels_last",
                      "compile", "optimizer_foreach", "optimizer_fused"})


@dataclass(frozen=True)
class Variant:
    name: str
    settings: TrialSettings

    @property
    def numeric(self) -> bool:
        """Whether the variant may change the job's numbers (else its losses must equal the baseline's)."""
        return any(k in NUMERIC_SETTINGS for k in self.settings.given())

    @property
    def numerics(self) -> str:
        """Its numerics class (docs/try.md, "Numerics")."""
        return numerics_of(self.settings.given())

    @property
    def cuda_only(self) -> bool:
        return any(k in _CUDA_ONLY for k in self.settings.given()) or self.settings.autocast == "fp16"


def catalogue(cuda: bool, cores: int, compile_ok: bool = True, bf16_ok: bool = True) -> list[Variant]:
    """The variants that apply on this machine (``--variants all``; ``auto`` picks from them by the findings):
    DataLoader workers bounded by the cores, persistent workers, a larger prefetch, ``zero_grad(set_to_none=
    True)``, the optimizers' ``foreach`` and ``fused``, ``channels_last``, ``torch.compile`` where the machine
    can compile (``compile_ok``), autocast to bfloat16 where the device has it (``bf16_ok``: a CPU has it); with
    CUDA also pinned memory, TF32 matmuls, cuDNN's autotuner and autocast to float16."""
    workers = sorted({w for w in (1, 2, 4, 8) if w <= cores} | {max(1, cores)})
    out = [Variant(f"num_workers={w}", TrialSettings(num_workers=w)) for w in workers]
    out.append(Variant("persistent_workers", TrialSettings(persistent_workers=True)))
    out.append(Variant("prefetch_factor=4", TrialSettings(prefetch_factor=4)))
    if cuda:
        out.append(Variant("pin_memory", TrialSettings(pin_memory=True)))
        out.append(Variant("matmul_precision=high", TrialSettings(matmul_precision="high")))
        out.append(Variant("cudnn_benchmark", TrialSettings(cudnn_benchmark=True)))
    out.append(Variant("zero_grad_set_to_none", TrialSettings(zero_grad_set_to_none=True)))
    out.append(Variant("foreach", TrialSettings(optimizer_foreach=True)))
    out.append(Variant("fused", TrialSettings(optimizer_fused=True)))
    out.append(Variant("channels_last", TrialSettings(channels_last=True)))
    if bf16_ok:
        out.append(Variant("autocast=bf16", TrialSettings(autocast="bf16")))
    if cuda:
        out.append(Variant("autocast=fp16", TrialSettings(autocast="fp16")))
    if compile_ok:
        out.append(Variant("compile", TrialSettings(compile=True)))
    return out


def compile_unavailable(cuda: bool) -> str | None:
    """Why ``torch.compile`` cannot run on this machine (None: it can): no dynamo for this Python, no C++
    compiler for the CPU's generated code, no Triton for CUDA's."""
    import importlib.util
    import shutil

    try:
        import torch._dynamo as dynamo

        if not getattr(dynamo, "is_dynamo_supported", lambda: True)():
            return "torch.compile is not supported on this Python"
    except Exception as err:  # noqa: BLE001 - an import that fails says the same: it cannot compile
        return f"torch.compile cannot be imported ({type(err).__name__})"
    if cuda:
        return None if importlib.util.find_spec("triton") is not None else "no Triton installed (CUDA's code generator)"
    cxx = os.environ.get("CXX") or "g++"
    if not any(shutil.which(c) for c in (cxx, "g++", "clang++")):
        return "no C++ compiler (g++, clang++ or $CXX) for the CPU's generated code"
    return None


def combine(variants: list[Variant]) -> Variant | None:
    """The variants applied together, one setting from each (None when fewer than two are compatible): the
    first variant that sets a field keeps it (``variants`` in order of value), ``foreach`` and ``fused`` never
    together (torch refuses both), one ``autocast`` dtype."""
    fields: dict[str, object] = {}
    parts: list[str] = []
    for v in variants:
        given = v.settings.given()
        if any(k in fields for k in given):
            continue
        if ("optimizer_foreach" in given and "optimizer_fused" in fields) or \
                ("optimizer_fused" in given and "optimizer_foreach" in fields):
            continue
        fields.update(given)
        parts.append(v.name)
    if len(parts) < 2:
        return None
    return Variant("combined: " + " + ".join(parts), msgspec.convert(fields, type=TrialSettings))


def _value(text: str) -> bool | int | str:
    low = text.strip().lower()
    if low in ("true", "yes", "on"):
        return True
    if low in ("false", "no", "off"):
        return False
    try:
        return int(low)
    except ValueError:
        return text.strip()


def parse_set(text: str) -> Variant:
    """``name=value[,name=value...]`` -> one variant; TryUsageError (one line) for a name or value it cannot take."""
    fields: dict[str, object] = {}
    for part in [p for p in text.split(",") if p.strip()]:
        name, sep, raw = part.partition("=")
        name = name.strip()
        if not sep or not raw.strip():
            raise TryUsageError(f"--set {text!r}: expected NAME=VALUE (e.g. --set num_workers=4)")
        field = _ALIASES.get(name)
        if field is None:
            raise TryUsageError(f"--set {text!r}: unknown setting {name!r} (known: {', '.join(sorted(_ALIASES))})")
        value = _value(raw)
        if field == "allow_tf32":
            if not isinstance(value, bool):
                raise TryUsageError(f"--set {text!r}: allow_tf32 takes true or false")
            field, value = "matmul_precision", "high" if value else "highest"
        if field in _BOOLEAN and raw.strip() in ("0", "1"):
            value = raw.strip() == "1"
        if field == "autocast" and isinstance(value, str):
            value = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16"}.get(value.lower(), value.lower())
        fields[field] = value
    if not fields:
        raise TryUsageError(f"--set {text!r}: expected NAME=VALUE (e.g. --set num_workers=4)")
    if fields.get("optimizer_foreach") is True and fields.get("optimizer_fused") is True:
        raise TryUsageError(f"--set {text!r}: foreach and fused cannot both be true (torch refuses it)")
    try:
        settings = msgspec.convert(fields, type=TrialSettings)
    except msgspec.ValidationError as err:
        raise TryUsageError(f"--set {text!r}: {err}") from None
    name = ",".join(f"{k}={v}" for k, v in settings.given().items())
    return Variant(name, settings)


def plan_trials(variants: list[Variant], baseline_runs: int) -> list[tuple[str, Variant | None]]:
    """The trials in order, (label, variant or None for a baseline run): the baseline first and last (a drift
    of the machine shows as run-to-run noise), its other runs spread evenly between the variants."""
    n = len(variants)
    middle = baseline_runs - 2
    after = sorted({min(n, max(1, round((k + 1) * n / (middle + 1)))) for k in range(middle)})
    slots = [after[k] if k < len(after) else n for k in range(middle)]
    plan: list[tuple[str, Variant | None]] = []
    count = 0

    def baseline() -> None:
        nonlocal count
        count += 1
        plan.append((f"baseline-{count}", None))

    baseline()
    for i, v in enumerate(variants, 1):
        plan.append((v.name, v))
        for _ in range(slots.count(i) if i < n else 0):
            baseline()
    for _ in range(slots.count(n)):
        baseline()
    baseline()
    return plan

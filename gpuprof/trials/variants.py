"""The catalogue of variants ``gpuprof try`` applies without editing the script, and ``--set`` (docs/try.md)."""

from __future__ import annotations

import os
from dataclasses import dataclass

import msgspec

from gpuprof.errors import GpuprofError
from gpuprof.run.options import TrialSettings

__all__ = ["Variant", "catalogue", "parse_set", "plan_trials", "free_cores", "TryUsageError", "NUMERIC_SETTINGS", "DATALOADER"]


class TryUsageError(GpuprofError):
    """Bad usage of ``gpuprof try`` (exit code 2, one line)."""


#: settings that may change the numbers the job computes (a tolerance applies, docs/try.md "Numerics")
NUMERIC_SETTINGS = frozenset({"matmul_precision", "cudnn_benchmark"})
DATALOADER = frozenset({"num_workers", "persistent_workers", "pin_memory", "prefetch_factor"})
_CUDA_ONLY = frozenset({"pin_memory", "matmul_precision", "cudnn_benchmark"})

#: names ``--set`` accepts -> the settings' field
_ALIASES = {
    "num_workers": "num_workers", "persistent_workers": "persistent_workers", "pin_memory": "pin_memory",
    "prefetch_factor": "prefetch_factor", "matmul_precision": "matmul_precision",
    "float32_matmul_precision": "matmul_precision", "allow_tf32": "allow_tf32",
    "cudnn_benchmark": "cudnn_benchmark", "cudnn.benchmark": "cudnn_benchmark",
    "zero_grad_set_to_none": "zero_grad_set_to_none", "set_to_none": "zero_grad_set_to_none",
}


@dataclass(frozen=True)
class Variant:
    name: str
    settings: TrialSettings

    @property
    def numeric(self) -> bool:
        """Whether the variant may change the job's numbers (else its losses must equal the baseline's)."""
        return any(k in NUMERIC_SETTINGS for k in self.settings.given())

    @property
    def cuda_only(self) -> bool:
        return any(k in _CUDA_ONLY for k in self.settings.given())


def free_cores() -> int:
    """The cores this process may run on (its affinity), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def catalogue(cuda: bool, cores: int) -> list[Variant]:
    """What ``--variants auto`` tries on this machine: DataLoader workers bounded by the cores, persistent
    workers, a larger prefetch, ``zero_grad(set_to_none=True)``; with CUDA also pinned memory, TF32 matmuls
    and cuDNN's autotuner."""
    workers = sorted({w for w in (1, 2, 4, 8) if w <= cores} | {max(1, cores)})
    out = [Variant(f"num_workers={w}", TrialSettings(num_workers=w)) for w in workers]
    out.append(Variant("persistent_workers", TrialSettings(persistent_workers=True)))
    out.append(Variant("prefetch_factor=4", TrialSettings(prefetch_factor=4)))
    if cuda:
        out.append(Variant("pin_memory", TrialSettings(pin_memory=True)))
        out.append(Variant("matmul_precision=high", TrialSettings(matmul_precision="high")))
        out.append(Variant("cudnn_benchmark", TrialSettings(cudnn_benchmark=True)))
    out.append(Variant("zero_grad_set_to_none", TrialSettings(zero_grad_set_to_none=True)))
    return out


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
        if field in ("persistent_workers", "pin_memory", "cudnn_benchmark", "zero_grad_set_to_none") \
                and raw.strip() in ("0", "1"):
            value = raw.strip() == "1"
        fields[field] = value
    if not fields:
        raise TryUsageError(f"--set {text!r}: expected NAME=VALUE (e.g. --set num_workers=4)")
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

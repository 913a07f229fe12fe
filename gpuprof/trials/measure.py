"""From the trials' results to ``try.json`` (docs/try.md, "try.json"): medians, noise, verdicts, numerics.

The verdict uses ``gpuprof diff``'s noise model (gpuprof/diff/compare.py): a variant is faster (slower) only
when its median step time is below (above) the baseline's by more than the noise, and the rank test of its
per-step times against the baseline's tells the two apart (p < ``P_CHANGED``). The noise is the larger of the
diff's noise band (twice the standard error of the difference of the per-step times) and the run-to-run noise
no single run shows: twice the standard deviation of the baseline runs' medians, times sqrt(1 + 1/R) for R
runs (a variant's median, one run, against the pooled baseline's).
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from gpuprof.diff.compare import P_CHANGED
from gpuprof.stats import noise_band, rank_test_p
from gpuprof.trials.runner import Outcome
from gpuprof.trials.variants import DATALOADER, TOLERANCE, Variant

__all__ = ["TRY_SCHEMA_VERSION", "build", "VERDICTS", "ANALYSIS_STEPS"]

TRY_SCHEMA_VERSION = "1.1"
#: the analysis trial runs at least this many optimizer steps: the capture's default window (5 steps waited, 2 of
#: profiler warm-up, 5 recorded) and the step that ends it
ANALYSIS_STEPS = 13
VERDICTS = ("faster", "same", "slower", "changed-numerics", "failed")


def _times(o: Outcome) -> list[float]:
    r = o.result or {}
    return [float(x) for x in r.get("step_times_us") or [] if isinstance(x, (int, float)) and math.isfinite(x)]


def _losses(o: Outcome) -> list[float | None]:
    r = o.result or {}
    return [float(x) if isinstance(x, (int, float)) else None for x in r.get("losses") or []]


def _loss_diff(a: list[float | None], b: list[float | None]) -> tuple[float | None, float | None]:
    """(max |a-b|, max |a-b| / |a|) over the steps both have a loss for; (None, None) when none."""
    diffs = [(abs(x - y), abs(x - y) / abs(x) if x else (0.0 if x == y else math.inf))
             for x, y in zip(a, b) if x is not None and y is not None]
    if not diffs:
        return None, None
    return max(d for d, _ in diffs), max(r for _, r in diffs)


def _memory(o: Outcome) -> int | None:
    v = (o.result or {}).get("host_rss_peak_bytes")
    return int(v) if isinstance(v, int) else None


def build(command: list[str], baseline: list[Outcome], variants: list[tuple[Variant, Outcome]],
          warmup: int, steps: int, cores: int, cuda: bool, interrupted: bool,
          predictions: dict[str, Any] | None = None, analysis: dict[str, Any] | None = None) -> dict[str, Any]:
    """The try document. ``predictions``: by variant name, the findings that suggested it (``codes``) and their
    predicted saving (``cost_us``, ``what_if_us``); ``analysis``: the analysis trial's document (``--variants
    auto``), whose ``needs_code_change`` rows the document lists beside the variants."""
    from gpuprof.version import __version__

    runs = []
    for o in baseline:
        t = _times(o)
        runs.append({"steps": len(t), "step_time_median_us": statistics.median(t) if t else None,
                     "data_wait_median_us": _median((o.result or {}).get("data_wait_us")),
                     "memory_peak_bytes": _memory(o), "error": o.error, "directory": str(o.directory),
                     "wall_s": round(o.wall_s, 3)})
    ok = [o for o in baseline if o.error is None and _times(o)]
    pooled = [x for o in ok for x in _times(o)]
    medians = [statistics.median(_times(o)) for o in ok]
    base_median = statistics.median(pooled) if pooled else None
    spread = (max(medians) - min(medians)) if len(medians) >= 2 else None
    between = (2.0 * statistics.stdev(medians) * math.sqrt(1.0 + 1.0 / len(medians))) if len(medians) >= 2 else None
    base_losses = [_losses(o) for o in ok]
    reproducible = None
    if len(base_losses) >= 2 and any(x is not None for x in base_losses[0]):
        reproducible = all(ls == base_losses[0] for ls in base_losses[1:])
    wait = _median([x for o in ok for x in (o.result or {}).get("data_wait_us") or []])
    doc: dict[str, Any] = {
        "try_schema_version": TRY_SCHEMA_VERSION,
        "tool": {"name": "gpuprof", "version": __version__},
        "command": command,
        "warmup": warmup, "steps": steps, "cores": cores, "cuda": cuda, "interrupted": interrupted,
        "baseline": {"runs": runs, "step_time_median_us": base_median, "interval_us": between, "runs_spread_us": spread,
                     "data_wait_median_us": wait, "losses_reproducible": reproducible,
                     "throughput_steps_per_s": 1e6 / base_median if base_median else None},
        "variants": [],
        "analysis": {k: val for k, val in analysis.items() if k != "needs_code_change"} if analysis else None,
        "needs_code_change": list((analysis or {}).get("needs_code_change") or []),
    }
    rows = []
    for v, o in variants:
        row = _variant(v, o, pooled, base_median, between, base_losses[0] if base_losses else [],
                       reproducible, wait)
        pred = (predictions or {}).get(v.name) or {}
        row["suggested_by"] = list(pred.get("codes") or [])
        if pred.get("cost_us") is not None:  # the suggesting finding's cost per step, and its what-if
            row["predicted_saving_us"] = pred["cost_us"]
        row["predicted_what_if_us"] = pred.get("what_if_us")
        row["combined"] = v.name.startswith("combined: ")
        rows.append(row)
    order = {name: i for i, name in enumerate(VERDICTS)}
    rows.sort(key=lambda r: (order[r["verdict"]], r["step_time_median_us"] if r["step_time_median_us"] is not None
                             else math.inf))
    doc["variants"] = rows
    if not ok:
        doc["error"] = "no baseline run measured a step: " + "; ".join(o.error or "no steps" for o in baseline)
    return doc


def _median(xs: Any) -> float | None:
    vals = [float(x) for x in xs or [] if isinstance(x, (int, float))]
    return statistics.median(vals) if vals else None


def _variant(v: Variant, o: Outcome, base: list[float], base_median: float | None, between: float | None,
             base_loss: list[float | None], reproducible: bool | None, wait: float | None) -> dict[str, Any]:
    t = _times(o)
    med = statistics.median(t) if t else None
    applied = (o.result or {}).get("applied") or {}
    row: dict[str, Any] = {
        "name": v.name, "settings": v.settings.given(), "applied": applied, "numeric": v.numeric,
        "numerics": v.numerics, "loss_rtol": TOLERANCE[v.numerics],
        "steps": len(t), "step_time_median_us": med, "interval_us": None, "p_value": None, "speedup": None,
        "throughput_steps_per_s": 1e6 / med if med else None,
        "memory_peak_bytes": _memory(o), "cuda_memory_peak_bytes": (o.result or {}).get("cuda_peak_bytes"),
        "loss_max_abs_diff": None, "loss_max_rel_diff": None, "verdict": "failed", "error": o.error,
        "note": None, "code_change": None,
        # the data wait the baseline measured per step: what hiding the loading behind the step could save at
        # most (the cost the DataLoader findings give); no prediction for the other variants
        "predicted_saving_us": wait if any(k in DATALOADER for k in v.settings.given()) else None,
        "measured_saving_us": None, "directory": str(o.directory), "wall_s": round(o.wall_s, 3),
    }
    if o.error is not None or med is None or base_median is None:
        if row["error"] is None:
            row["error"] = "no step measured" if med is None else "no baseline to compare with"
        return row
    if not (o.result or {}).get("complete", False):
        row["note"] = f"the job ended after {len(t)} measured steps, before --steps"
    row["speedup"] = base_median / med if med else None
    row["measured_saving_us"] = base_median - med
    band = noise_band(base, t)
    noise = max(x for x in (band, between, 0.0) if x is not None)
    row["interval_us"] = noise
    p = rank_test_p(base, t)
    row["p_value"] = p
    delta = med - base_median
    if p is not None and p < P_CHANGED and abs(delta) > noise:
        row["verdict"] = "faster" if delta < 0 else "slower"
    else:
        row["verdict"] = "same"
    abs_d, rel_d = _loss_diff(base_loss, _losses(o))
    row["loss_max_abs_diff"], row["loss_max_rel_diff"] = abs_d, rel_d
    rtol = TOLERANCE[v.numerics]
    if reproducible and abs_d is not None and rel_d is not None:
        if (rtol == 0 and abs_d > 0) or rel_d > rtol:
            row["verdict"] = "changed-numerics"
            row["note"] = (f"the losses moved by up to {abs_d:.3g} ({rel_d:.2g} relative) from the baseline's"
                           + (" (this setting should not change them)" if rtol == 0
                              else f", beyond the {rtol:g} of its class ({v.numerics})"))
    elif reproducible is False:
        row["note"] = "the baseline's own runs gave different losses: the numerics are not compared"
    if row["verdict"] == "faster":
        row["code_change"] = code_change(v, (o.result or {}).get("dataloader_sites"), (o.result or {}).get("sites"))
    missing = [k for k in v.settings.given() if k not in applied]
    if not applied or missing:
        extra = _not_applied(missing or list(v.settings.given()))
        row["note"] = f"{row['note']}; {extra}" if row["note"] else extra
    trial_notes = [str(n) for n in (o.result or {}).get("notes") or [] if isinstance(n, str)]
    if trial_notes:
        row["note"] = "; ".join(([row["note"]] if row["note"] else []) + trial_notes[:3])
    return row


_NOT_TAKEN = {"num_workers": "no DataLoader took num_workers", "pin_memory": "no DataLoader took pin_memory",
              "persistent_workers": "no DataLoader with workers took persistent_workers",
              "prefetch_factor": "no DataLoader with workers took prefetch_factor",
              "channels_last": "no 4-D parameter or input to convert (channels_last changes nothing here)",
              "compile": "no model (a module holding parameters) was called", "autocast": "no model was called",
              "optimizer_foreach": "no optimizer took foreach=True", "optimizer_fused": "no optimizer took fused=True"}


def _not_applied(keys: list[str]) -> str:
    return "; ".join(_NOT_TAKEN.get(k, f"{k} was not applied") for k in keys)


def _at(sites: Any) -> str:
    where = [str(s) for s in sites or [] if isinstance(s, str)][:5]
    return f" at {', '.join(where)}" if where else ""


def code_change(v: Variant, sites: Any, other: Any = None) -> str:
    """The lines to change in the user's code to keep a variant: what to write, and where (file:line of the
    user's code, as the trial saw it: where each DataLoader and optimizer was built, where the model was called,
    where zero_grad was called)."""
    given = v.settings.given()
    more: dict[str, Any] = other if isinstance(other, dict) else {}
    parts = []
    loader = [f"{k}={v!r}" for k, v in given.items() if k in DATALOADER]
    if loader:
        parts.append(f"DataLoader(..., {', '.join(loader)})" + _at(sites))
    if "matmul_precision" in given:
        parts.append(f"torch.set_float32_matmul_precision({given['matmul_precision']!r}) after importing torch")
    if "cudnn_benchmark" in given:
        parts.append(f"torch.backends.cudnn.benchmark = {given['cudnn_benchmark']!r}")
    if "zero_grad_set_to_none" in given:
        parts.append(f"optimizer.zero_grad(set_to_none={given['zero_grad_set_to_none']!r})"
                     + _at(more.get("zero_grad")))
    for key, arg in (("optimizer_fused", "fused"), ("optimizer_foreach", "foreach")):
        if given.get(key):
            parts.append(f"torch.optim.<Optimizer>(..., {arg}=True)" + _at(more.get("optimizer")))
    model = _at(more.get("model"))
    if given.get("channels_last"):
        parts.append("model = model.to(memory_format=torch.channels_last) once, and "
                     "x = x.contiguous(memory_format=torch.channels_last) for 4-D inputs, before the call" + model)
    if given.get("compile"):
        parts.append("model = torch.compile(model) once, before the call" + model)
    if "autocast" in given:
        dtype = "torch.bfloat16" if given["autocast"] == "bf16" else "torch.float16"
        parts.append(f"with torch.autocast(device_type, dtype={dtype}): around the call" + model
                     + ("" if given["autocast"] == "bf16" else " (with torch.amp.GradScaler for the backward)"))
    return "; ".join(parts)

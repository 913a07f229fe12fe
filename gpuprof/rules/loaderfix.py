"""The loader fix's what-if on a run without GPU work (GP102, GP103; GP601 where it absorbs them).

On a trace without GPU work the trainer computes on the host, so the loading that DataLoader workers would take
over still needs its CPU time, on the cores the trainer computes on (docs/critical-path.md, "A loader fix without
a GPU"). The replay removes the data waits (``WhatIf.removal``); this model says how much of that the step keeps:
capped by the cores the run measured free beside the trainer where GP601 gives them (issue 46: on 2 busy cores a
``num_workers`` fix promised by the older model made the job slower), else the older model's ``1 - 1/N``.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from gpuprof.findings import Evidence, Finding
from gpuprof.trace.critpath.margin import NOTE_MORE, margin_note, step_of
from gpuprof.units import fmt_us

__all__ = ["NOTE_LOADER_CPU", "Measured", "loader_saving", "loader_fix_without_gpu", "loader_without_gpu", "measured_of"]

NOTE_LOADER_CPU = "not replayed as a saving: no GPU in this trace"


@dataclass(frozen=True)
class Measured:
    """What the run measured about its cores over the steps (GP601's evidence: ``trainer_cpu_cores``,
    ``idle_cores``, ``cores_measured_s``; gpuprof.capture.checks.loader.freecores): the training process's CPU and
    the idle time of the cores it may run on, in cores (1.0: one core the whole time)."""

    trainer_cores: float
    idle_cores: float
    seconds: float


def loader_saving(wait_us: float, cores: int, step_us: float | None = None,
                  measured: Measured | None = None) -> float:
    """What a loader fix saves per step on a run without GPU work, ``wait_us`` of data loading per step moved to
    DataLoader workers on ``cores`` cores (docs/critical-path.md, "A loader fix without a GPU").

    Measured (``measured`` and the mean step ``step_us``): the workers' loading still needs the CPU it took in the
    trainer, and the job can only get the cores the trainer used plus the ones that were idle beside it, so the
    step is at least its CPU work spread over those: ``step x trainer / (trainer + idle)``; the saving is at most
    ``step x idle / (trainer + idle)``, never more than the wait, and nothing when no core was idle (the workers
    would take their CPU from the trainer, or from other processes' share). Unmeasured: the trainer's compute is
    assumed to keep every core busy (PyTorch's intra-op threads, one per core), so the step keeps ``wait_us /
    cores`` of the loading. Worker start-up and batch transfer are not counted in either (they can make the fix
    cost more than it saves)."""
    wait = max(wait_us, 0.0)
    if measured is None or step_us is None:
        return wait * (1.0 - 1.0 / max(cores, 1))
    idle, used = max(measured.idle_cores, 0.0), max(measured.trainer_cores, 0.0)
    if idle <= 0.0:
        return 0.0
    return min(wait, max(step_us, 0.0) * idle / (used + idle))


def loader_fix_without_gpu(f: Finding, replayed: float, cores: int | None, step: float,
                           measured: Measured | None = None) -> Finding:
    """A loader fix's what-if on a trace without GPU work (``WhatIf.without_gpu`` of GP102 and GP103; GP601 with
    the run's cores and, where measured, the cores free beside the trainer): the workers share the trainer's
    cores."""
    evidence = f.evidence + (Evidence("loader_wait_us", round(replayed, 1), None, "us",
                                      extra={"replayed": "data waits removed, no GPU work in the trace"}),)
    if cores is not None and measured is not None and step > 0:
        saving = loader_saving(replayed, cores, step, measured)
        seen = (f"no GPU in this trace: DataLoader workers would load on the cores the trainer computes on; over "
                f"{measured.seconds:.0f} s of steps the trainer used {measured.trainer_cores:.2f} of the {cores} "
                f"cores and {measured.idle_cores:.2f} were idle")
        why = (f"{seen}: no core was free beside the trainer, so the workers would take their CPU from it and the "
               "step would not get shorter" if saving <= 0.0 else
               f"{seen}, so the workers can take only that idle time: of the {fmt_us(replayed)} per step of "
               f"loading the step saves at most step x idle / (trainer + idle)")
        note = f"{why}; believe the what-if" if saving <= 0.0 else \
            margin_note(f.cost_us_per_step, saving, step, (why, f"{NOTE_MORE}: {why}"))
        return dataclasses.replace(f, what_if_saving_us=round(saving, 1), what_if_note=note, evidence=evidence)
    if cores is not None:
        saving = loader_saving(replayed, cores)
        why = (f"no GPU in this trace: DataLoader workers would load on the {cores} cores the trainer computes on, "
               f"keeping 1/{cores} of the {fmt_us(replayed)} per step of loading in the step")
        note = margin_note(f.cost_us_per_step, saving, step, (why, f"{NOTE_MORE}: {why}"))
        return dataclasses.replace(f, what_if_saving_us=round(saving, 1), what_if_note=note, evidence=evidence)
    return dataclasses.replace(f, evidence=evidence, what_if_note=(
        f"{NOTE_LOADER_CPU}: DataLoader workers would load on the cores the trainer computes on (PyTorch's own "
        f"threads use every core), so of the {fmt_us(replayed)} per step of loading the step saves at most "
        f"(1 - 1/N) of it on N cores, less the workers' start-up and batch transfer; the trace does not record N"))


def loader_without_gpu(lost: Finding, w: Finding | None = None) -> Finding | None:
    """For a loader finding whose trace had no GPU work (its ``loader_wait_us`` evidence): with ``w`` (the runtime
    finding that absorbs it, GP601, whose evidence may give the run's ``cores``), ``w`` with the loader what-if
    modelled on those cores, or with ``lost``'s note where the cores are not known; without ``w``, ``lost`` itself
    when it is such a finding (None: it is not)."""
    wait = next((e.value for e in lost.evidence if e.metric == "loader_wait_us"), None)
    if not isinstance(wait, (int, float)):
        return None
    if w is None:
        return lost
    cores = next((e.extra.get("cores") for e in w.evidence if isinstance(e.extra.get("cores"), int)), None)
    if cores is None:
        return dataclasses.replace(w, what_if_note=lost.what_if_note)
    step = step_of(w) or step_of(lost) or 0.0
    return loader_fix_without_gpu(w, float(wait), cores, step, measured_of(w))


def measured_of(w: Finding) -> Measured | None:
    """The cores free beside the trainer as GP601's evidence gives them (None where the run did not measure them)."""
    for e in w.evidence:
        got = [_figure(e.extra.get(k)) for k in ("trainer_cpu_cores", "idle_cores", "cores_measured_s")]
        used, idle, secs = got
        if used is not None and idle is not None and secs is not None:
            return Measured(used, idle, secs)
    return None


def _figure(x: object) -> float | None:
    """A measured figure read back from evidence: a finite number at or above 0, else None."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    try:
        v = float(x)
    except OverflowError:  # an integer beyond a float's range (a hand-edited report)
        return None
    return v if math.isfinite(v) and v >= 0 else None

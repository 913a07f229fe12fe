"""The loader fix's what-if on a run without GPU work (GP102, GP103; GP601 where it absorbs them).

On a trace without GPU work the trainer computes on the host, so the loading that DataLoader workers would take
over still needs its CPU time, on the cores the trainer computes on (docs/critical-path.md, "A loader fix without
a GPU"). The replay removes the data waits (``WhatIf.removal``); this model says how much of that the step keeps.
"""

from __future__ import annotations

import dataclasses

from gpuprof.findings import Evidence, Finding
from gpuprof.trace.critpath.margin import NOTE_MORE, margin_note, step_of
from gpuprof.units import fmt_us

__all__ = ["NOTE_LOADER_CPU", "loader_saving", "loader_fix_without_gpu", "loader_without_gpu"]

NOTE_LOADER_CPU = "not replayed as a saving: no GPU in this trace"


def loader_saving(wait_us: float, cores: int) -> float:
    """What a loader fix saves per step on a run without GPU work, ``wait_us`` of data loading per step moved to
    DataLoader workers on a machine of ``cores`` cores (docs/critical-path.md): the trainer's compute keeps every
    core busy (PyTorch's intra-op threads, one per core), so the workers' loading takes its CPU time from it, spread
    over the cores: the step keeps ``wait_us / cores`` of it. Worker start-up and batch transfer are not counted
    (they can make the fix cost more than it saves)."""
    return max(wait_us, 0.0) * (1.0 - 1.0 / max(cores, 1))


def loader_fix_without_gpu(f: Finding, replayed: float, cores: int | None, step: float) -> Finding:
    """A loader fix's what-if on a trace without GPU work (``WhatIf.without_gpu`` of GP102 and GP103): the workers
    share the trainer's cores."""
    evidence = f.evidence + (Evidence("loader_wait_us", round(replayed, 1), None, "us",
                                      extra={"replayed": "data waits removed, no GPU work in the trace"}),)
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
    return loader_fix_without_gpu(w, float(wait), cores, step)

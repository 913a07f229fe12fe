"""Runtime checks of a distributed run (GP710-GP712), made at the end of the capture.

GP710: a DataLoader in a multi-rank run whose sampler is not a
``DistributedSampler`` (and whose dataset is not an ``IterableDataset``,
which shards itself): every rank reads the same samples, so N ranks do the
work of one, N times. GP711: the process group's backend does not suit the
device: ``gloo`` for CUDA training (collectives through host memory and TCP,
several times slower than NCCL), or ``nccl`` while the model stays on the CPU
(NCCL only moves GPU tensors).

GP712: a shuffling ``DistributedSampler`` whose ``epoch`` was the same at two
successive epoch starts of its DataLoader: ``set_epoch()`` was not called, so
the sampler seeds its permutation with the same ``seed + epoch`` and every
epoch visits the samples in the same order. Checked whatever the world size
(a sampler built with ``num_replicas``/``rank`` needs no process group).
"""

from __future__ import annotations

from gpuprof.capture.checks.loader.dataloader import LoaderRecord
from gpuprof.findings import Evidence, Finding, SourceLocation
from gpuprof.runtimecodes import runtime_check

__all__ = ["distributed_findings", "process_group", "sampler_epoch_findings"]

SHARDING_SAMPLERS = ("DistributedSampler",)


def process_group() -> tuple[int, str] | None:
    """(world size, backend) of the default process group when one is initialised, else None."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return None
    return dist.get_world_size(), str(dist.get_backend())


def distributed_findings(records: list[LoaderRecord], world_size: int, backend: str, on_cuda: bool) -> list[Finding]:
    """GP710/GP711 for a run with ``world_size`` ranks on ``backend``."""
    out: list[Finding] = []
    if world_size < 2:
        return out
    for rec in records:
        if rec.batches == 0 or rec.iterable or any(s in rec.sampler for s in SHARDING_SAMPLERS):
            continue
        out.append(_finding(
            "GP710",
            f"{rec.label} samples with {rec.sampler or 'no sampler'} in a {world_size}-rank run: every rank reads the "
            "same samples, so the job does the work of one rank, {world_size} times".replace("{world_size}", str(world_size)),
            "Pass sampler=DistributedSampler(dataset) to the DataLoader (and call sampler.set_epoch(epoch) at the "
            "start of each epoch), or shard an IterableDataset by rank.",
            (Evidence("sampler", rec.sampler or "none", extra={"world_size": world_size, "batches": rec.batches}),),
            rec.location, rec.label,
        ))
    low = backend.lower()
    if on_cuda and low == "gloo":
        out.append(_finding(
            "GP711",
            f"the process group uses the gloo backend while training on CUDA ({world_size} ranks): "
            "collectives go through host memory",
            "Initialise the process group with backend='nccl' for CUDA tensors "
            "(dist.init_process_group('nccl'), or 'cpu:gloo,cuda:nccl' when CPU collectives are also needed).",
            (Evidence("backend", backend, extra={"device": "cuda", "world_size": world_size}),), None, "process group",
        ))
    elif not on_cuda and low == "nccl":
        out.append(_finding(
            "GP711",
            f"the process group uses the nccl backend but the model trains on the CPU ({world_size} ranks): "
            "NCCL moves only GPU tensors",
            "Use backend='gloo' for CPU training, or move the model and batches to the rank's GPU.",
            (Evidence("backend", backend, extra={"device": "cpu", "world_size": world_size}),), None, "process group",
        ))
    return out


def sampler_epoch_findings(records: list[LoaderRecord]) -> list[Finding]:
    """GP712 for each loader whose shuffling DistributedSampler kept its epoch from one epoch to the next.

    Told apart by the ``set_epoch()`` calls between two epoch starts: none (never called, or not before
    every epoch: add the call), or calls that passed the same value each time (``set_epoch(0)`` in the
    loop: pass the epoch number; the finding points at that call)."""
    out: list[Finding] = []
    for rec in records:
        epochs = rec.sampler_epochs
        repeats = [i for i, (a, b) in enumerate(zip(epochs, epochs[1:])) if a == b]
        if not repeats:
            continue
        calls = rec.set_epoch_calls if len(rec.set_epoch_calls) == len(epochs) else [0] * len(epochs)
        called = [i for i in repeats if calls[i + 1] > calls[i]]  # set_epoch() ran, and kept the value
        never = len(set(epochs)) == 1
        extra: dict[str, object] = {"sampler_epochs": epochs[:16], "epoch_starts": len(epochs)}
        location = rec.location
        if called and len(called) == len(repeats):
            value = epochs[repeats[0] + 1]
            what = (f"kept epoch={value} at all {len(epochs)} epoch starts" if never
                    else f"kept the previous epoch's value at {len(repeats)} of {len(epochs) - 1} epoch changes")
            message = (f"{rec.label}'s DistributedSampler (shuffle=True) {what}: set_epoch({value}) is called "
                       f"before every epoch with the same value, so those epochs shuffle the samples in the same "
                       "order (the same seed + epoch)")
            advice = ("Pass the loop's epoch number, not a constant: for epoch in range(n): "
                      "sampler.set_epoch(epoch) (with a resumed run, the epoch it resumes at).")
            extra.update(set_epoch_calls=calls[-1], set_epoch_values=rec.set_epoch_values)
            location = rec.set_epoch_location or rec.location
        else:
            what = (f"kept epoch={epochs[0]} at all {len(epochs)} epoch starts" if never
                    else f"kept the previous epoch's value at {len(repeats)} of {len(epochs) - 1} epoch changes")
            message = (f"{rec.label}'s DistributedSampler (shuffle=True) {what}: set_epoch() was "
                       + ("never called" if never and not called else "not called before every epoch")
                       + ", so those epochs shuffle the samples in the same order (the same seed + epoch)")
            advice = ("Call sampler.set_epoch(epoch) at the start of every epoch, before iterating the DataLoader "
                      "(for epoch in range(n): loader.sampler.set_epoch(epoch); for batch in loader: ...).")
        out.append(_finding(
            "GP712", message, advice,
            (Evidence("repeated_epochs", len(repeats), 0, "epochs", extra=extra),),
            location, rec.label,
        ))
    return out


def _finding(code: str, message: str, advice: str, evidence: tuple[Evidence, ...], location: SourceLocation | None, source: str) -> Finding:
    check = runtime_check(code)
    return Finding(code=code, name=check.name, severity=check.severity, message=message, advice=advice,
                   evidence=evidence, location=location, origin="runtime", source=source)

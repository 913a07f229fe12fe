"""Loader verdicts from the watch (GP605-GP607): why the loop waits for a loader that has workers.

The DataLoader monitor (:mod:`gpuprof.capture.checks.loader.dataloader`) measures how long
the loop waits for each loader's batches; the watch's sampler
(:mod:`gpuprof.capture.job.sampler`) how much CPU the trainer's child processes (the
workers) use and want, and what they read and how often they wake up
(:mod:`gpuprof.capture.checks.loader.workerio`). Together they tell a CPU-bound loader
(GP605: no core left; GP607: cores unused) from one whose workers are idle
while the loop waits (GP606). GP606 names storage or the network only with
I/O evidence (the workers read per sample, or block on block I/O); idle
workers without reads that block once per sample wait on something ``/proc``
does not count (a socket read with ``recv()``, a lock, a sleep); idle workers
that neither read nor block per sample make their batches cheaply, and the
loop waits on the hand-off of each batch between the processes. With too few
figures to tell, the finding says what was measured and names no cause.
Advice never speaks of a GPU on a run without CUDA.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpuprof.capture.checks.loader.dataloader import LoaderRecord, _finding
from gpuprof.capture.checks.loader.workerio import WorkerIoSamples
from gpuprof.capture.config import CheckOptions
from gpuprof.findings import Evidence, Finding
from gpuprof.trace.dataloading import data_loading_share

if TYPE_CHECKING:  # pragma: no cover - annotations only
    from gpuprof.report import JobSamples

__all__ = ["WorkerCpu", "WorkerIoFigures", "worker_cpu", "worker_io", "loader_verdicts"]


@dataclass(frozen=True)
class WorkerCpu:
    """The watch's CPU figures about a loader's workers (medians over the samples with workers alive)."""

    samples: int  # samples with at least one worker process alive
    workers_cpu_pct: float  # all the trainer's child processes together, % of one core
    per_worker_pct: float  # the same over the loader's workers
    workers_seen: int  # child processes at the sample with the most
    process_cpu_pct: float  # the training process itself
    # each worker's CPU demand: on a core or runnable waiting for one (None where the system does not say)
    per_worker_demand_pct: float | None = None

    @property
    def load_pct(self) -> float:
        """What the verdicts read: the demand where known (a contended machine gives a busy worker less than a
        core, yet it is CPU-bound), else the CPU used."""
        return self.per_worker_demand_pct if self.per_worker_demand_pct is not None else self.per_worker_pct


def worker_cpu(samples: JobSamples | None, num_workers: int) -> WorkerCpu | None:
    """:class:`WorkerCpu` from the watch's samples; None without samples that saw a worker.

    The children's CPU is divided by the loader's ``num_workers`` (or by the
    children seen, when fewer are alive): an idle child that is not a worker
    (a compile pool) adds nothing to the sum, so it cannot make busy workers
    look idle.
    """
    if samples is None or num_workers <= 0:
        return None
    demand = samples.workers_demand_pct or [None] * len(samples.step)
    rows = [(pct, n, proc, want) for pct, n, proc, want
            in zip(samples.workers_cpu_pct, samples.workers, samples.process_cpu_pct, demand) if pct is not None and n]
    if not rows:
        return None
    per = [pct / min(num_workers, n) for pct, n, _, _ in rows if n]
    wants = [want / min(num_workers, n) for _, n, _, want in rows if n and want is not None]
    return WorkerCpu(samples=len(rows), workers_cpu_pct=statistics.median(r[0] for r in rows),
                     per_worker_pct=statistics.median(per), workers_seen=max(n for _, n, _, _ in rows if n),
                     process_cpu_pct=statistics.median(r[2] for r in rows),
                     per_worker_demand_pct=statistics.median(wants) if len(wants) == len(rows) else None)


@dataclass(frozen=True)
class WorkerIoFigures:
    """The workers' I/O per sample (dataset item) the loop received, from the watch's medians (None: not measured).

    Per second figures are medians over the samples with workers alive; they become per item at the rate the
    loop took items (``batches x batch_size`` over the steps' time).
    """

    read_kib_per_item: float | None  # rchar: read() from files, page cache, network file systems, pipes
    disk_read_kib_per_item: float | None  # read_bytes: fetched from storage
    io_wait_pct_per_worker: float | None  # blocked on block I/O, % of one core (None: delay accounting off)
    wakeups_per_item: float | None  # times a worker was put on a core, per item


def _median(values: list[float | None], alive: list[bool]) -> float | None:
    got = [v for v, a in zip(values, alive) if a and v is not None]
    return statistics.median(got) if got else None


def worker_io(samples: JobSamples | None, io: WorkerIoSamples | None, *, items_per_s: float,
              num_workers: int) -> WorkerIoFigures | None:
    """:class:`WorkerIoFigures` over the samples with workers alive; None without I/O samples."""
    if samples is None or io is None or items_per_s <= 0 or num_workers <= 0:
        return None
    n = min(len(samples.workers), len(io.read_kib_s))
    alive = [bool(w) for w in samples.workers[:n]]
    if not any(alive):
        return None

    def per_item(col: list[float | None]) -> float | None:
        m = _median(col[:n], alive)
        return m / items_per_s if m is not None else None

    wait = _median(io.io_wait_pct[:n], alive)
    return WorkerIoFigures(read_kib_per_item=per_item(io.read_kib_s), disk_read_kib_per_item=per_item(io.disk_read_kib_s),
                           io_wait_pct_per_worker=wait / num_workers if wait is not None else None,
                           wakeups_per_item=per_item(io.wakeups_s))


def _idle_verdict(rec: LoaderRecord, measured: str, io: WorkerIoFigures | None,
                  options: CheckOptions) -> tuple[str, str]:
    """GP606's message and advice: the cause the I/O figures support, or none (module docstring)."""
    reads = io.read_kib_per_item if io is not None else None
    wait = io.io_wait_pct_per_worker if io is not None else None
    wakeups = io.wakeups_per_item if io is not None else None
    reads_text = ""
    if reads is not None:
        disk = io.disk_read_kib_per_item if io is not None else None
        reads_text = f"they read {_kib(reads)} per sample" + (f" ({_kib(disk)} from storage)" if disk else "")
    wait_text = f"blocked on I/O {wait:.0f}% of the time each" if wait is not None else ""
    if (reads is not None and reads >= options.loader_read_kib_per_sample) or (
            wait is not None and wait >= options.loader_io_wait_pct):
        said = " and ".join(t for t in (reads_text, f"are {wait_text}" if wait_text else "") if t)
        return (f"{rec.label}: {measured}: the workers are mostly idle while the loop waits, and {said}: they "
                "wait on storage or the network",
                "Read faster: copy or cache the data on local disk (NVMe) or in memory, read bigger sequential "
                "shards (WebDataset, TFRecord-style) instead of one small file per sample; to overlap the waits, "
                "raise num_workers or prefetch_factor (idle workers cost little CPU).")
    find = ("Find where the workers wait (py-spy dump --pid <worker pid> shows each worker's stack); to overlap the "
            "waits meanwhile, raise num_workers or prefetch_factor (idle workers cost little CPU).")
    idle = f"{rec.label}: {measured}: the workers are mostly idle while the loop waits"
    if reads is None and wait is None:  # nothing about I/O was measured (no /proc): no cause named
        return f"{idle}; what they wait on was not measured (no I/O counters on this system)", find
    no_io = "; ".join(t for t in (reads_text, wait_text) if t) + ", so not storage"
    if wakeups is not None and wakeups >= options.loader_blocked_wakeups_per_sample:
        return (f"{idle}; {no_io}, yet each worker wakes {wakeups:.1f} times per sample: __getitem__ blocks on "
                "something that is neither CPU nor a read /proc counts (a socket read with recv(), an HTTP or "
                "object-store client, a lock, a sleep)", find)
    if wakeups is not None:
        return (f"{idle}; {no_io}, and each worker wakes {wakeups:.2f} times per sample (nothing blocks per "
                "sample): the batches are cheap to make, and the loop waits on each batch's hand-off from the "
                "worker processes (queue, shared memory), which costs more than making it",
                "With an in-memory dataset of cheap samples, try num_workers=0 (no hand-off), or fetch a whole "
                "batch per __getitem__ (sampler=BatchSampler(...), batch_size=None) or larger batches, so fewer "
                "batches cross between processes; compare the step time before and after.")
    return f"{idle}; {no_io}; what else they wait on was not measured", find


def _kib(kib: float | None) -> str:
    if kib is None:
        return "n/a"
    return f"{kib / 1024:.1f} MiB" if kib >= 1024 else f"{kib:.1f} KiB"


def loader_verdicts(records: list[LoaderRecord], samples: JobSamples | None, *, total_step_s: float, num_steps: int,
                    cores: int, local_world_size: int, options: CheckOptions, io: WorkerIoSamples | None = None,
                    on_cuda: bool = False) -> list[Finding]:
    """GP605-GP607: why the loop waits for a loader that has workers, from the workers' measured CPU use.

    One verdict per run, for the loader with workers that the loop waited for
    longest (the CPU of the trainer's child processes cannot be split between
    loaders). Nothing without the watch's samples, below ``loader_wait_share``
    of the step time, or when the workers are neither busy nor idle.
    """
    waited = [r for r in records if r.num_workers > 0 and r.batches > 0]
    if not waited or total_step_s <= 0:
        return []
    rec = max(waited, key=lambda r: r.fetch_s)
    share = data_loading_share(rec.fetch_s, total_step_s) or 0.0
    if share < options.loader_wait_share:
        return []
    cpu = worker_cpu(samples, rec.num_workers)
    if cpu is None or cpu.samples < options.loader_min_samples:
        return []
    lws = max(local_world_size, 1)
    steps = max(num_steps, 1)
    per_step_us = rec.fetch_s / steps * 1e6
    total_workers = rec.num_workers * lws
    spare = cores - total_workers - lws  # one core per rank for its training loop
    want = (f", wanting {cpu.per_worker_demand_pct:.0f}% (on a core or waiting for one)"
            if cpu.per_worker_demand_pct is not None else "")
    measured = (f"the loop waits for batches {share:.0%} of the step time ({per_step_us / 1000:.2f} ms/step); "
                f"its {rec.num_workers} worker{'s use' if rec.num_workers != 1 else ' uses'} "
                f"{cpu.per_worker_pct:.0f}% of a core each{want} (median of {cpu.samples} samples) on {cores} cores")
    load = cpu.load_pct
    extra = {"per_worker_cpu_pct": round(cpu.per_worker_pct, 1), "workers_cpu_pct": round(cpu.workers_cpu_pct, 1),
             "per_worker_demand_pct": (round(cpu.per_worker_demand_pct, 1)
                                       if cpu.per_worker_demand_pct is not None else None),
             "process_cpu_pct": round(cpu.process_cpu_pct, 1), "num_workers": rec.num_workers, "cores": cores,
             "local_world_size": lws, "samples": cpu.samples, "data_wait_share": round(share, 4)}
    metric = "per_worker_cpu_demand_pct" if cpu.per_worker_demand_pct is not None else "per_worker_cpu_pct"
    if load >= options.worker_busy_pct and spare >= 1:
        target = total_workers + spare
        code = "GP607"
        message = f"{rec.label}: {measured}, {spare} of them unused: too few workers for the cores"
        advice = (f"Raise num_workers to about {max(target // lws, rec.num_workers + 1)}"
                  + (" per rank" if lws > 1 else "") + " (cores minus one per training process), then check "
                  "again: the wait should shrink while each worker stays busy.")
        ev = Evidence(metric, round(load, 1), options.worker_busy_pct, "%", extra=extra)
    elif load >= options.worker_busy_pct:
        code = "GP605"
        message = f"{rec.label}: {measured}, with no core left: the workers are CPU-bound"
        advice = ("Make each sample cheaper to produce: decode smaller or pre-resized images, cache preprocessed "
                  "samples" + (", move decoding and augmentation to the GPU (torchvision.io.decode_jpeg("
                               "device='cuda'), DALI)" if on_cuda else "")
                  + "; or give the job more CPU cores and raise num_workers with them.")
        ev = Evidence(metric, round(load, 1), options.worker_busy_pct, "%", extra=extra)
    elif load <= options.worker_idle_pct:
        code = "GP606"
        items = rec.batches * max(rec.batch_size or 1, 1)
        figures = worker_io(samples, io, items_per_s=items / total_step_s, num_workers=rec.num_workers)
        message, advice = _idle_verdict(rec, measured, figures, options)
        if figures is not None:
            extra.update({"read_kib_per_sample": _round(figures.read_kib_per_item),
                          "disk_read_kib_per_sample": _round(figures.disk_read_kib_per_item),
                          "io_wait_pct_per_worker": _round(figures.io_wait_pct_per_worker),
                          "wakeups_per_sample": _round(figures.wakeups_per_item)})
        ev = Evidence(metric, round(load, 1), options.worker_idle_pct, "%", extra=extra)
    else:
        return []
    return [_finding(code, message, advice, rec, (ev,), cost_us=per_step_us, cost_share=share,
                     info_below_share=options.dataloader_share_warning)]


def _round(v: float | None) -> float | None:
    return round(v, 3) if v is not None else None

"""DataLoader instrumentation and its checks (GP601-GP604).

While a capture runs, ``DataLoader.__iter__`` and the iterators' ``__next__``
are wrapped (class attributes, restored when the capture ends) to learn, for
every loader the loop iterates: its settings, where the loop iterates it
(``file:line``), how many epochs ran, and how long the training process
waited for each batch. That wait is the **data-loading time** of a step: the
time spent inside ``__next__`` between two ``step()`` calls. Its **share** is
that time over the step time. The wrapper costs two clock reads per batch.
"""

from __future__ import annotations

import os
import sys
import weakref
from dataclasses import dataclass, field
from time import perf_counter
from typing import Any, Callable

from gpuprof.capture.checks.loader import loaderplace, samplerepoch
from gpuprof.capture.checks.loader.freecores import CoreUse
from gpuprof.capture.config import CheckOptions
from gpuprof.codespec import INFO_BELOW_SHARE, severity_for_cost
from gpuprof.findings import Evidence, Finding, Severity, SourceLocation
from gpuprof.runtimecodes import runtime_check
from gpuprof.trace.dataloading import data_loading_share  # the one definition (the capture's figures use it too)

__all__ = ["LoaderRecord", "LoaderMonitor", "available_cores", "batch_signature", "dataloader_findings",
           "prepare"]

Signature = tuple[Any, ...]


def batch_signature(obj: Any, depth: int = 0) -> Signature | None:
    """Shapes and dtypes of the tensors in a batch (nested tuples/lists/dicts), or None."""
    shape = getattr(obj, "shape", None)
    if shape is not None and hasattr(obj, "dtype"):
        return ("T", tuple(shape), str(obj.dtype))
    if depth > 3:
        return None
    if isinstance(obj, (tuple, list)):
        return ("L",) + tuple(batch_signature(x, depth + 1) for x in obj[:16])
    if isinstance(obj, dict):
        return ("D",) + tuple((str(k), batch_signature(v, depth + 1)) for k, v in list(obj.items())[:16])
    return None


@dataclass
class LoaderRecord:
    """What one DataLoader did during the capture."""

    label: str  # "DataLoader(MyDataset)"
    num_workers: int
    pin_memory: bool
    persistent_workers: bool
    batch_size: int | None
    location: SourceLocation | None
    epochs: int = 0
    batches: int = 0
    fetch_s: float = 0.0
    epoch_start_s: list[float] = field(default_factory=list)  # first-batch latency of each epoch
    sampler: str = ""  # type name of the loader's sampler (GP710: DistributedSampler under torchrun)
    iterable: bool = False  # an IterableDataset: shards itself, has no sampler to check
    # GP712: a shuffling DistributedSampler's ``epoch`` at each epoch start (the first MAX_EPOCHS_KEPT)
    sampler_epochs: list[int] = field(default_factory=list)
    # with each: set_epoch() calls made on that sampler so far (:mod:`gpuprof.capture.checks.loader.samplerepoch`)
    set_epoch_calls: list[int] = field(default_factory=list)
    set_epoch_values: list[int] = field(default_factory=list)  # the values it was given (a few, distinct)
    set_epoch_location: SourceLocation | None = None  # the user's line of the first set_epoch() call
    framework: str | None = None  # the library that iterates it: transformers, lightning, accelerate (loaderplace)
    signatures: list[Signature | None] = field(default_factory=list)
    _awaiting_first: bool = False


class LoaderMonitor:
    """Collects :class:`LoaderRecord` objects; ``on_fetch(seconds)`` feeds the step clock."""

    def __init__(self, on_fetch: Callable[[float], None], max_signatures: int = 8) -> None:
        self.records: dict[int, LoaderRecord] = {}
        self._refs: dict[int, Any] = {}
        self._on_fetch = on_fetch
        self._max_signatures = max_signatures
        self.batches = 0  # batches from every iterator seen, also ones without a record

    # Called from the wrapped DataLoader.__iter__ (user's frame is ``caller``).
    def on_iter(self, loader: Any, iterator: Any, caller: Any) -> None:
        place, framework = loaderplace.iterated_from(caller)  # past accelerate's/Lightning's own frames
        rec = self._record(loader, place)
        rec.framework = rec.framework or framework
        rec.epochs += 1
        note_sampler_epoch(rec, loader)
        rec._awaiting_first = True
        try:
            iterator._gpuprof_record = rec
        except (AttributeError, TypeError):
            pass  # an iterator class with __slots__: timing still counts via the step clock

    def adopt(self, loader: Any, location: SourceLocation | None, label: str | None = None) -> LoaderRecord:
        """Register a loader before (or while) it is iterated, with the user's line for its findings."""
        rec = self._record(loader, location)
        if location is not None:
            rec.location = location
        if label:
            rec.label = label
        return rec

    def _record(self, loader: Any, loc: SourceLocation | None) -> LoaderRecord:
        key = id(loader)
        rec = self.records.get(key)
        if rec is None:
            dataset = getattr(loader, "dataset", None)
            rec = LoaderRecord(
                label=f"{type(loader).__name__}({type(dataset).__name__})",
                num_workers=int(getattr(loader, "num_workers", 0) or 0),
                pin_memory=bool(getattr(loader, "pin_memory", False)),
                persistent_workers=bool(getattr(loader, "persistent_workers", False)),
                batch_size=getattr(loader, "batch_size", None),
                location=loc,
                sampler=_sampler_name(loader),
                iterable=_is_iterable(dataset),
            )
            self.records[key] = rec
            try:  # keep the id from being reused by another loader while we hold the record
                self._refs[key] = loader if isinstance(loader, _IteratorAsLoader) else weakref.ref(loader)
            except TypeError:
                self._refs[key] = loader
        return rec

    def _adopt(self, iterator: Any) -> LoaderRecord | None:
        """An iterator created before the capture started (``for x, y in loader: step(x, y)``).

        Its loader is known when the DataLoader class was patched at decoration
        time (:func:`prepare`: the iterator carries ``_gpuprof_origin``); else
        the record is built from the iterator's own settings. The epoch's
        first-batch latency was before the capture, so it is not counted.
        """
        origin = getattr(iterator, "_gpuprof_origin", None)
        loader = origin[0]() if origin is not None else None
        if origin is not None and loader is not None:  # loader is only set with origin
            rec = self._record(loader, origin[1])
            rec.framework = rec.framework or origin[2]
        else:
            sampler = getattr(iterator, "_index_sampler", None)
            loader = _IteratorAsLoader(iterator, getattr(sampler, "batch_size", None))
            rec = self._record(loader, _location(_user_frame()))
        rec.epochs += 1
        note_sampler_epoch(rec, loader)
        try:
            iterator._gpuprof_record = rec
        except (AttributeError, TypeError):
            return None  # no attribute: not counted per loader (the step clock still has it)
        return rec

    def on_next(self, iterator: Any, seconds: float, batch: Any) -> None:
        self._on_fetch(seconds)
        self.batches += 1
        rec = getattr(iterator, "_gpuprof_record", None)
        if rec is None:
            rec = self._adopt(iterator)
            if rec is None:
                return
        rec.batches += 1
        rec.fetch_s += seconds
        if rec._awaiting_first:
            rec._awaiting_first = False
            rec.epoch_start_s.append(seconds)
        if len(rec.signatures) < self._max_signatures:
            rec.signatures.append(batch_signature(batch))

    @property
    def seen(self) -> bool:
        return bool(self.records)


class _IteratorAsLoader:
    """A loader's settings read from its iterator (the loader itself is not reachable from it)."""

    def __init__(self, it: Any, batch_size: int | None) -> None:
        self.dataset = getattr(it, "_dataset", None)
        self.num_workers = getattr(it, "_num_workers", 0)
        self.pin_memory = getattr(it, "_pin_memory", False)
        self.persistent_workers = getattr(it, "_persistent_workers", False)
        self.batch_size = batch_size
        # the loader's samplers, as _sampler_name reads them (GP710 must see a DistributedSampler here too):
        # the iterator holds the loader's BatchSampler when it batches, else the sampler itself
        index = getattr(it, "_index_sampler", None)
        self.batch_sampler = index if index is not None and hasattr(index, "sampler") else None
        self.sampler = getattr(index, "sampler", None) if self.batch_sampler is not None else index
        self._it = weakref.ref(it)  # the record's key is this object's id: keep it alive with the record


_IteratorAsLoader.__name__ = "DataLoader"  # the label reads DataLoader(<dataset>)


def _sampler_name(loader: Any) -> str:
    """Type name of the sampler that picks a loader's indices (a custom batch_sampler's own sampler if it has one)."""
    sampler = getattr(loader, "sampler", None)
    batch_sampler = getattr(loader, "batch_sampler", None)
    inner = getattr(batch_sampler, "sampler", None)
    if batch_sampler is not None and type(batch_sampler).__name__ != "BatchSampler":
        sampler = inner if inner is not None else batch_sampler
    return type(sampler).__name__ if sampler is not None else ""


MAX_EPOCHS_KEPT = 64  # sampler epochs remembered per loader (GP712 needs two; a bound for endless loops)


def note_sampler_epoch(rec: LoaderRecord, loader: Any) -> None:
    """At an epoch start (the loader's iterator was just made, and with it the epoch's index order):
    remember the ``epoch`` of the loader's sampler when it is a shuffling ``DistributedSampler`` (GP712)."""
    if len(rec.sampler_epochs) >= MAX_EPOCHS_KEPT or "torch.utils.data.distributed" not in sys.modules:
        return  # the module is imported by whoever builds a DistributedSampler: none exists without it
    from torch.utils.data.distributed import DistributedSampler

    sampler = getattr(loader, "sampler", None)
    if not isinstance(sampler, DistributedSampler):
        sampler = getattr(getattr(loader, "batch_sampler", None), "sampler", None)
    if isinstance(sampler, DistributedSampler) and getattr(sampler, "shuffle", False):
        epoch = getattr(sampler, "epoch", None)
        if isinstance(epoch, int):
            rec.sampler_epochs.append(epoch)
            calls = samplerepoch.calls_of(sampler)
            rec.set_epoch_calls.append(calls.count if calls else 0)
            if calls is not None:
                rec.set_epoch_values, rec.set_epoch_location = list(calls.values), calls.location


def _is_iterable(dataset: Any) -> bool:
    try:
        from torch.utils.data import IterableDataset
    except ImportError:
        return False
    return isinstance(dataset, IterableDataset)


def _location(frame: Any) -> SourceLocation | None:
    if frame is None:
        return None
    code = frame.f_code
    return SourceLocation(code.co_filename, frame.f_lineno, code.co_name)


def _user_frame() -> Any:
    """The innermost user frame (:func:`gpuprof.frames.user_frame`): the loop's line."""
    from gpuprof.frames import user_frame

    return user_frame(2)


# ---------------------------------------------------------------------- patching

_INSTALLED: list[LoaderMonitor] = []  # stack: the innermost capture gets the events
_ORIGINAL: dict[str, Any] = {}


def prepare() -> None:
    """Patch the DataLoader classes now, before any capture runs (``profile_step`` calls it when it decorates).

    In the usual loop, ``for x, y in loader: train_step(x, y)``, the loader's
    iterator is created before the first call starts the capture. Patched
    early, ``__iter__`` tags each new iterator with its loader (a weak
    reference) and the loop's line, so the capture, once started, files that
    epoch's batches under the right loader. Until a capture runs the patch
    costs a flag test per batch and a tag per epoch.
    """
    _patch()


def install(monitor: LoaderMonitor) -> None:
    """Route DataLoader events to ``monitor`` until :func:`uninstall`."""
    _patch()
    _INSTALLED.append(monitor)


def _patch() -> None:
    from torch.utils.data import dataloader as dl

    if not _ORIGINAL:
        loader_cls = dl.DataLoader
        iter_cls = dl._BaseDataLoaderIter
        orig_iter = loader_cls.__iter__
        orig_next = iter_cls.__next__
        _ORIGINAL["iter"] = orig_iter
        _ORIGINAL["next"] = orig_next

        def __iter__(self: Any) -> Any:  # noqa: N807 - replaces the dunder
            it = orig_iter(self)
            try:
                if _INSTALLED:
                    _INSTALLED[-1].on_iter(self, it, sys._getframe(1))
                else:  # no capture yet: remember the loader for the one that starts later
                    it._gpuprof_origin = (  # type: ignore[attr-defined]  # gpuprof's own marker on the iterator
                        weakref.ref(self), *loaderplace.iterated_from(sys._getframe(1)))
            except Exception as err:  # noqa: BLE001 - never break the user's loop
                _warn_once(err)
            return it

        def __next__(self: Any) -> Any:  # noqa: N807
            if not _INSTALLED:
                return orig_next(self)
            t0 = perf_counter()
            batch = orig_next(self)
            dt = perf_counter() - t0
            try:
                _INSTALLED[-1].on_next(self, dt, batch)
            except Exception as err:  # noqa: BLE001
                _warn_once(err)
            return batch

        __iter__.__wrapped__ = orig_iter  # type: ignore[attr-defined]
        __next__.__wrapped__ = orig_next  # type: ignore[attr-defined]
        loader_cls.__iter__ = __iter__  # type: ignore[method-assign]
        iter_cls.__next__ = __next__  # type: ignore[method-assign]
        samplerepoch.patch()


def uninstall(monitor: LoaderMonitor) -> None:
    from torch.utils.data import dataloader as dl

    if monitor in _INSTALLED:
        _INSTALLED.remove(monitor)
    if not _INSTALLED and _ORIGINAL:
        dl.DataLoader.__iter__ = _ORIGINAL.pop("iter")  # type: ignore[method-assign]
        dl._BaseDataLoaderIter.__next__ = _ORIGINAL.pop("next")  # type: ignore[method-assign]
        samplerepoch.unpatch()


_WARNED: list[bool] = []


def _warn_once(err: Exception) -> None:
    if _WARNED:
        return
    _WARNED.append(True)
    import warnings

    from gpuprof.capture.guard import GpuprofWarning, safe_text

    warnings.warn(
        f"gpuprof: DataLoader monitor failed ({type(err).__name__}: {safe_text(err)}); "
        "data-loading numbers may be incomplete. Training continues.",
        GpuprofWarning,
        stacklevel=3,
    )


# ---------------------------------------------------------------------- checks


def available_cores() -> int:
    """CPU cores this process may run on (its affinity mask, else the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _finding(code: str, message: str, advice: str, rec: LoaderRecord, evidence: tuple[Evidence, ...],
             severity: Severity | None = None, cost_us: float | None = None,
             cost_share: float | None = None, info_below_share: float = INFO_BELOW_SHARE) -> Finding:
    check = runtime_check(code)
    found = Finding(
        code=code,
        name=check.name,
        severity=severity or check.severity,
        message=message,
        advice=advice,
        evidence=evidence,
        cost_us_per_step=cost_us,
        cost_share=cost_share,
        location=rec.location,
        origin="runtime",
        source=rec.label,
    )
    # one severity policy for every finding with a cost (docs/codes.md): info under the code's threshold
    # (GP601: dataloader_share_warning; the default 1% of the step), at least a warning at or above it
    return severity_for_cost(found, {"info_below_share": info_below_share})


def dataloader_findings(
    records: list[LoaderRecord],
    *,
    total_step_s: float,
    num_steps: int,
    on_cuda: bool,
    cores: int,
    local_world_size: int,
    options: CheckOptions,
    core_use: CoreUse | None = None,
) -> list[Finding]:
    """GP601-GP604 for the loaders seen during the run. ``core_use``: the trainer's CPU and its cores' idle time
    over the steps (:mod:`gpuprof.capture.checks.loader.freecores`), kept in GP601's evidence for its what-if."""
    measured = {} if core_use is None else {
        "trainer_cpu_cores": core_use.trainer_cores, "idle_cores": core_use.idle_cores,
        "cores_measured_s": core_use.seconds}
    out: list[Finding] = []
    steps = max(num_steps, 1)
    for rec in records:
        if rec.batches == 0:
            continue
        share = data_loading_share(rec.fetch_s, total_step_s) or 0.0
        per_step_us = rec.fetch_s / steps * 1e6
        if rec.num_workers == 0 and share >= options.dataloader_min_share:
            sev = Severity.WARNING if share >= options.dataloader_share_warning else Severity.INFO
            out.append(_finding(
                "GP601",
                f"{rec.label} loads batches in the training process (num_workers=0): "
                f"{share:.0%} of step time over the run's {steps} step{'s' if steps != 1 else ''} is spent waiting "
                f"for data ({per_step_us / 1000:.2f} ms/step)",
                loaderplace.num_workers_advice(rec.framework, on_cuda),
                rec,
                (Evidence("data_loading_share", round(share, 4), options.dataloader_share_warning, "fraction",
                          extra={"num_workers": 0, "batches": rec.batches, "fetch_s": round(rec.fetch_s, 6),
                                 "steps": num_steps, "cores": cores, "on_cuda": on_cuda, **measured}),),
                severity=sev,
                cost_us=per_step_us,
                cost_share=share,
                info_below_share=options.dataloader_share_warning,
            ))
        if on_cuda and not rec.pin_memory:
            out.append(_finding(
                "GP602",
                f"{rec.label} has pin_memory=False while training on CUDA: host-to-device copies of "
                "its batches come from pageable memory and cannot overlap with compute",
                "Pass pin_memory=True to the DataLoader and copy with .to(device, non_blocking=True).",
                rec,
                (Evidence("pin_memory", "False", None, "", extra={"batches": rec.batches}),),
            ))
        total_workers = rec.num_workers * max(local_world_size, 1)
        if rec.num_workers > 0 and total_workers > cores:
            who = (f"{rec.num_workers} workers x {local_world_size} local ranks" if local_world_size > 1
                   else f"{rec.num_workers} workers")
            out.append(_finding(
                "GP603",
                f"{rec.label} starts {who} = {total_workers} processes on {cores} available CPU cores: "
                "workers compete for cores with each other and the training process",
                f"Use at most {max(cores // max(local_world_size, 1) - 1, 1)} workers per process "
                "(cores per rank minus one for the training loop).",
                rec,
                (Evidence("workers", total_workers, cores, "processes", extra={"num_workers": rec.num_workers,
                                                                                 "local_world_size": local_world_size}),),
            ))
        if (rec.num_workers > 0 and not rec.persistent_workers
                and rec.epochs >= options.persistent_workers_min_epochs):
            restarts = rec.epoch_start_s[1:] if len(rec.epoch_start_s) > 1 else rec.epoch_start_s
            mean_start = sum(restarts) / len(restarts) if restarts else 0.0
            cost_us = mean_start * max(rec.epochs - 1, 0) / steps * 1e6
            out.append(_finding(
                "GP604",
                f"{rec.label} restarts its {rec.num_workers} worker processes every epoch "
                f"(persistent_workers=False, {rec.epochs} epochs): the first batch of an epoch waits "
                f"{mean_start * 1000:.1f} ms",
                "Pass persistent_workers=True so workers (and their dataset state) survive between epochs.",
                rec,
                (Evidence("epoch_start_latency_s", round(mean_start, 6), None, "s",
                          extra={"epochs": rec.epochs}),),
                cost_us=cost_us,
                cost_share=(cost_us / (total_step_s / steps * 1e6)) if total_step_s > 0 else None,
            ))
    return out


"""gpuprof inside a Lightning ``Trainer``: ``Trainer(callbacks=[GpuprofCallback("gpuprof_logs")])``.

::

    from gpuprof.integrations.lightning import GpuprofCallback

    trainer = lightning.Trainer(max_epochs=1, callbacks=[GpuprofCallback("gpuprof_logs")])
    trainer.fit(model, datamodule)
    print(trainer.callbacks[0].result.findings())    # or read gpuprof_logs/<run>/report.json

The callback drives the same capture as ``gpuprof.profile`` (same arguments:
``logdir``, ``run``, ``schedule``, ``checks``, ``options``, ``select``...)
from the trainer's hooks: it starts in ``on_train_start``, marks one gpuprof
step per optimizer step in ``on_train_batch_end`` (with
``accumulate_grad_batches=k``, every k batches; under manual optimization,
every batch), and stops in ``on_train_end``, or in ``on_exception`` when
training ends by an error (what was recorded is kept; the error is Lightning's
to re-raise, unchanged).

* The DataLoaders Lightning builds (``trainer.train_dataloader``, the
  validation loaders) are watched like any loop's, and their findings (GP601
  ``num_workers=0``...) point at the user's ``DataLoader(`` line in the
  module's or datamodule's ``train_dataloader``, else at ``trainer.fit(...)``.
* Under DDP (Lightning's own launchers, ``ddp_spawn``, or torchrun) the rank
  and world size come from the trainer, every rank writes its own report
  (``<run>/rank<R>/``), rank 0 also the cross-rank one and is the only rank
  that prints its summary; the ranks agree on the run name through the
  strategy's ``broadcast``.
* With Lightning's own profiler on (``Trainer(profiler="pytorch")`` or any
  other than the default pass-through), gpuprof records nothing and says so
  in one line: two profilers would distort (torch's: corrupt) each other.

Importing this module needs ``lightning`` (or ``pytorch_lightning``, used
when ``lightning`` is not installed).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterable
from typing import Any, Protocol

from gpuprof.capture.config import DEFAULT_LOGDIR
from gpuprof.capture.paths import RankInfo, default_run_name
from gpuprof.findings import SourceLocation
from gpuprof.integrations._driver import CaptureDriver, DriverViews, JobPlace, LoaderInfo, built_at, method_location

__all__ = ["GpuprofCallback"]


def _callback_base() -> tuple[type[Any], str]:
    """Lightning's ``Callback`` class, from ``lightning`` or else ``pytorch_lightning``."""
    for name in ("lightning.pytorch", "pytorch_lightning"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        return module.Callback, name
    raise ImportError("gpuprof.integrations.lightning needs Lightning: pip install lightning "
                      "(or pytorch_lightning)")


_FOUND = _callback_base()
_Callback: Any = _FOUND[0]  # a class found at run time: Any to mypy, hence the ignore on the subclass
LIGHTNING_PACKAGE: str = _FOUND[1]


class _Strategy(Protocol):
    def broadcast(self, obj: Any, src: int = 0) -> Any: ...


class _Trainer(Protocol):
    """What the callback reads from a Lightning ``Trainer``."""

    global_rank: int
    local_rank: int
    world_size: int
    num_devices: int
    global_step: int
    profiler: Any
    strategy: _Strategy
    train_dataloader: Any
    val_dataloaders: Any
    datamodule: Any
    accumulate_grad_batches: int


class GpuprofCallback(DriverViews, _Callback):  # type: ignore[misc]  # Lightning's Callback, found at import time
    """Profile a Lightning training run with gpuprof (see the module docstring).

    Takes :func:`gpuprof.profile`'s arguments. ``print_report`` prints the
    summary at the end (rank 0 only under DDP). After training,
    :attr:`result` holds the :class:`~gpuprof.CaptureResult`.
    """

    def __init__(self, logdir: str | os.PathLike[str] = DEFAULT_LOGDIR, *, run: str | None = None,
                 print_report: bool = True, **profile_options: Any) -> None:
        super().__init__()
        self._driver = CaptureDriver("Lightning", logdir, run=run, print_report=print_report, **profile_options)
        self._last_global_step = 0
        self._automatic = True

    # ------------------------------------------------------------------ Lightning hooks

    def setup(self, trainer: _Trainer, pl_module: Any, stage: str) -> None:
        if stage == "fit":  # Lightning creates the loaders' iterators before on_train_start
            self._driver.prepare_loaders()

    def on_train_start(self, trainer: _Trainer, pl_module: Any) -> None:
        place = _place(trainer)
        run = _agreed_run_name(trainer, place)  # a collective under DDP: every rank calls it, first
        kind = type(trainer.profiler).__name__
        if kind != "PassThroughProfiler":
            self._driver.stand_aside(f"Lightning's own profiler is active (Trainer(profiler=...) is a {kind})",
                                     place)
            return
        self._automatic = bool(getattr(pl_module, "automatic_optimization", True))
        self._last_global_step = trainer.global_step
        k = trainer.accumulate_grad_batches
        per = (f"one gpuprof step per optimizer step ({k} batches, accumulate_grad_batches={k})" if k > 1
               else "one gpuprof step per training batch (one optimizer step)")
        if not self._automatic:
            per = "one gpuprof step per training batch (manual optimization)"
        self._driver.begin(place, run=run, models=[pl_module], loaders=_loaders(trainer, pl_module),
                           notes=[f"Lightning {LIGHTNING_PACKAGE}: {per}"])

    def on_train_epoch_start(self, trainer: _Trainer, pl_module: Any) -> None:
        if self._driver.active:  # loaders are rebuilt per epoch with reload_dataloaders_every_n_epochs
            self._driver.watch_loaders(_loaders(trainer, pl_module))

    def on_validation_start(self, trainer: _Trainer, pl_module: Any) -> None:
        if self._driver.active:
            self._driver.watch_loaders(_loaders(trainer, pl_module, stage="val"))
            self._driver.evaluating()

    def on_train_batch_end(self, trainer: _Trainer, pl_module: Any, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        driver = self._driver
        if not driver.active:
            return
        if not self._automatic:
            driver.step()
            return
        now = trainer.global_step
        if now != self._last_global_step:  # the optimizer stepped in this batch
            self._last_global_step = now
            driver.step()
        else:
            driver.micro_batch()

    def on_train_end(self, trainer: _Trainer, pl_module: Any) -> None:
        self._driver.end()

    def on_exception(self, trainer: _Trainer, pl_module: Any, exception: BaseException) -> None:
        self._driver.failed(exception)


def _place(trainer: _Trainer) -> JobPlace:
    return JobPlace(rank=int(trainer.global_rank), world_size=int(trainer.world_size),
                    local_rank=int(trainer.local_rank), local_world_size=int(trainer.num_devices))


def _agreed_run_name(trainer: _Trainer, place: JobPlace) -> str | None:
    """Rank 0's run name for every rank (Lightning's launchers set no torchrun run id to agree on)."""
    if place.world_size <= 1:
        return None
    mine = default_run_name(RankInfo(None, None, None, None))  # GPUPROF_RUN, else the time
    agreed = trainer.strategy.broadcast(mine, src=0)
    return agreed if isinstance(agreed, str) else mine


def _loaders(trainer: _Trainer, pl_module: Any, stage: str = "train") -> list[LoaderInfo]:
    """The DataLoaders Lightning built for ``stage``, with the user's line that built them."""
    hook = "train_dataloader" if stage == "train" else "val_dataloader"
    try:
        built = trainer.train_dataloader if stage == "train" else trainer.val_dataloaders
    except (AttributeError, RuntimeError):
        return []  # not set up yet
    where: SourceLocation | None = None
    datamodule = getattr(trainer, "datamodule", None)
    if datamodule is not None:
        where = method_location(datamodule, hook)
    if where is None:
        where = method_location(pl_module, hook)
    loaders = list(_flatten(built))
    if where is None:  # the loaders were passed to trainer.fit(...): each at its DataLoader( line above it
        return [LoaderInfo(dl, at) for dl, at in zip(loaders, built_at(loaders))]
    return [LoaderInfo(dl, where) for dl in loaders]


def _flatten(obj: Any, depth: int = 0) -> Iterable[Any]:
    """DataLoaders in what Lightning holds: one, a list/tuple/dict of them, or a CombinedLoader."""
    if obj is None or depth > 4:
        return
    flattened = getattr(obj, "flattened", None)  # CombinedLoader
    if isinstance(flattened, list):
        yield from (x for item in flattened for x in _flatten(item, depth + 1))
    elif isinstance(obj, (list, tuple)):
        for item in obj:
            yield from _flatten(item, depth + 1)
    elif isinstance(obj, dict):
        for item in obj.values():
            yield from _flatten(item, depth + 1)
    elif hasattr(obj, "__iter__") and hasattr(obj, "dataset"):
        yield obj

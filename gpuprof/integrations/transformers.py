"""gpuprof inside a Hugging Face ``transformers.Trainer``: ``Trainer(..., callbacks=[GpuprofCallback()])``.

::

    from gpuprof.integrations.transformers import GpuprofCallback

    cb = GpuprofCallback("gpuprof_logs")
    trainer = Trainer(model=model, args=args, train_dataset=ds, callbacks=[cb])
    trainer.train()
    print(cb.result.findings())          # or read gpuprof_logs/<run>/report.json

Works for ``Trainer``, ``Seq2SeqTrainer`` and TRL's trainers (``SFTTrainer``,
``DPOTrainer``...: subclasses of ``Trainer`` that call the same callbacks), and
under ``accelerate launch``/``torchrun``. The callback drives the same capture
as ``gpuprof.profile`` (same arguments) from the Trainer's events:

* ``on_train_begin`` starts it, with the Trainer's model (device placement
  checks) and its training DataLoader, whose settings the Trainer takes from
  ``TrainingArguments`` (``dataloader_num_workers``, default 0: flagged as
  GP601 when loading shows in the step time; ``dataloader_pin_memory=False`` on
  CUDA: GP602). Findings about it point at the ``trainer.train()`` line.
* ``on_step_end`` marks one gpuprof step per **optimizer** step; with
  ``gradient_accumulation_steps=k`` each gpuprof step holds k micro-batches
  (``on_substep_end`` counts the others; the report's notes say how many).
* ``on_train_end`` stops it: traces, ``report.json``/``report.md``, summary.

The Trainer has no event for an exception leaving ``train()``: the capture is
then stopped at the next ``train()`` with this callback, or at interpreter
exit (what was recorded is kept). Rank and world size come from
``TrainingArguments`` (``process_index``, ``world_size``); under several
processes every rank writes its own report, rank 0 the cross-rank one and is
the only one to print. A torch profiler already running (accelerate's
``accelerator.profile()``, ``torch.profiler.profile``) makes the capture
record nothing, with one warning saying so.

Importing this module needs ``transformers``.
"""

from __future__ import annotations

import importlib
import os
from typing import Any, Protocol

from gpuprof.capture.config import DEFAULT_LOGDIR
from gpuprof.capture.paths import RankInfo, default_run_name
from gpuprof.integrations._driver import (
    CaptureDriver,
    DriverViews,
    JobPlace,
    LoaderInfo,
    caller_location,
    unwrap_loader,
)

__all__ = ["GpuprofCallback"]


def _callback_base() -> type[Any]:
    try:
        module = importlib.import_module("transformers")
    except ImportError as err:
        raise ImportError("gpuprof.integrations.transformers needs transformers: pip install transformers") from err
    base: type[Any] = module.TrainerCallback
    return base


_TrainerCallback: Any = _callback_base()  # a class found at run time: Any to mypy


class _Args(Protocol):
    """What the callback reads from ``TrainingArguments``."""

    process_index: int
    local_process_index: int
    world_size: int
    gradient_accumulation_steps: int
    dataloader_num_workers: int


class GpuprofCallback(DriverViews, _TrainerCallback):  # type: ignore[misc]  # transformers' TrainerCallback, found at import
    """Profile a ``transformers.Trainer`` run with gpuprof (see the module docstring).

    Takes :func:`gpuprof.profile`'s arguments. After ``trainer.train()``,
    :attr:`result` holds the :class:`~gpuprof.CaptureResult`.
    """

    def __init__(self, logdir: str | os.PathLike[str] = DEFAULT_LOGDIR, *, run: str | None = None,
                 print_report: bool = True, **profile_options: Any) -> None:
        self._driver = CaptureDriver("transformers", logdir, run=run, print_report=print_report, **profile_options)

    @property
    def optimizer_steps(self) -> int:
        """Optimizer steps (gpuprof steps) marked in the current or last run."""
        return self._driver.steps

    # ------------------------------------------------------------------ TrainerCallback events

    def on_train_begin(self, args: _Args, state: Any, control: Any, **kwargs: Any) -> None:
        place = JobPlace(rank=int(args.process_index), world_size=int(args.world_size),
                         local_rank=int(args.local_process_index), local_world_size=_local_world_size())
        run = _agreed_run_name(place)  # a collective with several processes: every rank calls it, first
        loaders = []
        loader = kwargs.get("train_dataloader")
        if loader is not None:
            base = unwrap_loader(loader)
            dataset = getattr(base, "dataset", None)
            loaders.append(LoaderInfo(base, caller_location(),
                                      f"{type(base).__name__}({type(dataset).__name__}) of transformers.Trainer"))
        k = int(args.gradient_accumulation_steps)
        notes = [
            "transformers.Trainer: one gpuprof step per optimizer step"
            + (f" ({k} micro-batches, gradient_accumulation_steps={k})" if k > 1 else ""),
            "the Trainer builds its DataLoader from TrainingArguments: set dataloader_num_workers, "
            "dataloader_pin_memory and dataloader_persistent_workers there "
            f"(this run: dataloader_num_workers={int(args.dataloader_num_workers)})",
        ]
        model = kwargs.get("model")
        self._driver.begin(place, run=run, models=[model] if model is not None else [], loaders=loaders,
                           notes=notes)

    def on_step_end(self, args: _Args, state: Any, control: Any, **kwargs: Any) -> None:
        self._driver.step()

    def on_evaluate(self, args: _Args, state: Any, control: Any, **kwargs: Any) -> None:
        self._driver.evaluating()

    def on_substep_end(self, args: _Args, state: Any, control: Any, **kwargs: Any) -> None:
        self._driver.micro_batch()

    def on_train_end(self, args: _Args, state: Any, control: Any, **kwargs: Any) -> None:
        d = self._driver
        if d.profiler is None:
            return
        d.end(notes=[f"{d.micro_batches} micro-batches in {d.steps} optimizer steps"])


def _local_world_size() -> int | None:
    value = os.environ.get("LOCAL_WORLD_SIZE", "").strip()
    return int(value) if value.isdigit() else None


def _agreed_run_name(place: JobPlace) -> str | None:
    """Rank 0's run name for every rank (through torch.distributed, which the Trainer has initialised)."""
    if place.world_size <= 1 or os.environ.get("TORCHELASTIC_RUN_ID", "none").lower() != "none":
        return None  # one process, or torchrun/accelerate launch: gpuprof's default name already agrees
    import torch.distributed as dist

    mine = default_run_name(RankInfo(None, None, None, None))
    if not (dist.is_available() and dist.is_initialized()):
        return mine
    box: list[Any] = [mine]
    dist.broadcast_object_list(box, src=0)
    return box[0] if isinstance(box[0], str) else mine

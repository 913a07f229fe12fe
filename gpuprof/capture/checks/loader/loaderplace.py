"""Where a DataLoader is iterated from, and which training framework iterates it (GP601's place and advice).

A framework iterates the user's loader in its own code: accelerate's
``DataLoaderShard.__iter__`` calls the DataLoader's, the HF ``Trainer`` iterates
accelerate's wrapper, Lightning its fit loop. The frame that called
``DataLoader.__iter__`` is then a library's (``accelerate/data_loader.py``), so
the place is the innermost *user* frame above it (the user's ``for`` line, or
``trainer.train()``), and the framework is the library frame closest to the
user's code (the HF Trainer over accelerate: transformers). The advice then
names the knob the user actually writes: ``TrainingArguments(dataloader_num_workers=...)``
for the Trainer, the ``DataLoader(...)`` given to ``accelerator.prepare`` or
returned by a Lightning hook.
"""

from __future__ import annotations

import re
from types import FrameType

from gpuprof.findings import SourceLocation
from gpuprof.frames import is_user_file

__all__ = ["iterated_from", "num_workers_advice"]

_FRAMEWORK = re.compile(r"(?:^|/)(transformers|lightning|pytorch_lightning|lightning_fabric|accelerate)/")
_NAMES = {"pytorch_lightning": "lightning", "lightning_fabric": "lightning"}
_MAX_FRAMES = 64  # frames walked up from the call: a framework's loop is a few levels deep


def iterated_from(frame: FrameType | None) -> tuple[SourceLocation | None, str | None]:
    """(the innermost user frame at or above ``frame``, the framework of the library frames between)."""
    framework = None
    f, seen = frame, 0
    while f is not None and seen < _MAX_FRAMES:
        file = f.f_code.co_filename
        if is_user_file(file):
            return SourceLocation(file, f.f_lineno, f.f_code.co_name), framework
        m = _FRAMEWORK.search(file.replace("\\", "/"))
        if m:
            framework = _NAMES.get(m.group(1), m.group(1))  # the last one seen is the closest to the user
        f, seen = f.f_back, seen + 1
    return None, framework


_WORKERS = "start with min(8, CPU cores per GPU)"


def num_workers_advice(framework: str | None, on_cuda: bool = True) -> str:
    """GP601's advice for a loader iterated by ``framework`` (None: the user's own loop); pinned memory only
    where the run uses CUDA (a CPU-only run is never told about a GPU)."""
    if framework == "transformers":
        pin = ", and dataloader_pin_memory=True on CUDA" if on_cuda else ""
        return (f"Set TrainingArguments(dataloader_num_workers=N, dataloader_persistent_workers=True) ({_WORKERS})"
                f"{pin}: the Trainer builds its DataLoader from these, so batches are prepared in background "
                "processes while the model trains.")
    if framework == "lightning":
        pin = " (pin_memory=True on CUDA)" if on_cuda else ""
        return (f"Pass num_workers=N ({_WORKERS}) and persistent_workers=True to the DataLoader(...) your "
                f"train_dataloader() returns or you give to trainer.fit{pin}, so batches are prepared in background "
                "processes while the model trains.")
    if framework == "accelerate":
        pin = " and, on CUDA, pin_memory=True" if on_cuda else ""
        return (f"Set num_workers>0 ({_WORKERS}) in the DataLoader(...) you pass to accelerator.prepare(...) "
                f"(accelerate keeps its settings), with persistent_workers=True{pin}, so batches are prepared in "
                "background processes while the model trains.")
    pin = " and, on CUDA, pin_memory=True" if on_cuda else ""
    return (f"Set num_workers>0 ({_WORKERS}) so batches are prepared in background processes while the model "
            f"trains; add persistent_workers=True{pin}.")

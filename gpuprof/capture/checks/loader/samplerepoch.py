"""Calls to ``DistributedSampler.set_epoch`` while DataLoaders are watched (GP712's "called, but with the
same value" from "never called").

The sampler's ``epoch`` alone cannot tell them apart: ``set_epoch(0)`` before every epoch leaves it at
0, as never calling it does, and the fix differs (pass the loop's epoch number, not add a call). While
the DataLoader classes are patched (:mod:`gpuprof.capture.checks.loader.dataloader`), ``set_epoch`` is wrapped too:
each call counts for its sampler (weakly held: a sampler dropped by the user is forgotten), with the
values passed (a few) and the user's line of the first call, which is the line to fix.
"""

from __future__ import annotations

import sys
import weakref
from dataclasses import dataclass, field
from typing import Any

from gpuprof.findings import SourceLocation
from gpuprof.frames import user_frame

__all__ = ["SetEpochCalls", "calls_of", "patch", "unpatch"]

MAX_VALUES = 8  # distinct values remembered per sampler: the finding shows a constant, or a few


@dataclass
class SetEpochCalls:
    """The ``set_epoch`` calls made on one sampler while the patch was in place."""

    count: int = 0
    values: list[int] = field(default_factory=list)  # distinct, in the order first passed
    location: SourceLocation | None = None  # the user's line of the first call


_CALLS: weakref.WeakKeyDictionary[Any, SetEpochCalls] = weakref.WeakKeyDictionary()
_ORIGINAL: list[Any] = []


def calls_of(sampler: Any) -> SetEpochCalls | None:
    """The calls recorded for ``sampler`` (None: none, or it cannot be weakly referenced)."""
    try:
        return _CALLS.get(sampler)
    except TypeError:
        return None


def _note(sampler: Any, epoch: Any) -> None:
    calls = _CALLS.get(sampler)
    if calls is None:
        calls = _CALLS[sampler] = SetEpochCalls()
        f = user_frame(3)  # past this function and the wrapper
        if f is not None:
            calls.location = SourceLocation(f.f_code.co_filename, f.f_lineno, f.f_code.co_name)
    calls.count += 1
    if isinstance(epoch, int) and epoch not in calls.values and len(calls.values) < MAX_VALUES:
        calls.values.append(epoch)


def patch() -> None:
    """Wrap ``DistributedSampler.set_epoch`` (once); the call itself runs unchanged, first."""
    if _ORIGINAL or "torch.utils.data.distributed" not in sys.modules:
        return  # not imported: no DistributedSampler exists (torch.utils.data imports it: always, in practice)
    from torch.utils.data.distributed import DistributedSampler

    orig = DistributedSampler.set_epoch

    def set_epoch(self: Any, epoch: int) -> None:
        orig(self, epoch)
        try:
            _note(self, epoch)
        except Exception:  # noqa: BLE001, S110 - a failed count is a missed detail, never the user's error
            pass

    set_epoch.__wrapped__ = orig  # type: ignore[attr-defined]
    set_epoch.__doc__ = orig.__doc__
    _ORIGINAL.append(orig)
    DistributedSampler.set_epoch = set_epoch  # type: ignore[method-assign]


def unpatch() -> None:
    if not _ORIGINAL:
        return
    from torch.utils.data.distributed import DistributedSampler

    orig = _ORIGINAL.pop()
    if getattr(DistributedSampler.set_epoch, "__wrapped__", None) is orig:  # ours: a later patch is left alone
        DistributedSampler.set_epoch = orig  # type: ignore[method-assign,assignment]

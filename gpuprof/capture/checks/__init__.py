"""The runtime checks: one :class:`~gpuprof.capture.checks.base.Monitor` per check, held in a list.

Adding a check: a module here (or a folder, when the check has modules of its own: ``loader/``) with a
``MonitorBase`` subclass, and one line in :func:`monitors`. The order is the order the checks install and
report in.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from gpuprof.capture.checks.base import Live, Monitor, MonitorBase
from gpuprof.lazyexports import lazy_exports

if TYPE_CHECKING:  # pragma: no cover
    from gpuprof.capture.checks.amp import AmpCheck
    from gpuprof.capture.checks.compile import CompileCheck
    from gpuprof.capture.checks.distributed import DistributedCheck
    from gpuprof.capture.checks.loader import LoaderCheck
    from gpuprof.capture.checks.memory import MemoryCheck
    from gpuprof.capture.checks.placement import PlacementCheck
    from gpuprof.capture.checks.settings import SettingsCheck
    from gpuprof.capture.checks.syncs import SyncCheck
    from gpuprof.capture.config import CaptureConfig

__all__ = ["Live", "Monitor", "MonitorBase", "monitors", "AmpCheck", "CompileCheck", "DistributedCheck",
           "LoaderCheck", "MemoryCheck", "PlacementCheck", "SettingsCheck", "SyncCheck"]

# Each check from its module on first use: importing one check's own module (``gpuprof.capture.checks.loader.
# dataloader`` from the launcher's bootstrap, ``...loader.workerio`` from the watch's sampler) imports this
# package first, and must not load every other check with it.
_LAZY = {
    "AmpCheck": "amp", "CompileCheck": "compile", "DistributedCheck": "distributed", "LoaderCheck": "loader",
    "MemoryCheck": "memory", "PlacementCheck": "placement", "SettingsCheck": "settings", "SyncCheck": "syncs",
}


def monitors(config: CaptureConfig, on_fetch: Callable[[float], None]) -> list[Monitor]:
    """A fresh set of the runtime checks for one capture (``on_fetch``: seconds spent waiting for a batch)."""
    from gpuprof.capture.checks.amp import AmpCheck
    from gpuprof.capture.checks.compile import CompileCheck
    from gpuprof.capture.checks.distributed import DistributedCheck
    from gpuprof.capture.checks.loader import LoaderCheck
    from gpuprof.capture.checks.memory import MemoryCheck
    from gpuprof.capture.checks.placement import PlacementCheck
    from gpuprof.capture.checks.settings import SettingsCheck
    from gpuprof.capture.checks.syncs import SyncCheck

    opts = config.options
    return [
        PlacementCheck(opts.placement_max_modules),
        LoaderCheck(on_fetch, opts.stable_shape_batches),
        DistributedCheck(),
        SyncCheck(),
        CompileCheck(),
        AmpCheck(),
        SettingsCheck(),
        MemoryCheck(),
    ] + _watch(config)


def _watch(config: CaptureConfig) -> list[Monitor]:
    """The whole-job watch (:mod:`gpuprof.capture.checks.watch`), unless ``watch=False``."""
    if not config.watch:
        return []
    from gpuprof.capture.checks.watch import WatchCheck

    return [WatchCheck()]


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals(), __all__)

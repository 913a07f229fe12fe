"""gpuprof's test helpers, kept in the checkout and out of the wheel (pyproject.toml excludes this package).

Writers of synthetic inputs: Kineto traces (:mod:`~gpuprof.testing.tracegen`, a training loop in a few
lines), memory snapshots (:mod:`~gpuprof.testing.snapshots`, a model of PyTorch's caching allocator;
:mod:`~gpuprof.testing.synthpickle`, PyTorch-layout pickles of any size, entry by entry); where the shared
real data are (:mod:`~gpuprof.testing.realtraces`); the trackers' offline runs read back
(:mod:`~gpuprof.testing.trackerruns`); the import-cycle search (:mod:`~gpuprof.testing.cycles`). No module of
the shipped package imports them (``tests/test_package.py``).
"""

from __future__ import annotations

from gpuprof.testing import tracegen as _tracegen
from gpuprof.testing.tracegen import *  # noqa: F403 - the trace writer's names, as its __all__ lists them

__all__ = list(_tracegen.__all__)

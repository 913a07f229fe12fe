"""gpuprof's test helpers, outside the package (tests/support/gpuprof_testing, not in the wheel): pytest imports them
through pyproject.toml's ``pythonpath = ["tests"]``, a bench script or a child interpreter with ``tests/`` on
its path.

Writers of synthetic inputs: Kineto traces (:mod:`~gpuprof_testing.tracegen`, a training loop in a few
lines), memory snapshots (:mod:`~gpuprof_testing.snapshots`, a model of PyTorch's caching allocator;
:mod:`~gpuprof_testing.synthpickle`, PyTorch-layout pickles of any size, entry by entry); where the shared
real data are (:mod:`~gpuprof_testing.realtraces`); the trackers' offline runs read back
(:mod:`~gpuprof_testing.trackerruns`); the import-cycle search (:mod:`~gpuprof_testing.cycles`). No module of
the package imports them (``tests/test_package.py``).
"""

from __future__ import annotations

from gpuprof_testing import tracegen as _tracegen
from gpuprof_testing.tracegen import *  # noqa: F403 - the trace writer's names, as its __all__ lists them

__all__ = list(_tracegen.__all__)

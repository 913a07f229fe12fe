"""``gpuprof memory``: where the GPU memory went, from snapshots and profiler traces.

Data flows one way: :mod:`~gpuprof.memory.load` opens a snapshot pickle
(through the restricted unpickler of :mod:`~gpuprof.memory.safeload`) or a
trace, into the :mod:`~gpuprof.memory.model`; :mod:`~gpuprof.memory.replay`
replays the allocator history; :mod:`~gpuprof.memory.analysis` and
:mod:`~gpuprof.memory.diff` turn that into report sections and findings;
:mod:`~gpuprof.memory.render` and :mod:`~gpuprof.memory.html` draw them.
No module here imports torch.
"""

from __future__ import annotations

from gpuprof.memory.analysis import MemoryOptions, MemorySection, analyze_memory, memory_report
from gpuprof.memory.diff import DiffOptions, MemoryDiffSection, diff_memory, diff_report
from gpuprof.memory.load import load_memory, sniff
from gpuprof.memory.safeload import UnsafePickleError, safe_loads
from gpuprof.memory.snapshot import SNAPSHOT_PICKLE_PROTOCOL, dump_snapshot, load_snapshot, parse_snapshot

__all__ = [
    "MemoryOptions",
    "MemorySection",
    "analyze_memory",
    "memory_report",
    "DiffOptions",
    "MemoryDiffSection",
    "diff_memory",
    "diff_report",
    "load_memory",
    "sniff",
    "UnsafePickleError",
    "safe_loads",
    "SNAPSHOT_PICKLE_PROTOCOL",
    "dump_snapshot",
    "load_snapshot",
    "parse_snapshot",
]

"""``gpuprof memory``: where the GPU memory went, from snapshots and profiler traces.

Data flows one way: :mod:`~gpuprof.memory.load` opens a snapshot pickle
(through the restricted unpickler of :mod:`~gpuprof.memory.snapshot.safeload`) or a
trace, into the :mod:`~gpuprof.memory.model`; :mod:`~gpuprof.memory.replay`
replays the allocator history; :mod:`~gpuprof.memory.analysis` and
:mod:`~gpuprof.memory.diff` turn that into report sections and findings;
:mod:`~gpuprof.memory.render` and :mod:`~gpuprof.memory.html` draw them.
No module here imports torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuprof.lazyexports import lazy_exports

if TYPE_CHECKING:  # pragma: no cover
    from gpuprof.memory.analysis import MemoryOptions, MemorySection, analyze_memory, memory_report
    from gpuprof.memory.diff import DiffOptions, MemoryDiffSection, diff_memory, diff_report
    from gpuprof.memory.load import load_memory, sniff
    from gpuprof.memory.snapshot.read import SNAPSHOT_PICKLE_PROTOCOL, dump_snapshot, load_snapshot, parse_snapshot
    from gpuprof.memory.snapshot.safeload import UnsafePickleError, safe_loads

__all__ = ["MemoryOptions", "MemorySection", "analyze_memory", "memory_report", "DiffOptions", "MemoryDiffSection",
           "diff_memory", "diff_report", "load_memory", "sniff", "UnsafePickleError", "safe_loads",
           "SNAPSHOT_PICKLE_PROTOCOL", "dump_snapshot", "load_snapshot", "parse_snapshot"]

# Each name from its module on first use: `gpuprof analyze` reads the memory codes (gpuprof.memory.codes)
# for the code registry, and importing this package must not load the replay and the analysis for that.
_LAZY = {"MemoryOptions": "analysis", "MemorySection": "analysis", "analyze_memory": "analysis",
         "memory_report": "analysis", "DiffOptions": "diff", "MemoryDiffSection": "diff", "diff_memory": "diff",
         "diff_report": "diff", "load_memory": "load", "sniff": "load", "UnsafePickleError": "snapshot.safeload",
         "safe_loads": "snapshot.safeload", "SNAPSHOT_PICKLE_PROTOCOL": "snapshot.read",
         "dump_snapshot": "snapshot.read", "load_snapshot": "snapshot.read", "parse_snapshot": "snapshot.read"}


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals(), __all__)

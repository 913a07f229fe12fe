"""The critical path as the report holds it: plain rows, no numpy.

Defined apart from :mod:`gpuprof.trace.critpath.path` (which computes them and
re-exports them) so that reading a saved report (``gpuprof.report``, the saved
reader, ``gpuprof run``'s end-of-run card) loads neither numpy nor the step
graph.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["CriticalPart", "CriticalPath"]


@dataclass
class CriticalPart:
    """Time of the critical path spent in one kind of work under one name (µs, mean per step)."""

    kind: str
    name: str
    us: float


@dataclass
class CriticalPath:
    """The critical path of the recorded steps: ``length_us`` (the mean step time) and its ``parts``, whose
    ``us`` add up to it (docs/report-schema.md)."""

    length_us: float = 0.0
    parts: list[CriticalPart] = field(default_factory=list)
    # how long the host ran ahead of the GPU on the path: the mean, over the path's GPU time, of the time from each
    # event's launch call to its start (the launch queue's depth; 0 without GPU work on the path)
    host_ahead_us: float = 0.0

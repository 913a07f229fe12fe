"""The tables of :mod:`gpuprof.trace.stats` as the report holds them: plain rows, no numpy.

Defined apart from the code that fills them (:mod:`gpuprof.trace.stats`, which
re-exports them) so that reading a saved report (``gpuprof.report``, the saved
reader, ``gpuprof run``'s end-of-run card) does not load numpy.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["KernelStat", "OpStat", "CopyStat", "SyncStat"]


@dataclass(frozen=True)
class KernelStat:
    """Total GPU time of one kernel name over the whole trace."""

    name: str
    count: int
    total_us: float
    mean_us: float
    share_of_gpu: float  # fraction of all kernel time


@dataclass(frozen=True)
class OpStat:
    """Host-side time of one operator name (self time excludes child operators)."""

    name: str
    count: int
    total_us: float
    self_us: float
    gpu_us: float  # GPU self time: the work this op launched itself (torch's self_device_time_total)
    gpu_total_us: float = 0.0  # gpu_us plus that of the ops nested in it (torch's device_time_total)


@dataclass(frozen=True)
class CopyStat:
    """Host/device copies of one direction and host-memory kind."""

    direction: str  # "HtoD", "DtoH", "DtoD", "PtoP", "other"
    memory: str  # "pageable", "pinned", "device", "unknown"
    count: int
    bytes: int
    total_us: float
    bandwidth_gbps: float | None


@dataclass(frozen=True)
class SyncStat:
    """Host synchronisation points grouped by cause (op, runtime call and source line)."""

    cause: str  # e.g. "aten::item", "cudaStreamSynchronize"
    runtime: str  # the runtime call that blocked
    count: int
    total_us: float
    location: str | None  # "file:line" when the trace has Python stacks

"""GPU work: which kernels are communication, and the time GPU work covers.

Definitions (all times in µs, as in the trace):

**GPU busy**: per device, the union of kernel, memcpy and memset intervals
(overlapping streams count once) inside a step window. **GPU utilisation**:
busy time / step time, summed over steps, for the main device (the device
with the most busy time). It is None for traces without GPU activity.

**Communication kernel**: a kernel whose name (its first 64 characters)
names a collective library or operation: NCCL, RCCL, Gloo, all-reduce,
all-gather, reduce-scatter, all-to-all or ``c10d::``.
"""

from __future__ import annotations

import functools
from typing import Sequence

import numpy as np

from gpuprof.trace.arrays import sorted_unique
from gpuprof.trace.columns import Columns
from gpuprof.trace.intervals import Intervals
from gpuprof.trace.model import Event, dur_of, ts_of

__all__ = ["is_communication_kernel", "union_of", "device_sets", "kernel_sets"]

_COMM_MARKERS = ("nccl", "rccl", "gloo", "allreduce", "all_reduce", "allgather", "all_gather", "reducescatter", "reduce_scatter", "alltoall", "c10d::")


@functools.lru_cache(maxsize=16384)  # called per kernel; names repeat
def is_communication_kernel(name: str) -> bool:
    """NCCL/RCCL collective kernels (``ncclKernel_AllReduce_...``, ``ncclDevKernel_...``)."""
    low = name[:64].lower()
    return any(m in low for m in _COMM_MARKERS)


def union_of(events: Sequence[Event]) -> Intervals:
    """The time covered by ``events`` (in any order)."""
    n = len(events)
    if n == 0:
        return Intervals.empty()
    return Intervals.from_spans(np.fromiter(map(ts_of, events), np.float64, n), np.fromiter(map(dur_of, events), np.float64, n))


def device_sets(events: list[Event], mask: np.ndarray | None = None, cols: Columns | None = None) -> dict[int, Intervals]:
    """Per device, the time covered by ``events`` (sorted by start), optionally only where ``mask``.

    ``cols``: the columns of ``events`` when the caller has them (the trace's shared ones).
    """
    n = len(events)
    if n == 0:
        return {}
    c = cols if cols is not None else Columns(events)
    ts, dur, dev = c.ts, c.dur, c.device
    if mask is not None:
        ts, dur, dev = ts[mask], dur[mask], dev[mask]
    out = {}
    for d in sorted_unique(dev).tolist():
        sel = dev == d
        out[d] = Intervals.from_spans(ts[sel], dur[sel], is_sorted=True)
    return out


def kernel_sets(kernels: list[Event], cols: Columns | None = None) -> tuple[dict[int, Intervals], dict[int, Intervals]]:
    """Per device, the time covered by compute kernels and by communication (collective) kernels."""
    c = cols if cols is not None else Columns(kernels)
    is_comm = np.fromiter(map(is_communication_kernel, c.names), bool, len(c.names))  # per distinct name
    if not is_comm.any():
        return device_sets(kernels, None, c), {}
    comm = is_comm[c.name_code]
    return device_sets(kernels, ~comm, c), device_sets(kernels, comm, c)

"""GP702's what-if on one rank's graph: its collectives overlapped with the compute that follows them.

"Overlapped" (docs/critical-path.md): the communication kernels (NCCL/RCCL)
no longer block the compute that follows them, they run beside it. On the
graph that is two changes, and nothing else:

* each collective leaves its stream for a lane of its own (one per stream it
  ran on), where it keeps its order and its readiness: it still starts when
  what it waited for was done (its recorded start, moved with the host like
  every event), so a collective never runs before the compute it followed;
* the GPU work that waited for a collective (queued right behind it on its
  stream, or held on another stream until it ended: a ``cudaStreamWaitEvent``
  on it) is ready once launched instead (its launch plus the trace's latency).

The step still ends no earlier than the last collective ends (the replay's
end is the later of the host's and every lane's), and a host wait that waited
for a collective still waits for it. Each collective keeps its recorded
length, waiting for the other ranks included: the ranks' graphs are not
joined here, so what a rank saves is what its own compute no longer waits for.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from gpuprof.trace.critpath.graph import GPU_COMM, StepGraph, build_graph
from gpuprof.trace.critpath.replay import Replayer
from gpuprof.trace.metrics import TraceMetrics

__all__ = ["overlapped", "overlap_saving"]


def overlapped(g: StepGraph) -> StepGraph | None:
    """``g`` with its collectives overlapped (see the module docstring); None without a collective."""
    comm = g.g_kind == GPU_COMM
    n = g.n_gpu
    if not comm.any():
        return None
    idx = np.arange(n)
    bound = g.g_run != idx  # queued right behind the previous event of its stream
    prev, dep = g.g_prev, g.g_dep
    behind = bound & (prev >= 0) & comm[np.maximum(prev, 0)]
    held = ~comm & (behind | (dep >= 0) & comm[np.maximum(dep, 0)])
    launched = np.where(np.isnan(g.g_launch), g.g_ts, g.g_launch + g.latency_us)
    ready = np.where(held, np.minimum(g.g_ts, launched), g.g_ready)
    # a collective that was queued behind compute on a shared stream keeps waiting for it: its recorded start
    ready = np.where(comm & bound & (prev >= 0) & ~comm[np.maximum(prev, 0)], g.g_ts, ready)
    lo, hi = (int(g.g_stream.min()), int(g.g_stream.max())) if n else (0, 0)
    lane = np.where(comm, g.g_stream + (hi - lo + 1), g.g_stream)  # a collective's own lane, beside its stream
    order = np.lexsort((g.g_ts, lane))
    inv = np.empty(n, np.int64)
    inv[order] = idx
    stream = lane[order]
    first = np.ones(n, bool)
    first[1:] = stream[1:] != stream[:-1]
    new_prev = np.where(first, -1, idx - 1)
    old_prev = prev[order]
    same = (old_prev >= 0) & (new_prev == np.where(old_prev >= 0, inv[np.maximum(old_prev, 0)], -2))
    new_bound = ~first & bound[order] & same
    run = np.maximum.accumulate(np.where(new_bound, 0, idx))
    old_dep = np.where(held, -1, dep)[order]
    new_dep = np.where(old_dep >= 0, inv[np.maximum(old_dep, 0)], -1)
    w_gpu = np.where(g.w_gpu >= 0, inv[np.maximum(g.w_gpu, 0)], -1) if n else g.w_gpu
    return dataclasses.replace(
        g, g_ts=g.g_ts[order], g_end=g.g_end[order], g_stream=stream, g_kind=g.g_kind[order], g_name=g.g_name[order],
        g_prev=new_prev, g_run=run, g_queued=g.g_queued[order] & same, g_launch=g.g_launch[order], g_launch_code=g.g_launch_code[order],
        g_ready=ready[order], g_dep=new_dep, w_gpu=w_gpu)


def overlap_saving(m: TraceMetrics, digits: int | None = None) -> float | None:
    """The step time the rank saves per step (mean over its steps, µs; rounded to ``digits``) with its
    collectives overlapped; None where its graph has no collective (no main device, gloo: not replayed)."""
    if not m.steps or m.main_device is None:
        return None
    g = m.memo(build_graph)
    g2 = overlapped(g)
    if g2 is None:
        return None
    saving = max(Replayer(g).end() - Replayer(g2).end(), 0.0) / max(len(g.steps), 1)
    return saving if digits is None else round(saving, digits)

"""Helpers the rule modules share: host-step membership, kernel-idle time, copy waits, counts.

They read only the trace model and its metrics (shared per-trace indexes,
such as the per-thread runtime calls, live on ``TraceMetrics``).
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Iterable, Sequence

import numpy as np

from gpuprof.trace.intervals import Interval, Intervals
from gpuprof.trace.metrics import TraceMetrics
from gpuprof.trace.model import Event, ts_of
from gpuprof.trace.syncs import CopyEvent, next_sync_call
from gpuprof.units import fmt_us

__all__ = ["count_of", "host_step_of", "host_steps_of", "kernel_busy", "kernel_idle_within", "copy_wait_calls",
           "of_step", "ThreadSpans"]


def count_of(n: float, singular: str, plural: str | None = None) -> str:
    """``2 copies``, ``1 copy``, ``0.5 copies``: a per-step count with its noun."""
    return f"{n:.3g} {singular if n == 1 else (plural or singular + 's')}"


def of_step(m: TraceMetrics, us: float) -> str:
    """``"12.3 ms per step (4.5% of the mean step)"``: a per-step time labelled with its share.

    The share is of the mean step time (total step time / steps), the same
    denominator as a finding's ``cost_share``, so message and cost agree. In a
    trace without step markers the one "step" is the whole trace after its
    lead-in, and the words say so: ``"12.3 ms over the trace (4.5% of it)"``.
    """
    step = m.mean_step_time
    if not m.has_step_markers and m.steps:
        share = f" ({us / step:.1%} of the trace after its lead-in)" if m.lead_in_us else f" ({us / step:.1%} of it)"
        return f"{fmt_us(us)} over the trace{share if step > 0 else ''}"
    share = f" ({us / step:.1%} of the mean step)" if step > 0 else ""
    return f"{fmt_us(us)} per step{share}"


def host_step_of(m: TraceMetrics, t: float) -> int | None:
    """Index of the step whose *host* range (``ProfilerStep#`` start to its end) contains ``t``.

    Unlike ``TraceMetrics.step_of``, the tail of the last step where only the
    GPU is still running does not count: host calls made there (the
    profiler's own closing ``cudaDeviceSynchronize``) are not the user's.
    """
    if not m.steps:
        return None
    i = bisect_right(m.step_starts, t) - 1
    if i < 0:
        return None
    s = m.steps[i]
    # steps tile the timeline: everything up to the next step start belongs to step i
    end = s.end if i + 1 < len(m.steps) else s.cpu_end
    return i if t <= end else None


def host_steps_of(m: TraceMetrics, events: Sequence[Event]) -> list[int | None]:
    """:func:`host_step_of` for many events at once (one numpy search instead of a bisect per event)."""
    if not m.steps or not events:
        return [None] * len(events)
    ts = np.fromiter(map(ts_of, events), dtype=np.float64, count=len(events))
    return [k if k >= 0 else None for k in host_steps_at(m, ts).tolist()]


def host_steps_at(m: TraceMetrics, ts: np.ndarray) -> np.ndarray:
    """:func:`host_step_of` of each time in ``ts``, as an array (-1: None)."""
    if not m.steps or not len(ts):
        return np.full(len(ts), -1, np.int64)
    starts = np.asarray(m.step_starts, dtype=np.float64)
    ends = np.array([s.end for s in m.steps[:-1]] + [m.steps[-1].cpu_end], dtype=np.float64)
    i = np.searchsorted(starts, ts, side="right") - 1
    ok = (i >= 0) & (ts <= ends[np.maximum(i, 0)])
    out: np.ndarray = np.where(ok, i, -1)
    return out


def kernel_busy(m: TraceMetrics) -> Intervals:
    """Union of kernel intervals on the main device (copies and memsets excluded)."""
    return m.kernel_busy


def kernel_idle_within(m: TraceMetrics, host: Sequence[Interval]) -> float:
    """Time inside the host intervals (in any order) when the main device ran no kernel."""
    return Intervals.from_pairs(host).subtract(kernel_busy(m)).total()


def copy_wait_calls(m: TraceMetrics, c: CopyEvent) -> list[Event]:
    """The host calls during which the host waited for copy ``c``.

    Its own runtime call, plus the stream/device synchronisation that follows
    it on the same thread before any other GPU work is queued (the same
    look-ahead as the blocking-copy definition in ``gpuprof.trace.metrics``).
    """
    if c.launch is None:
        return []
    sync = next_sync_call(m.threads, c.launch)
    return [c.launch] if sync is None else [c.launch, sync]


class ThreadSpans:
    """The time ranges of some events (nn.Module frames, dropout calls, torch.compile frames), per host thread,
    merged: where another event of the same thread falls (:meth:`covering`)."""

    def __init__(self, events: Iterable[Event]) -> None:
        pairs: dict[tuple[str, str], list[Interval]] = {}
        for e in events:
            pairs.setdefault((str(e.pid), str(e.tid)), []).append((e.ts, e.end))
        self._by_thread = {key: Intervals.from_pairs(p) for key, p in pairs.items()}

    def __bool__(self) -> bool:
        return bool(self._by_thread)

    def covering(self, e: Event) -> Interval | None:
        """The merged span of ``e``'s thread that contains ``e``'s start (start <= ts <= end), else None."""
        ivs = self._by_thread.get((str(e.pid), str(e.tid)))
        i = ivs.covering(e.ts) if ivs is not None else None
        return None if ivs is None or i is None else ivs[i]

"""Metrics of one trace: the facade the rules, renderers and summaries read.

Every metric is defined once, in words, in the docstring of the module that
computes it:

- :mod:`gpuprof.trace.steps`: main thread, step, lead-in, step time;
- :mod:`gpuprof.trace.gpuwork`: GPU busy, GPU utilisation, communication kernel;
- :mod:`gpuprof.trace.breakdown`: step-time breakdown, GPU idle breakdown;
- :mod:`gpuprof.trace.idleparts`: idle parts (idle time by name);
- :mod:`gpuprof.trace.dataloading`: data-loading share, DataLoader ranges;
- :mod:`gpuprof.trace.syncs`: blocking copy, sync point;
- :mod:`gpuprof.trace.stats`: kernel, operator (host and GPU time), copy and sync tables.

:func:`compute_metrics` runs them in order on one :class:`~gpuprof.trace.model.Trace`
and gathers the results in a :class:`TraceMetrics`; every other name is imported
from the module that defines it (listed above). The report's per-trace summary is
built from a ``TraceMetrics`` in :mod:`gpuprof.summarize` (``gpuprof.trace`` does not depend on the report).
"""

from __future__ import annotations

import functools
import statistics
from bisect import bisect_right
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from itertools import compress
from typing import TypeVar, cast

import numpy as np

from gpuprof.trace.attribution import OpAttribution, attribute
from gpuprof.trace.breakdown import (
    BREAKDOWN_KEYS,
    IDLE_KEYS,
    annotated_ranges,
    host_layers,
    idle_breakdown,
    step_breakdown,
)
from gpuprof.trace.columns import columns, gpu_launch_positions
from gpuprof.trace.dataloading import data_loading_share, loader_ranges
from gpuprof.trace.gpuwork import device_sets, is_communication_kernel, kernel_sets, union_of
from gpuprof.trace.intervals import Interval, Intervals
from gpuprof.trace.model import Event, Trace
from gpuprof.trace.stacks import StackIndex
from gpuprof.trace.statrows import KernelStat, OpStat
from gpuprof.trace.stats import kernel_stats, op_stats
from gpuprof.trace.steps import Step, find_steps, main_thread, step_markers
from gpuprof.trace.syncs import CopyEvent, SyncPoint, find_copies, sync_points
from gpuprof.trace.threads import HostThread, ThreadIndex, thread_keys
from gpuprof.trace.vocab import Kind

__all__ = ["TraceMetrics", "compute_metrics"]

_T = TypeVar("_T")


@dataclass
class TraceMetrics:
    """Everything the rules read about one trace."""

    trace: Trace
    main_thread: HostThread | None
    steps: list[Step]
    windows: list[Interval]
    has_step_markers: bool
    lead_in: Interval | None  # (trace start, first GPU work) of a trace without step markers, else None
    devices_active: list[int]
    main_device: int | None
    gpu_busy: dict[int, Intervals]
    busy_per_step: dict[int, list[float]]
    breakdown_per_step: list[dict[str, float]]
    idle_per_step: list[dict[str, float]]
    data_loading_per_step: list[float]
    dataloader_events: list[Event]
    dataloader_single_process: bool | None
    launch_by_corr: dict[int, Event]
    op_by_ext: dict[int, Event]
    syncs: list[SyncPoint]
    copies: list[CopyEvent]
    host_intervals: dict[str, Intervals]
    stacks: StackIndex
    threads: "ThreadIndex"
    kernel_busy: Intervals = field(default_factory=Intervals.empty)  # union of all kernels on the main device
    kernel_stats: list[KernelStat] = field(default_factory=list)
    op_stats: list[OpStat] = field(default_factory=list)
    # the launching operator of every GPU event (computed once: the operator table and the report's views read it)
    attribution: OpAttribution | None = None
    # what memo() computed: figures the rules derive and several rules read, by function and arguments
    _memo: dict[tuple[Hashable, ...], object] = field(default_factory=dict, repr=False, compare=False)
    # gives gpu_launch_positions(trace), found once (compute_metrics: the steps may have asked already)
    _gpu_launch: Callable[[], np.ndarray] | None = field(default=None, repr=False, compare=False)

    def memo(self, fn: Callable[..., _T], *args: Hashable) -> _T:
        """``fn(self, *args)``, computed once per trace and arguments: a figure that more than one rule
        derives the same way (an explicit cache, instead of attributes set on the metrics from outside)."""
        key = (fn, *args)
        if key not in self._memo:
            self._memo[key] = fn(self, *args)
        return cast(_T, self._memo[key])

    def forget(self, fn: Callable[..., object], *args: Hashable) -> None:
        """Drop what :meth:`memo` kept of ``fn(self, *args)`` (a big figure its readers are done with, such as the
        step graph); a later ``memo`` computes it again."""
        self._memo.pop((fn, *args), None)

    # -- derived numbers -------------------------------------------------------
    @property
    def lead_in_us(self) -> float | None:
        """Length of the lead-in (see the module docstring); None when the trace has none."""
        return None if self.lead_in is None else self.lead_in[1] - self.lead_in[0]

    @property
    def num_steps(self) -> int:
        return len(self.steps)

    @property
    def step_times(self) -> list[float]:
        return [s.dur for s in self.steps]

    @property
    def total_time(self) -> float:
        return sum(s.dur for s in self.steps)

    @property
    def median_step_time(self) -> float:
        return statistics.median(self.step_times) if self.steps else 0.0

    @property
    def mean_step_time(self) -> float:
        return self.total_time / len(self.steps) if self.steps else 0.0

    def gpu_busy_total(self, device: int | None = None) -> float:
        dev = self.main_device if device is None else device
        if dev is None:
            return 0.0
        return sum(self.busy_per_step.get(dev, ()))

    @property
    def gpu_utilization(self) -> float | None:
        """Busy / step time of the main device over all steps (None without GPU activity)."""
        if self.main_device is None or self.total_time <= 0:
            return None
        return self.gpu_busy_total() / self.total_time

    def mean_breakdown(self) -> dict[str, float]:
        n = max(len(self.steps), 1)
        return {k: sum(b[k] for b in self.breakdown_per_step) / n for k in BREAKDOWN_KEYS}

    def mean_idle(self) -> dict[str, float]:
        n = max(len(self.steps), 1)
        return {k: sum(b[k] for b in self.idle_per_step) / n for k in IDLE_KEYS}

    @property
    def data_loading_share(self) -> float:
        """:func:`data_loading_share` over the recorded steps (0 without step time)."""
        return data_loading_share(sum(self.data_loading_per_step), self.total_time) or 0.0

    def step_of(self, t: float) -> int | None:
        """Index of the step whose window contains ``t`` (None outside all steps)."""
        i = bisect_right(self.step_starts, t) - 1
        if i >= 0 and t <= self.steps[i].end:
            return i
        return None

    @functools.cached_property
    def step_starts(self) -> list[float]:
        """Start of each step, in order (for bisecting a time to its step)."""
        return [s.start for s in self.steps]

    @functools.cached_property
    def step_kernels(self) -> list[Event]:
        """Compute kernels (not NCCL/RCCL collectives) of the main device that start inside a step window."""
        keep = np.zeros(len(self.trace.kernels), bool)
        keep[self.step_kernel_at] = True
        return list(compress(self.trace.kernels, keep.tolist()))

    @functools.cached_property
    def step_kernel_at(self) -> np.ndarray:
        """The positions in ``trace.kernels`` (and in :func:`gpu_columns`) of :attr:`step_kernels`, in order."""
        dev = self.main_device
        kernels = self.trace.kernels
        if dev is None or not self.steps or not kernels:
            return np.zeros(0, np.int64)
        kc = columns(self.trace, kernels)
        ts = kc.ts
        keep = kc.device == dev
        lo = np.array([s.start for s in self.steps])
        hi = np.array([s.end for s in self.steps])
        w = np.searchsorted(lo, ts, side="right") - 1  # the step each kernel starts in, if any
        keep &= (w >= 0) & (ts <= hi[np.maximum(w, 0)])
        is_comm = np.fromiter(map(is_communication_kernel, kc.names), bool, len(kc.names))  # per distinct name
        if is_comm.any():
            keep &= ~is_comm[kc.name_code]
        return np.flatnonzero(keep)

    @functools.cached_property
    def gpu_launch(self) -> np.ndarray:
        """Per event of :func:`gpu_columns` (kernels, then copies, then memsets), the position in
        ``trace.runtime`` of its launch, ``launch_by_corr[corr]`` (the last call with its correlation
        id), -1 if none: for rules that look launches up for many GPU events, in numpy."""
        return self._gpu_launch() if self._gpu_launch is not None else gpu_launch_positions(self.trace)


def _step_communication(trace: Trace, main_device: int | None, comm_by_dev: dict[int, Intervals],
                        host: dict[str, Intervals]) -> Intervals:
    """The communication of the step breakdown: communication no compute runs beside (exposed).

    On a GPU: the main device's communication kernels (the breakdown gives an
    instant with a compute kernel to ``kernel`` first). On a CPU run (gloo) the
    collectives are host-side ranges (``gloo:*`` annotations), less the
    operators and data loading of the main thread: the same definition as the
    cross-rank section's exposed communication (gpuprof.distributed.summary),
    so the per-trace summary and the cross-rank table show one figure.
    """
    if main_device is not None:
        return comm_by_dev.get(main_device, Intervals.empty())
    gloo = [e for e in trace.comm_events if e.kind == Kind.USER_ANNOTATION and e.name.lower().startswith("gloo:")]
    if not gloo:
        return Intervals.empty()
    return union_of(gloo).subtract(host["cpu_ops"]).subtract(host["data_loading"])


def compute_metrics(trace: Trace) -> TraceMetrics:
    """All metrics of ``trace`` (see the module docstring for where each is defined)."""
    markers = step_markers(trace)
    main = main_thread(trace, markers)
    launch_by_corr: dict[int, Event] = {r.corr: r for r in trace.runtime if r.corr >= 0}
    # each GPU event's launch: found once, for the steps (where they ask) and metrics.gpu_launch
    gpu_launch = functools.cache(functools.partial(gpu_launch_positions, trace))
    steps, has_markers, lead_in = find_steps(trace, main, markers, launch_by_corr, gpu_launch)
    windows = [(s.start, s.end) for s in steps]

    # GPU side: per device, the union of each kind of GPU work
    kern_by_dev, comm_by_dev = kernel_sets(trace.kernels, columns(trace, trace.kernels))
    memcpy_by_dev = device_sets(trace.memcpys, None, columns(trace, trace.memcpys))
    memset_by_dev = device_sets(trace.memsets, None, columns(trace, trace.memsets))
    devices = sorted(set(kern_by_dev) | set(comm_by_dev) | set(memcpy_by_dev) | set(memset_by_dev))
    none = Intervals.empty()
    gpu_by_dev: dict[int, Intervals] = {}
    for d in devices:
        gpu_by_dev[d] = (
            kern_by_dev.get(d, none).union(comm_by_dev.get(d, none)).union(memcpy_by_dev.get(d, none)).union(memset_by_dev.get(d, none))
        )
    busy_per_step = {d: gpu_by_dev[d].per_window(windows) for d in devices}
    main_device = max(devices, key=lambda d: sum(busy_per_step[d])) if devices else None

    # host side
    op_by_ext: dict[int, Event] = {o.ext: o for o in reversed(trace.ops) if o.ext >= 0}  # the first op wins
    threads = ThreadIndex.build(trace)
    main_keys = thread_keys(main)
    main_runtime = threads.runtime_on(main_keys)
    copy_events = find_copies(trace, launch_by_corr, threads)
    blocking_copy_calls = {id(c.launch) for c in copy_events if c.blocking and c.launch is not None}
    host_dl_events, optimizer_events = annotated_ranges(trace, main, main_keys)
    dl_events, single = loader_ranges(host_dl_events)
    host = host_layers(main_runtime, blocking_copy_calls, host_dl_events, optimizer_events, threads, main_keys, trace)

    # breakdowns
    def on_main_device(sets: dict[int, Intervals]) -> Intervals:
        return sets.get(main_device, none) if main_device is not None else none

    breakdown = step_breakdown(
        windows, on_main_device(kern_by_dev), _step_communication(trace, main_device, comm_by_dev, host),
        on_main_device(memcpy_by_dev), on_main_device(memset_by_dev), host
    )
    idle = idle_breakdown(windows, on_main_device(gpu_by_dev) if main_device is not None else None, host)

    stacks = StackIndex(trace)
    metrics = TraceMetrics(
        trace=trace,
        main_thread=main,
        steps=steps,
        windows=windows,
        has_step_markers=has_markers,
        lead_in=lead_in,
        devices_active=devices,
        main_device=main_device,
        gpu_busy=gpu_by_dev,
        busy_per_step=busy_per_step,
        breakdown_per_step=breakdown,
        idle_per_step=idle,
        data_loading_per_step=host["data_loading"].per_window(windows),
        dataloader_events=dl_events,
        dataloader_single_process=single,
        launch_by_corr=launch_by_corr,
        op_by_ext=op_by_ext,
        syncs=[],
        copies=[],
        host_intervals=host,
        stacks=stacks,
        threads=threads,
        _gpu_launch=gpu_launch,
    )
    for c in copy_events:
        c.step = metrics.step_of(c.gpu.ts)
    metrics.copies = copy_events
    metrics.kernel_busy = on_main_device(kern_by_dev).union(on_main_device(comm_by_dev))
    metrics.attribution = attribute(trace, threads.ops, threads.runtime)
    metrics.op_stats = op_stats(trace, threads, metrics.attribution)
    metrics.syncs = sync_points(main_runtime, blocking_copy_calls, copy_events, threads, op_by_ext, stacks, metrics.step_of,
                                 kernel_busy=metrics.kernel_busy)
    metrics.kernel_stats = kernel_stats(trace)
    return metrics

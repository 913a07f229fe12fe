"""Metrics of one trace, each defined once, here, in words.

Definitions (all times in µs, as in the trace):

**Main thread**: the host thread that records the ``ProfilerStep#N``
annotations; without them, the host thread with the most operator time.

**Step**: one ``ProfilerStep#N`` range of the main thread. Steps tile the
timeline: step *i* runs from its own start to the next step's start, or, for
the last step (and before a gap), to the later of its host end and the end of
the last GPU activity it launched. Without ``ProfilerStep#`` events the whole
trace (after its lead-in, see below) is one step (id 0). Duplicate step numbers (two profiling spans in one
file) are kept as separate steps, in time order.

**Lead-in**: in a trace without ``ProfilerStep#`` markers, the time from the
trace's first event to its first GPU work: the earlier of the first GPU
activity (kernel, copy or memset) and the start of the host call that launched
it. The profiler was started before the program used the GPU (imports, CUDA
context creation, data set-up); that time is not a GPU-idle problem of the
work being profiled, so the whole-trace step starts after it, and it is
reported on its own (``lead_in_us``). Traces with step markers and traces
without GPU work have no lead-in (None): their windows already start where the
work does.

**Step time**: the length of a step's window. Reports give the median.

**GPU busy**: per device, the union of kernel, memcpy and memset intervals
(overlapping streams count once) inside a step window. **GPU utilisation**:
busy time / step time, summed over steps, for the main device (the device
with the most busy time). It is None for traces without GPU activity.

**Step-time breakdown**: each instant of a step is given to the first of
these that is active at it: ``kernel`` (non-communication kernels on the main
device), ``communication`` (NCCL/RCCL/Gloo kernels), ``memcpy``, ``memset``,
``runtime`` (a CUDA/HIP runtime call on the main thread), ``data_loading``
(the DataLoader fetching a batch on the main thread), ``cpu_exec`` (any other
operator on the main thread), else ``other``. The parts add up to the step
time.

**GPU idle breakdown**: each instant of a step when the main device is idle
is given to what the main thread was doing, first match wins: ``sync``
(blocked in a synchronising runtime call), ``blocking_copy`` (in a copy call
that returned only after the copy finished), ``runtime`` (any other runtime
call: launches, malloc/free, ...), ``data_loading``, ``optimizer``
(``Optimizer.step``/``zero_grad``), ``cpu_other`` (other operators, Python, or
nothing recorded). The parts add up to the idle time.

**Idle parts** (:mod:`gpuprof.trace.idleparts`): the same idle time split
by name instead of kind, first match wins: the runtime call of the main thread
(``cudaFree``) open at the instant; else the innermost *user* Python frame
(``train.py(42): load_batch``; the innermost frame when no user frame is open)
of the main thread's ``python_function`` stack; in traces without Python
stacks, the innermost operator; else "nothing recorded on the main thread".
The parts add up to the idle time.

**Data-loading share** (:func:`data_loading_share`, the one definition every
figure uses): time the training thread spent waiting for the next batch
(inside ``DataLoader.__next__``; overlapping ranges counted once) / the step
time of the same steps, at most 1. From a trace (GP102, GP103, ``analyze``)
the steps are the recorded ones; during a capture (GP601, the summary, the
report's ``data_loading_share``, the TensorBoard scalar) every step is timed
live, so a capture reports the share over the whole run and its report drops
GP102 when GP601 holds the same finding.

**Blocking copy**: a host↔device copy whose host call returned only after
the GPU copy ended, or that is followed on the same thread by a stream/device
synchronisation before any other GPU work is launched.

**GPU time of an operator** (top-operators table): each kernel, copy and
memset is charged to the operator that launched it: the innermost operator
open on the host thread of its runtime call (the ``cudaLaunchKernel``/
``hipMemcpyAsync``... with the same correlation id) when that call starts.
*GPU self* time (``gpu_us``) is the time of the work an operator launched
itself, torch's ``self_device_time_total``; *GPU total* (``gpu_total_us``)
adds the GPU self time of every operator nested in it, torch's
``device_time_total``. Both are summed over the calls of one operator name.
An operator that launches nothing directly (``aten::view``, ``aten::conv2d``)
has no GPU self time. A kernel's ``External id`` is not trusted to name its
operator (in many traces it equals the correlation id); see
:mod:`gpuprof.trace.attribution`.

**Sync point**: a synchronising runtime call (``*Synchronize``) or a
blocking device→host copy on the main thread, with the operator chain that
issued it and the user's source line when Python stacks were recorded.
"""

from __future__ import annotations

import functools
import statistics
from bisect import bisect_left, bisect_right
from collections import defaultdict
from dataclasses import dataclass, field
from itertools import compress
from typing import Sequence, Union

import numpy as np

from gpuprof.findings import SourceLocation
from gpuprof.report import CopyStat, KernelStat, OpStat, SyncStat, TraceSummary
from gpuprof.trace.attribution import attribute
from gpuprof.trace.intervals import Interval, Intervals, first_cover_per_window
from gpuprof.trace.model import Event, Trace, copy_kind, device_of, dur_of, name_of, ts_of
from gpuprof.trace.stacks import StackIndex
from gpuprof.trace.vocab import (
    SYNC_OPS,
    CopyKind,
    RuntimeClass,
    classify_runtime,
    is_dataloader_name,
    is_optimizer_name,
    is_single_process_dataloader,
    step_number,
)

__all__ = [
    "Step",
    "SyncPoint",
    "ThreadIndex",
    "CopyEvent",
    "TraceMetrics",
    "compute_metrics",
    "data_loading_share",
    "is_communication_kernel",
    "communication_names",
    "union_of",
    "thread_keys",
    "BREAKDOWN_KEYS",
    "IDLE_KEYS",
]

BREAKDOWN_KEYS = ("kernel", "communication", "memcpy", "memset", "runtime", "data_loading", "cpu_exec", "other")
IDLE_KEYS = ("sync", "blocking_copy", "runtime", "data_loading", "optimizer", "cpu_other")

_COMM_MARKERS = ("nccl", "rccl", "gloo", "allreduce", "all_reduce", "allgather", "all_gather", "reducescatter", "reduce_scatter", "alltoall", "c10d::")


@functools.lru_cache(maxsize=16384)  # called per kernel; names repeat
def is_communication_kernel(name: str) -> bool:
    """NCCL/RCCL collective kernels (``ncclKernel_AllReduce_...``, ``ncclDevKernel_...``)."""
    low = name[:64].lower()
    return any(m in low for m in _COMM_MARKERS)


HostThread = tuple[Union[int, str], Union[int, str]]


@dataclass
class Step:
    """One step window (see the module docstring)."""

    index: int  # position in time order
    id: int  # N of ProfilerStep#N (0 when the trace has no steps)
    start: float
    end: float
    cpu_end: float

    @property
    def dur(self) -> float:
        return self.end - self.start


@dataclass
class SyncPoint:
    """A moment the main thread waited for the GPU."""

    runtime: Event  # the blocking runtime call
    ops: list[Event]  # enclosing operators, outermost first
    cause: str  # what the user wrote, e.g. ".item()"; else the outermost op or the runtime name
    location: SourceLocation | None
    step: int | None  # step index


@dataclass
class CopyEvent:
    """One GPU copy with the host call that issued it."""

    gpu: Event
    launch: Event | None
    kind: CopyKind
    blocking: bool
    step: int | None


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
        dev = self.main_device
        kernels = self.trace.kernels
        if dev is None or not self.steps or not kernels:
            return []
        n = len(kernels)
        ts = np.fromiter(map(ts_of, kernels), np.float64, n)
        keep = np.fromiter(map(device_of, kernels), np.int64, n) == dev
        lo = np.array([s.start for s in self.steps])
        hi = np.array([s.end for s in self.steps])
        w = np.searchsorted(lo, ts, side="right") - 1  # the step each kernel starts in, if any
        keep &= (w >= 0) & (ts <= hi[np.maximum(w, 0)])
        comm = communication_names(kernels)
        if comm:
            keep &= np.fromiter((k.name not in comm for k in kernels), bool, n)
        return list(compress(kernels, keep.tolist()))

    @functools.cached_property
    def _dtoh_launch_starts(self) -> list[float]:
        return sorted(c.launch.ts for c in self.copies if c.launch is not None and c.kind.direction == "DtoH")

    def summary(self) -> TraceSummary:
        t = self.trace
        return TraceSummary(
            path=t.path,
            devices=list(t.devices),
            has_gpu_activity=t.has_gpu_activity,
            num_steps=self.num_steps,
            step_ids=[s.id for s in self.steps],
            step_time_us=self.median_step_time,
            step_time_mean_us=self.mean_step_time,
            lead_in_us=self.lead_in_us,
            gpu_busy_us=self.gpu_busy_total() / max(self.num_steps, 1),
            gpu_utilization=self.gpu_utilization,
            breakdown_us=self.mean_breakdown(),
            idle_breakdown_us=self.mean_idle(),
            top_kernels=self.kernel_stats[:10],
            top_ops=self.op_stats[:10],
            copies=_copy_stats(self.copies),
            syncs=_sync_stats(self.syncs)[:10],
            rank=t.rank,
            world_size=t.world_size,
            num_events=t.num_events,
            file_bytes=t.file_bytes,
        )


# ------------------------------------------------------------------------------ computing


def compute_metrics(trace: Trace) -> TraceMetrics:
    markers = _step_markers(trace)
    main = _main_thread(trace, markers)
    launch_by_corr: dict[int, Event] = {r.corr: r for r in trace.runtime if r.corr >= 0}
    steps, has_markers, lead_in = _steps(trace, main, markers, launch_by_corr)
    windows = [(s.start, s.end) for s in steps]

    # GPU side: per device, the union of each kind of GPU work
    kern_by_dev, comm_by_dev = _kernel_sets(trace.kernels)
    memcpy_by_dev = _device_sets(trace.memcpys)
    memset_by_dev = _device_sets(trace.memsets)
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
    copy_events = _copies(trace, launch_by_corr, threads)
    blocking_copy_calls = {id(c.launch) for c in copy_events if c.blocking and c.launch is not None}

    rt_sync, rt_copy, rt_other = [], [], []
    for r in main_runtime:
        rc = classify_runtime(r.name)
        if rc is RuntimeClass.SYNC:
            rt_sync.append(r)
        elif id(r) in blocking_copy_calls or (rc is RuntimeClass.MEMCPY and not r.name.endswith("Async")):
            rt_copy.append(r)
        else:
            rt_other.append(r)
    host_dl_events: list[Event] = []
    optimizer_events: list[Event] = []
    for events in (trace.annotations, trace.ops, trace.python):  # events whose names carry annotations
        names = set(map(name_of, events))
        dl_names = {n for n in names if is_dataloader_name(n)}  # per distinct name, once
        opt_names = {n for n in names if is_optimizer_name(n)} - dl_names
        if not dl_names and not opt_names:
            continue
        for e in events:
            name = e.name
            if name in dl_names:
                if main is None or (e.pid, e.tid) in main_keys:
                    host_dl_events.append(e)
            elif name in opt_names and (e.pid, e.tid) in main_keys:
                optimizer_events.append(e)
    dl_events = [e for e in host_dl_events if e.name.startswith("enumerate(DataLoader)")] or host_dl_events
    single: bool | None = None
    if any(e.name.startswith("enumerate(DataLoader)") for e in dl_events):
        single = any(is_single_process_dataloader(e.name) for e in dl_events)
    data_loading = union_of(host_dl_events)
    optimizer = union_of(optimizer_events)
    cpu_ops = union_of([o for o in threads.ops_on(main_keys) if not o.name.startswith("ProfilerStep#")])
    host = {
        "sync": union_of(rt_sync),
        "blocking_copy": union_of(rt_copy),
        "runtime": union_of(rt_other),
        "data_loading": data_loading,
        "optimizer": optimizer,
        "cpu_ops": cpu_ops,
    }
    host["runtime_all"] = host["sync"].union(host["blocking_copy"]).union(host["runtime"])

    # breakdowns
    def on_main_device(sets: dict[int, Intervals]) -> Intervals:
        return sets.get(main_device, none) if main_device is not None else none

    breakdown = _priority_split(
        windows,
        [
            ("kernel", on_main_device(kern_by_dev)),
            ("communication", on_main_device(comm_by_dev)),
            ("memcpy", on_main_device(memcpy_by_dev)),
            ("memset", on_main_device(memset_by_dev)),
            ("runtime", host["runtime_all"]),
            ("data_loading", data_loading),
            ("cpu_exec", cpu_ops),
        ],
        rest="other",
    )
    idle = _priority_split(
        windows,
        [
            ("_gpu_busy", on_main_device(gpu_by_dev)),
            ("sync", host["sync"]),
            ("blocking_copy", host["blocking_copy"]),
            ("runtime", host["runtime"]),
            ("data_loading", data_loading),
            ("optimizer", optimizer),
        ],
        rest="cpu_other",
    )
    for d in idle:
        d.pop("_gpu_busy")
    if main_device is None:
        # No GPU activity: "idle" is meaningless; keep zeros rather than a fake split.
        idle = [{k: 0.0 for k in IDLE_KEYS} for _ in windows]

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
        data_loading_per_step=data_loading.per_window(windows),
        dataloader_events=dl_events,
        dataloader_single_process=single,
        launch_by_corr=launch_by_corr,
        op_by_ext=op_by_ext,
        syncs=[],
        copies=[],
        host_intervals=host,
        stacks=stacks,
        threads=threads,
    )
    for c in copy_events:
        c.step = metrics.step_of(c.gpu.ts)
    metrics.copies = copy_events
    metrics.kernel_busy = on_main_device(kern_by_dev).union(on_main_device(comm_by_dev))
    metrics.op_stats = _op_stats(trace, threads)
    metrics.syncs = _sync_points(metrics, main_runtime, blocking_copy_calls)
    metrics.kernel_stats = _kernel_stats(trace)
    return metrics


def union_of(events: Sequence[Event]) -> Intervals:
    """The time covered by ``events`` (in any order)."""
    n = len(events)
    if n == 0:
        return Intervals.empty()
    return Intervals.from_spans(np.fromiter(map(ts_of, events), np.float64, n), np.fromiter(map(dur_of, events), np.float64, n))


def _device_sets(events: list[Event], mask: np.ndarray | None = None) -> dict[int, Intervals]:
    """Per device, the time covered by ``events`` (sorted by start), optionally only where ``mask``."""
    n = len(events)
    if n == 0:
        return {}
    ts = np.fromiter(map(ts_of, events), np.float64, n)
    dur = np.fromiter(map(dur_of, events), np.float64, n)
    dev = np.fromiter(map(device_of, events), np.int64, n)
    if mask is not None:
        ts, dur, dev = ts[mask], dur[mask], dev[mask]
    out = {}
    for d in np.unique(dev).tolist():
        sel = dev == d
        out[d] = Intervals.from_spans(ts[sel], dur[sel], is_sorted=True)
    return out


def communication_names(kernels: list[Event]) -> set[str]:
    """The distinct names among ``kernels`` that are collectives (each name classified once)."""
    return {name for name in set(map(name_of, kernels)) if is_communication_kernel(name)}


def _kernel_sets(kernels: list[Event]) -> tuple[dict[int, Intervals], dict[int, Intervals]]:
    """Per device, the time covered by compute kernels and by communication (collective) kernels."""
    names = communication_names(kernels)
    if not names:
        return _device_sets(kernels), {}
    comm = np.fromiter((k.name in names for k in kernels), bool, len(kernels))
    return _device_sets(kernels, ~comm), _device_sets(kernels, comm)


@dataclass
class ThreadIndex:
    """Host operators and runtime calls grouped by host thread ``(pid, tid)``, each group in time order.

    ``*_starts`` hold the start times of each group, for bisecting a moment to
    the events around it. ``parents(key)[i]`` is the index of the operator
    that directly encloses operator ``i`` on its thread (-1 at top level).
    """

    ops: dict[HostThread, list[Event]]
    op_starts: dict[HostThread, list[float]]
    op_parent: dict[HostThread, list[int]]
    runtime: dict[HostThread, list[Event]]
    runtime_starts: dict[HostThread, list[float]]

    @classmethod
    def build(cls, trace: Trace) -> "ThreadIndex":
        ops = _group_by_thread(trace.ops)
        runtime = _group_by_thread(trace.runtime)
        return cls(
            ops=ops,
            op_starts={k: list(map(ts_of, v)) for k, v in ops.items()},
            op_parent={},  # filled on demand by parents()
            runtime=runtime,
            runtime_starts={k: list(map(ts_of, v)) for k, v in runtime.items()},
        )

    def parents(self, key: HostThread) -> list[int]:
        """``op_parent[key]``, computed on first use (only threads with sync points need it)."""
        got = self.op_parent.get(key)
        if got is None:
            got = self.op_parent[key] = _nesting(self.ops.get(key, []))
        return got

    def runtime_on(self, keys: frozenset[HostThread]) -> list[Event]:
        return _merged_in_time([self.runtime[k] for k in keys if k in self.runtime])

    def ops_on(self, keys: frozenset[HostThread]) -> list[Event]:
        return _merged_in_time([self.ops[k] for k in keys if k in self.ops])


def _nesting(ops: list[Event]) -> list[int]:
    """Index of the directly enclosing op of each op (ops of one thread, in time order)."""
    parents = [-1] * len(ops)
    stack: list[tuple[float, int]] = []
    for i, o in enumerate(ops):
        while stack and stack[-1][0] <= o.ts:
            stack.pop()
        if stack:
            parents[i] = stack[-1][1]
        stack.append((o.ts + o.dur, i))
    return parents


def _group_by_thread(events: list[Event]) -> dict[HostThread, list[Event]]:
    by: defaultdict[HostThread, list[Event]] = defaultdict(list)
    for e in events:
        by[(e.pid, e.tid)].append(e)
    return dict(by)


def _merged_in_time(groups: list[list[Event]]) -> list[Event]:
    if len(groups) == 1:
        return groups[0]
    return sorted((e for g in groups for e in g), key=ts_of)


def thread_keys(t: HostThread | None) -> frozenset[HostThread]:
    """The spellings of one host thread's (pid, tid): 2021 traces mix int and str tids."""
    if t is None:
        return frozenset()
    keys = {t, (str(t[0]), str(t[1]))}
    for a in (t[0], str(t[0])):
        for b in (t[1], str(t[1])):
            keys.add((a, b))
    try:
        keys.add((int(t[0]), int(t[1])))
        keys.add((t[0], int(t[1])))
        keys.add((int(t[0]), t[1]))
    except (TypeError, ValueError):
        pass
    return frozenset(keys)


def _step_markers(trace: Trace) -> list[Event]:
    """The ``ProfilerStep#N`` ranges: user annotations, or operators in older traces."""
    out: list[Event] = []
    for events in (trace.annotations, trace.ops):
        names = {n for n in set(map(name_of, events)) if step_number(n) is not None}  # per distinct name, once
        if names:
            out.extend(e for e in events if e.name in names)
    return out


def _main_thread(trace: Trace, markers: list[Event]) -> HostThread | None:
    step_threads: dict[HostThread, int] = defaultdict(int)
    for e in markers:
        step_threads[(e.pid, e.tid)] += 1
    if step_threads:
        return max(step_threads, key=lambda k: step_threads[k])
    op_time: dict[HostThread, float] = defaultdict(float)
    for o in trace.ops:
        op_time[(o.pid, o.tid)] += o.dur
    if not op_time:
        for r in trace.runtime:
            op_time[(r.pid, r.tid)] += r.dur
    if not op_time:
        return None
    return max(op_time, key=lambda k: op_time[k])


def _steps(
    trace: Trace, main: HostThread | None, markers: list[Event], launch_by_corr: dict[int, Event]
) -> tuple[list[Step], bool, Interval | None]:
    main_keys = thread_keys(main)
    marks = sorted(
        (e.ts, e.end, step_number(e.name)) for e in markers if main is None or (e.pid, e.tid) in main_keys
    )
    # A ProfilerStep can appear both as user_annotation and (older torch) as an op: dedupe.
    dedup: list[tuple[float, float, int]] = []
    for m in marks:
        if dedup and dedup[-1][2] == m[2] and abs(dedup[-1][0] - m[0]) < 1.0:
            continue
        dedup.append(m)  # type: ignore[arg-type]
    if not dedup:
        lo, hi = _extent(trace)
        if hi <= lo:
            return [], False, None
        first = _first_gpu_work(trace, launch_by_corr)
        lead_in = None
        if first is not None and lo < first < hi:
            lead_in = (lo, first)
            lo = first
        return [Step(index=0, id=0, start=lo, end=hi, cpu_end=hi)], False, lead_in

    gpu_end = _GpuEndByLaunch(trace, launch_by_corr)
    steps = []
    for i, (s, e, n) in enumerate(dedup):
        if i + 1 < len(dedup):
            nxt = dedup[i + 1][0]
            # contiguous steps tile exactly; before a gap, GPU work may extend the step up to the next start
            end = nxt if nxt - e < 1.0 else min(max(e, gpu_end.latest(s, e)), nxt)
        else:
            end = max(e, gpu_end.latest(s, e))  # the last step lasts until its GPU work is done
        steps.append(Step(index=i, id=n, start=s, end=end, cpu_end=e))
    return steps, True, None


def _first_gpu_work(trace: Trace, launch_by_corr: dict[int, Event]) -> float | None:
    """Start of the first GPU work: its GPU activity or, earlier, the host call that launched it (None without GPU work)."""
    first = None
    for g in trace.gpu_events():
        t = g.ts
        r = launch_by_corr.get(g.corr) if g.corr >= 0 else None
        if r is not None and r.ts < t:
            t = r.ts
        if first is None or t < first:
            first = t
    return first


class _GpuEndByLaunch:
    """When the GPU work launched in a host time range ends (built on first use)."""

    def __init__(self, trace: Trace, launch_by_corr: dict[int, Event]) -> None:
        self._trace = trace
        self._launch_by_corr = launch_by_corr
        self._launch: np.ndarray | None = None
        self._end: np.ndarray | None = None

    def latest(self, lo: float, hi: float) -> float:
        """The latest end of GPU work launched at ``lo <= t <= hi`` (-inf if none)."""
        if self._launch is None:
            pairs = []
            for g in self._trace.gpu_events():
                r = self._launch_by_corr.get(g.corr)
                if r is not None:
                    pairs.append((r.ts, g.ts + g.dur))
            pairs.sort()
            self._launch = np.array([p[0] for p in pairs], dtype=np.float64)
            self._end = np.array([p[1] for p in pairs], dtype=np.float64)
        i = int(np.searchsorted(self._launch, lo, side="left"))
        j = int(np.searchsorted(self._launch, hi, side="right"))
        return float(self._end[i:j].max()) if j > i else float("-inf")  # type: ignore[index]


def _extent(trace: Trace) -> tuple[float, float]:
    lo, hi = float("inf"), float("-inf")
    for events in trace.lists().values():
        if events:
            lo = min(lo, events[0].ts)
            hi = max(hi, max(e.end for e in events))
    return lo, hi


def _priority_split(windows: list[Interval], layers: list[tuple[str, Intervals]], rest: str) -> list[dict[str, float]]:
    """Per window, the time each layer covers that no earlier layer covered; ``rest`` is what none covers."""
    split = first_cover_per_window(windows, [ivs for _, ivs in layers]).tolist()
    names = [name for name, _ in layers] + [rest]
    return [dict(zip(names, row)) for row in split]


def _copies(trace: Trace, launch_by_corr: dict[int, Event], threads: ThreadIndex) -> list[CopyEvent]:
    """Pair GPU copies with their host calls and decide which ones blocked the host."""
    out = []
    for g in trace.memcpys:
        launch = launch_by_corr.get(g.corr)
        blocking = False
        if launch is not None:
            if launch.end >= g.end - 1.0:
                blocking = True  # host call returned only after the copy ended
            else:
                sync = next_sync_call(threads, launch)
                blocking = sync is not None and sync.end >= g.end - 1.0
        out.append(CopyEvent(gpu=g, launch=launch, kind=copy_kind(g), blocking=blocking, step=None))
    return out


def next_sync_call(threads: ThreadIndex, call: Event) -> Event | None:
    """The stream/device synchronisation that follows runtime ``call`` on its thread
    before any other GPU work is queued there (looking at most 8 calls ahead)."""
    key = (call.pid, call.tid)
    seq = threads.runtime.get(key)
    if not seq:
        return None
    i = bisect_right(threads.runtime_starts[key], call.ts)
    for r in seq[i : i + 8]:
        rc = classify_runtime(r.name)
        if rc is RuntimeClass.SYNC:
            return r
        if rc is RuntimeClass.LAUNCH or rc is RuntimeClass.MEMCPY or rc is RuntimeClass.MEMSET:
            return None
    return None


def _enclosing_ops(threads: ThreadIndex, ev: Event, direct: Event | None) -> list[Event]:
    """The operators on ``ev``'s thread whose range contains ``ev``, outermost first (step markers excluded)."""
    key = (ev.pid, ev.tid)
    ops = threads.ops.get(key)
    if not ops:
        return [direct] if direct is not None else []
    parent = threads.parents(key)
    i = bisect_right(threads.op_starts[key], ev.ts) - 1
    ts, end = ev.ts, ev.end
    chain = []
    # Operators nest on a thread, so those open at ev.ts are the last one started
    # before it and that one's ancestors: walk up the parent links.
    while i >= 0:
        o = ops[i]
        if o.ts <= ts and o.end >= end and step_number(o.name) is None:
            chain.append(o)
        i = parent[i]
    chain.reverse()  # outermost first
    return chain


def _sync_points(m: TraceMetrics, main_runtime: list[Event], blocking_copy_calls: set[int]) -> list[SyncPoint]:
    copy_by_launch = {id(c.launch): c for c in m.copies if c.launch is not None}
    out = []
    for r in main_runtime:
        rc = classify_runtime(r.name)
        if rc is RuntimeClass.SYNC:
            pass
        elif id(r) in blocking_copy_calls and copy_by_launch[id(r)].kind.direction == "DtoH":
            pass
        else:
            continue
        chain = _enclosing_ops(m.threads, r, m.op_by_ext.get(r.ext))
        cause = None
        for o in reversed(chain):  # innermost known sync op names the cause
            cause = SYNC_OPS.get(o.name)
            if cause:
                break
        if cause is None:
            names = [o.name for o in chain]
            if any(n in ("aten::to", "aten::_to_copy", "aten::copy_", "aten::cpu") for n in names):
                cause = ".cpu() / .to('cpu')" if _dtoh_near(r, m) else "a blocking copy (.to(device))"
            elif chain:
                cause = chain[0].name
            elif "Device" in r.name:
                cause = "torch.cuda.synchronize()"
            else:
                cause = r.name
        loc = m.stacks.location(r.pid, r.tid, r.ts, op=chain[0] if chain else None)
        out.append(SyncPoint(runtime=r, ops=chain, cause=cause, location=loc, step=m.step_of(r.ts)))
    return out


def _dtoh_near(r: Event, m: TraceMetrics) -> bool:
    """A device-to-host copy was launched within 5 ms of ``r``."""
    starts = m._dtoh_launch_starts
    i = bisect_left(starts, r.ts - 5000)
    return i < len(starts) and starts[i] < r.ts + 5000


def _kernel_stats(trace: Trace) -> list[KernelStat]:
    agg: dict[str, list[float]] = {}
    total = 0.0
    for k in trace.kernels:
        a = agg.get(k.name)
        if a is None:
            agg[k.name] = [1, k.dur]
        else:
            a[0] += 1
            a[1] += k.dur
        total += k.dur
    stats = [
        KernelStat(name=n, count=int(c), total_us=t, mean_us=t / c, share_of_gpu=(t / total if total else 0.0))
        for n, (c, t) in agg.items()
    ]
    stats.sort(key=lambda s: -s.total_us)
    return stats


def _op_stats(trace: Trace, threads: ThreadIndex) -> list[OpStat]:
    """Per operator name: count, total and self host time, and GPU time of the work it launched.

    Self time = the op's duration minus that of the ops nested directly in it
    (on its thread). GPU self / total time: see **GPU time of an operator** in
    the module docstring. ``ProfilerStep#N`` ranges are not operators.
    """
    # name -> [count, total, self]; step markers map to None
    agg: dict[str, list[float] | None] = {n: None for n in set(map(name_of, trace.ops)) if n.startswith("ProfilerStep#")}
    for ops in threads.ops.values():
        stack: list[tuple[float, list[float] | None]] = []  # (end, stats) of the ops open at this point
        pop, push = stack.pop, stack.append
        for o in ops:
            ts = o.ts
            dur = o.dur
            while stack and stack[-1][0] <= ts:
                pop()
            name = o.name
            a = agg.get(name, _NEW)
            if a is None:  # a step marker: open, so that its children do not count as nested in anything
                push((ts + dur, None))
                continue
            if a is _NEW:
                a = agg[name] = [0, 0.0, dur]
            else:
                a[2] += dur  # type: ignore[index]
            a[0] += 1  # type: ignore[index]
            a[1] += dur  # type: ignore[index]
            end = ts + dur
            if stack:
                top_end, top = stack[-1]
                if end <= top_end and top is not None:
                    top[2] -= dur  # the parent's self time excludes this child
            push((end, a))  # type: ignore[arg-type]
    per_name = attribute(trace, threads.ops, threads.runtime).per_name()
    stats = [
        OpStat(name=n, count=int(v[0]), total_us=v[1], self_us=max(v[2], 0.0), gpu_us=g[0], gpu_total_us=g[1])
        for n, v in agg.items()
        for g in (per_name.get(n, (0.0, 0.0)),)
        if v is not None
    ]
    stats.sort(key=lambda s: (-s.gpu_us, -s.self_us))
    return stats


_NEW: list[float] = []  # sentinel: a name not seen yet


def _copy_stats(copies: list[CopyEvent]) -> list[CopyStat]:
    agg: dict[tuple[str, str], list[float]] = {}
    for c in copies:
        a = agg.setdefault((c.kind.direction, c.kind.host_memory), [0, 0, 0.0])
        a[0] += 1
        a[1] += c.gpu.nbytes
        a[2] += c.gpu.dur
    out = []
    for (direction, mem), (n, b, t) in sorted(agg.items(), key=lambda kv: -kv[1][2]):
        bw = (b / t / 1e3) if t > 0 and b > 0 else None  # bytes/µs -> GB/s
        out.append(CopyStat(direction=direction, memory=mem, count=int(n), bytes=int(b), total_us=t, bandwidth_gbps=bw))
    return out


def _sync_stats(syncs: list[SyncPoint]) -> list[SyncStat]:
    agg: dict[tuple[str, str, str | None], list[float]] = {}
    for s in syncs:
        key = (s.cause, s.runtime.name, str(s.location) if s.location else None)
        a = agg.setdefault(key, [0, 0.0])
        a[0] += 1
        a[1] += s.runtime.dur
    out = [
        SyncStat(cause=c, runtime=r, count=int(n), total_us=t, location=loc)
        for (c, r, loc), (n, t) in agg.items()
    ]
    out.sort(key=lambda s: -s.total_us)
    return out


def data_loading_share(loading: float, step_time: float) -> float | None:
    """The data-loading share: ``loading`` (time waiting in ``DataLoader.__next__``, any unit) over
    ``step_time`` (the steps it falls in, same unit); at most 1, None without step time.

    The one definition (see the module docstring) behind ``TraceMetrics.data_loading_share``
    (GP102/GP103), the capture's GP601, its summary and report figure and its TensorBoard scalar.
    """
    if step_time <= 0:
        return None
    return min(loading / step_time, 1.0)

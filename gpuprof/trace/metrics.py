"""Metrics of one trace, each defined once, here, in words.

Definitions (all times in µs, as in the trace):

**Main thread**: the host thread that records the ``ProfilerStep#N``
annotations; without them, the host thread with the most operator time.

**Step**: one ``ProfilerStep#N`` range of the main thread. Steps tile the
timeline: step *i* runs from its own start to the next step's start, or, for
the last step (and before a gap), to the later of its host end and the end of
the last GPU activity it launched. Without ``ProfilerStep#`` events the whole
trace is one step (id 0). Duplicate step numbers (two profiling spans in one
file) are kept as separate steps, in time order.

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

**Data-loading share**: data-loading time (union of DataLoader ranges on the
main thread) / step time.

**Blocking copy**: a host↔device copy whose host call returned only after
the GPU copy ended, or that is followed on the same thread by a stream/device
synchronisation before any other GPU work is launched.

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
from typing import Iterable, Union

from gpuprof.findings import SourceLocation
from gpuprof.report import CopyStat, KernelStat, OpStat, SyncStat, TraceSummary
from gpuprof.trace import intervals as iv
from gpuprof.trace.model import Event, Trace
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
    "CopyEvent",
    "TraceMetrics",
    "compute_metrics",
    "is_communication_kernel",
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
    windows: list[iv.Interval]
    has_step_markers: bool
    devices_active: list[int]
    main_device: int | None
    gpu_busy: dict[int, list[iv.Interval]]
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
    host_intervals: dict[str, list[iv.Interval]]
    stacks: StackIndex
    kernel_busy: list[iv.Interval] = field(default_factory=list)  # union of all kernels on the main device
    kernel_stats: list[KernelStat] = field(default_factory=list)
    op_stats: list[OpStat] = field(default_factory=list)

    # -- derived numbers -------------------------------------------------------
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
        t = self.total_time
        return sum(self.data_loading_per_step) / t if t > 0 else 0.0

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
    main = _main_thread(trace)
    steps, has_markers = _steps(trace, main)
    windows = [(s.start, s.end) for s in steps]

    # GPU side
    gpu_by_dev: dict[int, list[iv.Interval]] = defaultdict(list)
    comm_by_dev: dict[int, list[iv.Interval]] = defaultdict(list)
    kern_by_dev: dict[int, list[iv.Interval]] = defaultdict(list)
    for k in trace.kernels:
        (comm_by_dev if is_communication_kernel(k.name) else kern_by_dev)[k.device].append((k.ts, k.ts + k.dur))
    memcpy_by_dev: dict[int, list[iv.Interval]] = defaultdict(list)
    for c in trace.memcpys:
        memcpy_by_dev[c.device].append((c.ts, c.ts + c.dur))
    memset_by_dev: dict[int, list[iv.Interval]] = defaultdict(list)
    for m in trace.memsets:
        memset_by_dev[m.device].append((m.ts, m.ts + m.dur))
    devices = sorted(set(kern_by_dev) | set(comm_by_dev) | set(memcpy_by_dev) | set(memset_by_dev))
    kernels_m = {d: iv.merge(kern_by_dev.get(d, ())) for d in devices}
    comm_m = {d: iv.merge(comm_by_dev.get(d, ())) for d in devices}
    memcpy_m = {d: iv.merge(memcpy_by_dev.get(d, ())) for d in devices}
    memset_m = {d: iv.merge(memset_by_dev.get(d, ())) for d in devices}
    for d in devices:
        gpu_by_dev[d] = iv.union(iv.union(kernels_m[d], comm_m[d]), iv.union(memcpy_m[d], memset_m[d]))
    busy_per_step = {d: iv.per_window(gpu_by_dev[d], windows) for d in devices}
    main_device = max(devices, key=lambda d: sum(busy_per_step[d])) if devices else None

    # host side (main thread)
    launch_by_corr: dict[int, Event] = {}
    for r in trace.runtime:
        if r.corr >= 0:
            launch_by_corr[r.corr] = r
    op_by_ext: dict[int, Event] = {}
    for o in trace.ops:
        if o.ext >= 0:
            op_by_ext.setdefault(o.ext, o)

    main_keys = _thread_keys(main)

    def on_main(e: Event) -> bool:
        return (e.pid, e.tid) in main_keys

    main_runtime = [r for r in trace.runtime if on_main(r)]
    copy_events = _copies(trace, launch_by_corr, main_runtime)
    blocking_copy_calls = {id(c.launch) for c in copy_events if c.blocking and c.launch is not None}

    rt_sync, rt_copy, rt_other = [], [], []
    for r in main_runtime:
        rc = classify_runtime(r.name)
        if rc is RuntimeClass.SYNC:
            rt_sync.append((r.ts, r.end))
        elif id(r) in blocking_copy_calls or (rc is RuntimeClass.MEMCPY and not r.name.endswith("Async")):
            rt_copy.append((r.ts, r.end))
        else:
            rt_other.append((r.ts, r.end))
    host_dl_events: list[Event] = []
    optimizer_events: list[Event] = []
    for e in _host_named(trace):
        name = e.name
        if is_dataloader_name(name) and (main is None or on_main(e)):
            host_dl_events.append(e)
        elif name[:1] == "O" and is_optimizer_name(name) and on_main(e):  # cheap test first: every frame passes here
            optimizer_events.append(e)
    dl_events = [e for e in host_dl_events if e.name.startswith("enumerate(DataLoader)")] or host_dl_events
    single: bool | None = None
    if any(e.name.startswith("enumerate(DataLoader)") for e in dl_events):
        single = any(is_single_process_dataloader(e.name) for e in dl_events)
    data_loading = iv.merge_unsorted((e.ts, e.end) for e in host_dl_events)
    optimizer = iv.merge_unsorted((e.ts, e.ts + e.dur) for e in optimizer_events)
    cpu_ops = iv.merge(
        (o.ts, o.ts + o.dur)
        for o in trace.ops
        if (o.pid, o.tid) in main_keys and not o.name.startswith("ProfilerStep#")
    )
    runtime_all = iv.merge_unsorted(rt_sync + rt_copy + rt_other)
    host = {
        "sync": iv.merge(rt_sync),
        "blocking_copy": iv.merge(rt_copy),
        "runtime": iv.merge(rt_other),
        "runtime_all": runtime_all,
        "data_loading": data_loading,
        "optimizer": optimizer,
        "cpu_ops": cpu_ops,
    }

    # breakdowns
    breakdown = _priority_split(
        windows,
        [
            ("kernel", kernels_m.get(main_device, []) if main_device is not None else []),
            ("communication", comm_m.get(main_device, []) if main_device is not None else []),
            ("memcpy", memcpy_m.get(main_device, []) if main_device is not None else []),
            ("memset", memset_m.get(main_device, []) if main_device is not None else []),
            ("runtime", runtime_all),
            ("data_loading", data_loading),
            ("cpu_exec", cpu_ops),
        ],
        rest="other",
    )
    busy_main = gpu_by_dev.get(main_device, []) if main_device is not None else []
    idle_windows_split = _priority_split(
        windows,
        [
            ("_gpu_busy", busy_main),
            ("sync", host["sync"]),
            ("blocking_copy", host["blocking_copy"]),
            ("runtime", host["runtime"]),
            ("data_loading", data_loading),
            ("optimizer", optimizer),
        ],
        rest="cpu_other",
    )
    idle = []
    for d in idle_windows_split:
        d.pop("_gpu_busy")
        idle.append(d)
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
        devices_active=devices,
        main_device=main_device,
        gpu_busy=dict(gpu_by_dev),
        busy_per_step=busy_per_step,
        breakdown_per_step=breakdown,
        idle_per_step=idle,
        data_loading_per_step=iv.per_window(data_loading, windows),
        dataloader_events=dl_events,
        dataloader_single_process=single,
        launch_by_corr=launch_by_corr,
        op_by_ext=op_by_ext,
        syncs=[],
        copies=[],
        host_intervals=host,
        stacks=stacks,
    )
    for c in copy_events:
        c.step = metrics.step_of(c.gpu.ts)
    metrics.copies = copy_events
    if main_device is not None:
        metrics.kernel_busy = iv.union(kernels_m[main_device], comm_m[main_device])
    metrics.syncs = _sync_points(trace, metrics, main_runtime, blocking_copy_calls)
    metrics.kernel_stats = _kernel_stats(trace)
    metrics.op_stats = _op_stats(trace, launch_by_corr, op_by_ext)
    return metrics


def _thread_keys(t: HostThread | None) -> frozenset[HostThread]:
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


def _host_named(trace: Trace) -> Iterable[Event]:
    """Events whose names carry annotations: user annotations, ops (2021 dialect), Python frames."""
    yield from trace.annotations
    yield from trace.ops
    yield from trace.python


def _main_thread(trace: Trace) -> HostThread | None:
    step_threads: dict[HostThread, int] = defaultdict(int)
    for e in list(trace.annotations) + list(trace.ops):
        if step_number(e.name) is not None:
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


def _steps(trace: Trace, main: HostThread | None) -> tuple[list[Step], bool]:
    main_keys = _thread_keys(main)
    marks = []
    for e in list(trace.annotations) + list(trace.ops):
        n = step_number(e.name)
        if n is not None and (main is None or (e.pid, e.tid) in main_keys):
            marks.append((e.ts, e.end, n))
    marks.sort()
    # A ProfilerStep can appear both as user_annotation and (older torch) as an op: dedupe.
    dedup = []
    for m in marks:
        if dedup and dedup[-1][2] == m[2] and abs(dedup[-1][0] - m[0]) < 1.0:
            continue
        dedup.append(m)
    marks = dedup
    if not marks:
        lo, hi = _extent(trace)
        if hi <= lo:
            return [], False
        return [Step(index=0, id=0, start=lo, end=hi, cpu_end=hi)], False

    # GPU work launched inside a step's host window extends that step (last step only, or before a gap).
    gpu_end_by_launch: list[tuple[float, float]] = []
    corr_launch = {r.corr: r.ts for r in trace.runtime if r.corr >= 0}
    for g in trace.gpu_events():
        lt = corr_launch.get(g.corr)
        if lt is not None:
            gpu_end_by_launch.append((lt, g.end))
    gpu_end_by_launch.sort()
    launch_times = [x[0] for x in gpu_end_by_launch]

    steps = []
    for i, (s, e, n) in enumerate(marks):
        lo = bisect_left(launch_times, s)
        hi = bisect_right(launch_times, e)
        gpu_end = max((x[1] for x in gpu_end_by_launch[lo:hi]), default=e)
        end = max(e, gpu_end)
        if i + 1 < len(marks):
            nxt = marks[i + 1][0]
            # contiguous steps tile exactly; before a gap, GPU work may extend the step up to the next start
            end = nxt if nxt - e < 1.0 else min(end, nxt)
        steps.append(Step(index=i, id=n, start=s, end=end, cpu_end=e))
    return steps, True


def _extent(trace: Trace) -> tuple[float, float]:
    lo, hi = float("inf"), float("-inf")
    for events in trace.lists().values():
        if events:
            lo = min(lo, events[0].ts)
            hi = max(hi, max(e.end for e in events))
    return lo, hi


def _priority_split(
    windows: list[iv.Interval],
    layers: list[tuple[str, list[iv.Interval]]],
    rest: str,
) -> list[dict[str, float]]:
    """Per window, the time each layer covers that no earlier layer covered; ``rest`` is what none covers."""
    out = [dict() for _ in windows]  # type: list[dict[str, float]]
    cover: list[iv.Interval] = []
    covered_before = [0.0] * len(windows)
    for name, ivs in layers:
        cover = iv.union(cover, ivs)
        covered_now = iv.per_window(cover, windows)
        for w in range(len(windows)):
            out[w][name] = max(covered_now[w] - covered_before[w], 0.0)
        covered_before = covered_now
    for w, (lo, hi) in enumerate(windows):
        out[w][rest] = max((hi - lo) - covered_before[w], 0.0)
    return out


def _copies(trace: Trace, launch_by_corr: dict[int, Event], main_runtime: list[Event]) -> list[CopyEvent]:
    """Pair GPU copies with their host calls and decide which ones blocked the host."""
    rt_by_thread: dict[HostThread, list[Event]] = defaultdict(list)
    for r in trace.runtime:
        rt_by_thread[(r.pid, r.tid)].append(r)
    starts = {k: [r.ts for r in v] for k, v in rt_by_thread.items()}
    out = []
    for g in trace.memcpys:
        launch = launch_by_corr.get(g.corr)
        blocking = False
        if launch is not None:
            if launch.end >= g.end - 1.0:
                blocking = True  # host call returned only after the copy ended
            else:
                seq = rt_by_thread[(launch.pid, launch.tid)]
                i = bisect_right(starts[(launch.pid, launch.tid)], launch.ts)
                for r in seq[i : i + 8]:
                    rc = classify_runtime(r.name)
                    if rc is RuntimeClass.SYNC:
                        blocking = r.end >= g.end - 1.0
                        break
                    if rc in (RuntimeClass.LAUNCH, RuntimeClass.MEMCPY, RuntimeClass.MEMSET):
                        break
        out.append(CopyEvent(gpu=g, launch=launch, kind=g.extra, blocking=blocking, step=None))
    return out


def _enclosing_ops(trace_ops_by_thread: dict, starts_by_thread: dict, ev: Event, direct: Event | None) -> list[Event]:
    key = (ev.pid, ev.tid)
    ops = trace_ops_by_thread.get(key)
    if not ops:
        return [direct] if direct is not None else []
    starts = starts_by_thread[key]
    i = bisect_right(starts, ev.ts) - 1
    chain = []
    scanned = 0
    while i >= 0 and scanned < 3000:
        o = ops[i]
        if o.ts <= ev.ts and o.end >= ev.end and step_number(o.name) is None:
            chain.append(o)
        i -= 1
        scanned += 1
    chain.reverse()  # outermost first
    return chain


def _sync_points(
    trace: Trace, m: TraceMetrics, main_runtime: list[Event], blocking_copy_calls: set[int]
) -> list[SyncPoint]:
    ops_by_thread: dict[HostThread, list[Event]] = defaultdict(list)
    for o in trace.ops:
        ops_by_thread[(o.pid, o.tid)].append(o)
    starts = {k: [o.ts for o in v] for k, v in ops_by_thread.items()}
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
        chain = _enclosing_ops(ops_by_thread, starts, r, m.op_by_ext.get(r.ext))
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


def _op_stats(trace: Trace, launch_by_corr: dict[int, Event], op_by_ext: dict[int, Event]) -> list[OpStat]:
    """Per operator name: count, total and self host time, and GPU time of the work it launched.

    Self time = the op's duration minus that of the ops nested directly in it
    (on its thread). GPU time = kernels, copies and memsets whose launch call
    carries the op's External id.
    """
    # name -> [count, total, self, gpu]; one pass per thread with a stack of open ops
    agg: dict[str, list[float]] = {}
    stacks: dict[HostThread, list[tuple[float, list[float]]]] = defaultdict(list)
    for o in trace.ops:
        name = o.name
        if name.startswith("ProfilerStep#"):
            continue
        a = agg.get(name)
        if a is None:
            a = agg[name] = [0, 0.0, 0.0, 0.0]
        ts, dur = o.ts, o.dur
        end = ts + dur
        a[0] += 1
        a[1] += dur
        a[2] += dur
        stack = stacks[(o.pid, o.tid)]
        while stack and stack[-1][0] <= ts:
            stack.pop()
        if stack and end <= stack[-1][0]:
            stack[-1][1][2] -= dur  # the parent's self time excludes this child
        stack.append((end, a))
    for g in trace.gpu_events():
        launch = launch_by_corr.get(g.corr)
        op = op_by_ext.get(launch.ext if launch is not None else g.ext)
        if op is not None:
            a = agg.get(op.name)
            if a is not None:
                a[3] += g.dur
    stats = [
        OpStat(name=n, count=int(c), total_us=t, self_us=max(s_, 0.0), gpu_us=g) for n, (c, t, s_, g) in agg.items()
    ]
    stats.sort(key=lambda s: (-s.gpu_us, -s.self_us))
    return stats


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

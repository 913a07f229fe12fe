"""One rank's small summary: what the cross-rank merge needs of its trace.

Definitions (per-step means, µs, over the trace's step windows; see
``gpuprof.trace.metrics`` for steps, main thread and main device):

**Communication**: the union of the rank's collectives. On a GPU trace, the
NCCL/RCCL kernels of the main device; on a CPU-only trace (gloo), the
``gloo:*`` annotations, which span each collective on gloo's worker thread,
waiting for the other ranks included.

**Compute**: GPU traces: the union of the main device's other kernels. CPU
traces: the union of the main thread's operators.

**Exposed communication**: communication during which no compute runs (GPU:
no compute kernel; CPU: the main thread in no operator and not loading data).
Communication hidden behind compute costs nothing; exposed communication
lengthens the step.

**Data loading**: the DataLoader's time on the main thread (as in the trace
metrics).

**Host**: GPU traces only: GPU idle while the main thread runs operators,
runtime calls or the optimizer (the GPU waits for the host).

**Sync**: GPU traces only: GPU idle while the main thread is blocked in a
synchronising call or a blocking copy.

**Unrecorded**: time the main thread shows nothing (no operator, no data
loading) while no collective is in flight and, on GPU traces, the GPU is
idle: a ``time.sleep``, Python work outside any operator, a blocking call
the profiler does not see.

**Collective instances**: every collective in a step window, in start order,
with its type, duration and message size when the trace says it (see
:mod:`gpuprof.trace.collectives`). The merge matches the *i*-th
collective of a type across ranks. On GPU traces a NCCL/RCCL kernel's type
and size come from the host record that launched it (the runtime call with
the kernel's correlation id, inside a ``record_param_comms`` operator, a
``nccl:*``/``rccl:*`` annotation or a ``c10d::*`` operator): NCCL runs
all-to-all as ``SendRecv`` kernels, and only the host record says which
collective it was and how many bytes it moved.

**Arrival gap** of an instance: the time on the rank between the end of its
previous collective (a point every rank leaves at about the same moment, as
a collective ends together on all its ranks) and this instance's start (the
rank's arrival), split by phase (:data:`PHASE_KEYS`): ``optimizer`` (the
host in ``Optimizer.step``), ``compute`` (GPU: compute kernels running;
CPU: operators), then, with the device idle, ``data_loading``, ``sync``,
``host`` (operators and launches) and ``unrecorded``. The first instance of
the recorded steps has no previous collective in the trace: its gap starts
at its step's start and says so (``inst_from_step``), since what happened
before the recording is unknown. **Exposed** per instance: its time with no
compute running (the merge keeps at most the transfer part of it).

**Overlap what-if**: GP702's replay on this rank's graph
(:func:`gpuprof.trace.critpath.overlap.overlap_saving`).

**Unused-parameter search**: ``torch.distributed.ddp.reducer::search_unused_parameters``
operators (DDP with ``find_unused_parameters=True``): their count and time.

**DDP rounds**: ``DistributedDataParallel.forward`` annotations per step
(micro-batches), and how many of the gaps they open (forward to next forward,
the last to the end of the step) contain an all-reduce (gradient
synchronisation rounds); optimizer steps are ``Optimizer.step#`` ranges.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from pathlib import Path
from typing import Sequence

import msgspec

from gpuprof.trace.collectives import COLLECTIVE_TYPES, collective_type, message_bytes
from gpuprof.trace.columns import named
from gpuprof.trace.critpath.hops import collective_hops
from gpuprof.trace.critpath.overlap import overlap_saving
from gpuprof.trace.gpuwork import is_communication_kernel, union_of
from gpuprof.trace.intervals import Intervals
from gpuprof.trace.metrics import TraceMetrics
from gpuprof.trace.model import CommArgs, Event, Trace
from gpuprof.trace.vocab import Kind

__all__ = ["RankSummary", "RankSeries", "instances_by_type", "CollectiveStat", "summarize", "rank_from_path", "SUMMARY_VERSION",
           "PHASE_KEYS"]

SUMMARY_VERSION = 1

# the parts of an arrival gap (see the module docstring), in the order reports list them
PHASE_KEYS = ("data_loading", "compute", "optimizer", "host", "sync", "unrecorded")
# a collective starting within this many µs after the previous step's end continues it (no unrecorded time between)
_ADJACENT_US = 1000.0

DDP_FORWARD = "DistributedDataParallel.forward"
# what DDP records when find_unused_parameters=True: a traversal of the autograd graph every forward
UNUSED_SEARCH = "torch.distributed.ddp.reducer::search_unused_parameters"


class CollectiveStat(msgspec.Struct, frozen=True):
    """Collectives of one type on one rank, over the trace's steps."""

    type: str
    count: int
    total_us: float
    bytes: int  # summed over the instances whose size is known
    sized: int  # instances whose size is known


class RankSeries(msgspec.Struct, frozen=True):
    """One rank's per-step series from the watch (every step of the job, in buckets of ``bucket`` steps, each
    point the bucket's median), gathered with the summary so the straggler verdict reads every common step
    (:mod:`gpuprof.distributed.series`). Empty lists: not measured on that rank (no DataLoader, no CUDA)."""

    bucket: int
    first_step: list[int]
    step_us: list[float]
    data_wait_us: list[float] = msgspec.field(default_factory=list)
    memory_mib: list[float] = msgspec.field(default_factory=list)  # CUDA allocated where measured


class RankSummary(msgspec.Struct, frozen=True):
    """What the cross-rank merge reads of one rank (see the module docstring for every field)."""

    version: int
    path: str
    rank: int | None
    world_size: int | None
    backend: str  # "nccl", "rccl", "gloo", or "" when unknown
    device: str  # the main device's name, "cpu" for CPU-only traces
    num_steps: int
    step_us: float  # median
    step_mean_us: float
    compute_us: float
    comm_us: float
    exposed_comm_us: float
    data_loading_us: float
    host_us: float
    sync_us: float
    unrecorded_us: float
    collectives: list[CollectiveStat]
    # instances in start order: type index into COLLECTIVE_TYPES, duration µs, bytes (-1 unknown), group size
    inst_type: list[int]
    inst_dur: list[float]
    inst_bytes: list[int]
    inst_group: list[int]
    inst_step: list[int]  # the step (index in the trace's steps) each instance starts in
    inst_start: list[float]  # start time, µs on this rank's clock (only compared within the rank)
    ddp_forwards: int  # DistributedDataParallel.forward calls in the steps
    ddp_sync_rounds: int  # of those, how many were followed by an all-reduce
    optimizer_steps: int
    unused_search_us: float = 0.0  # DDP's search for unused parameters (find_unused_parameters=True), per step
    unused_searches: int = 0  # how many searches in the steps
    # per instance (empty in summaries of older gpuprof versions): the arrival gap's µs per PHASE_KEYS,
    # whether that gap starts at the step's start (no earlier collective recorded), and the exposed time
    inst_gap: list[list[float]] = msgspec.field(default_factory=list)
    inst_from_step: list[bool] = msgspec.field(default_factory=list)
    inst_exposed: list[float] = msgspec.field(default_factory=list)
    # the critical path cut at the collectives (the job's path): gpuprof.trace.critpath.hops.Hops; empty in older summaries
    inst_path_name: list[int] = msgspec.field(default_factory=list)
    path_names: list[str] = msgspec.field(default_factory=list)
    path_step_start: list[float] = msgspec.field(default_factory=list)
    path_step_end: list[float] = msgspec.field(default_factory=list)
    path_seg_end: list[int] = msgspec.field(default_factory=list)
    path_seg_off: list[int] = msgspec.field(default_factory=list)
    path_seg_early: list[int] = msgspec.field(default_factory=list)
    path_piece_kind: list[int] = msgspec.field(default_factory=list)
    path_piece_name: list[int] = msgspec.field(default_factory=list)
    path_piece_us: list[float] = msgspec.field(default_factory=list)
    # GP702's what-if: µs per step saved with the collectives overlapped; None: not replayed (or older gpuprof)
    overlap_what_if_us: float | None = None
    series: RankSeries | None = None  # the watch's whole-job series, added at the gather (None: not watched)


_RANK_RE = re.compile(r"(?<![a-z])rank[-_]?(\d+)", re.IGNORECASE)  # not "cranky5"


def rank_from_path(path: str) -> int | None:
    """The rank a file name gives (``rank3.123.pt.trace.json``, ``sampled_rank-1.json.gz``, ``.../rank3/...``)."""
    for part in reversed(Path(path).parts):
        m = _RANK_RE.search(part)
        if m:
            return int(m.group(1))
    return None


def summarize(metrics: TraceMetrics, backend: str = "") -> RankSummary:
    """The rank summary of one analysed trace."""
    t = metrics.trace
    windows = metrics.windows
    n = max(len(windows), 1)
    win = Intervals.from_pairs(windows)
    instances, comm = _instances(metrics)
    dl = metrics.host_intervals["data_loading"]
    opt = metrics.host_intervals["optimizer"]
    if metrics.main_device is not None:
        dev = metrics.main_device
        compute = union_of(metrics.step_kernels)
        busy = metrics.gpu_busy.get(dev, Intervals.empty())
        exposed = comm.subtract(compute)
        idle = win.subtract(busy)
        host_all = metrics.host_intervals["cpu_ops"].union(metrics.host_intervals["runtime"]).union(
            metrics.host_intervals["optimizer"])
        sync_all = metrics.host_intervals["sync"].union(metrics.host_intervals["blocking_copy"])
        sync = idle.intersect(sync_all)
        dl_idle = idle.intersect(dl).subtract(sync_all)
        host = idle.intersect(host_all).subtract(sync_all).subtract(dl)
        unrecorded = idle.subtract(host_all).subtract(sync_all).subtract(dl).subtract(comm)
        data_loading = dl_idle
        device = next((d.name for d in t.devices if d.id == dev and d.name), "") or f"GPU {dev}"
        # the arrival-gap phases: a partition of the device's time (see the module docstring)
        rest = idle.subtract(opt).subtract(comm)
        phases = {"data_loading": rest.intersect(dl), "compute": compute.subtract(opt), "optimizer": opt,
                  "sync": rest.intersect(sync_all).subtract(dl),
                  "host": rest.intersect(host_all).subtract(sync_all).subtract(dl),
                  "unrecorded": unrecorded.subtract(opt)}
    else:
        ops = metrics.host_intervals["cpu_ops"]
        compute = ops.subtract(dl)
        exposed = comm.subtract(ops).subtract(dl)
        host = sync = Intervals.empty()
        unrecorded = win.subtract(ops).subtract(dl).subtract(comm)
        data_loading = dl
        device = "cpu"
        phases = {"data_loading": dl, "compute": compute.subtract(opt), "optimizer": opt, "sync": Intervals.empty(),
                  "host": Intervals.empty(), "unrecorded": unrecorded.subtract(opt)}

    def mean(iv: Intervals) -> float:
        return float(sum(iv.per_window(windows))) / n if windows else 0.0

    stats: dict[str, list[float]] = {}
    for kind, _start, dur, nbytes, _group in instances:
        s = stats.setdefault(kind, [0, 0.0, 0, 0])
        s[0] += 1
        s[1] += dur
        if nbytes >= 0:
            s[2] += nbytes
            s[3] += 1
    gaps, from_step = _arrival_gaps(metrics, instances, phases)
    exposed_each = _exposed_each(instances, compute if metrics.main_device is not None
                                 else metrics.host_intervals["cpu_ops"].union(dl))
    fwd, rounds = _ddp_rounds(metrics, instances)
    searches = [o for o in named(t.ops, UNUSED_SEARCH.__eq__, t) if _in_steps(metrics, o.ts)]  # name asked once each
    inst_step = [metrics.step_of(i[1]) or 0 for i in instances]
    hops = collective_hops(metrics, [(i[1], i[2], k) for i, k in zip(instances, inst_step)])
    return RankSummary(
        version=SUMMARY_VERSION,
        path=t.path,
        rank=t.rank if t.rank is not None else rank_from_path(t.path),
        world_size=t.world_size,
        backend=backend or _backend(t),
        device=device,
        num_steps=len(metrics.steps),
        step_us=metrics.median_step_time,
        step_mean_us=metrics.mean_step_time,
        compute_us=mean(compute),
        comm_us=mean(comm),
        exposed_comm_us=mean(exposed),
        data_loading_us=mean(data_loading),
        host_us=mean(host),
        sync_us=mean(sync),
        unrecorded_us=mean(unrecorded),
        collectives=[CollectiveStat(k, int(v[0]), v[1], int(v[2]), int(v[3]))
                     for k, v in sorted(stats.items(), key=lambda kv: COLLECTIVE_TYPES.index(kv[0]))],
        inst_type=[COLLECTIVE_TYPES.index(i[0]) for i in instances],
        inst_dur=[i[2] for i in instances],
        inst_bytes=[i[3] for i in instances],
        inst_group=[i[4] for i in instances],
        inst_step=inst_step,
        inst_start=[i[1] for i in instances],
        ddp_forwards=fwd,
        ddp_sync_rounds=rounds,
        optimizer_steps=_count_in(metrics, [e for e in t.annotations if e.name.startswith("Optimizer.step#")]),
        unused_search_us=mean(union_of(searches).intersect(win)) if searches else 0.0,
        unused_searches=len(searches),
        inst_gap=gaps,
        inst_from_step=from_step,
        inst_exposed=exposed_each,
        inst_path_name=hops.inst_name, path_names=hops.names, path_step_start=hops.step_start, path_step_end=hops.step_end,
        path_seg_end=hops.seg_end, path_seg_off=hops.seg_off if hops.seg_end else [], path_seg_early=hops.seg_early,
        path_piece_kind=hops.piece_kind, path_piece_name=hops.piece_name, path_piece_us=hops.piece_us,
        overlap_what_if_us=overlap_saving(metrics, digits=3),
    )


def _arrival_gaps(metrics: TraceMetrics, instances: list[Instance],
                  phases: dict[str, Intervals]) -> tuple[list[list[float]], list[bool]]:
    """Per instance, its arrival gap's µs per :data:`PHASE_KEYS`, and whether the gap starts at its step's start."""
    if not instances:
        return [], []
    steps = metrics.steps
    spans: list[tuple[float, float]] = []
    from_step: list[bool] = []
    prev_end: float | None = None
    prev_step = -1
    for _kind, start, dur, _b, _g in instances:
        k = metrics.step_of(start)
        k = 0 if k is None else k
        # the previous collective is a point all ranks leave together, when it is in this step or in the
        # previous one with nothing unrecorded between them (steps of one recording window touch)
        joined = prev_end is not None and (
            prev_step == k or (prev_step == k - 1 and steps[k].start - steps[k - 1].end <= _ADJACENT_US))
        lo = prev_end if joined and prev_end is not None else steps[k].start
        spans.append((lo, max(start, lo)))
        from_step.append(not joined)
        end = start + dur
        if prev_end is None or end > prev_end or prev_step != k:
            prev_end = end
        prev_step = k
    cols = [phases[key].per_window(spans) for key in PHASE_KEYS]
    return [[round(c[i], 3) for c in cols] for i in range(len(spans))], from_step


def _exposed_each(instances: list[Instance], compute: Intervals) -> list[float]:
    """Per instance, its time with no compute running beside it (µs)."""
    spans = [(start, start + dur) for _k, start, dur, _b, _g in instances]
    covered = compute.per_window(spans) if spans else []
    return [round(max(e - s - c, 0.0), 3) for (s, e), c in zip(spans, covered)]


Instance = tuple[str, float, float, int, int]  # type, start, dur, bytes, group size


def _in_steps(metrics: TraceMetrics, ts: float) -> bool:
    return metrics.step_of(ts) is not None


def _instances(metrics: TraceMetrics) -> tuple[list[Instance], Intervals]:
    """The rank's collectives in step windows, in start order, and the union of their time."""
    t = metrics.trace
    args_of: dict[tuple[float, str], CommArgs] = {
        (e.ts, e.name): e.extra for e in t.comm_events if e.kind == Kind.KERNEL and isinstance(e.extra, CommArgs)
    }
    events: list[Event]
    dev = metrics.main_device
    records = _HostRecords(t) if dev is not None else None
    if dev is not None:
        events = [k for k in t.kernels if k.device == dev and is_communication_kernel(k.name)]
        # host-side records in order, per type: sizes for kernels whose own args do not say
        host_sizes: dict[str, list[CommArgs]] = {}
        for e in t.comm_events:
            if e.kind == Kind.CPU_OP and isinstance(e.extra, CommArgs) and e.extra.collective:
                host_sizes.setdefault(collective_type(e.name, e.extra.collective), []).append(e.extra)
    else:
        events = [e for e in t.comm_events if e.kind == Kind.USER_ANNOTATION and e.name.lower().startswith("gloo:")]
        host_sizes = {}
    events = [e for e in events if _in_steps(metrics, e.ts)]
    seen: dict[str, int] = {}
    out: list[Instance] = []
    counts: dict[str, int] = {}
    from_host: list[bool] = []
    for e in events:
        a = e.extra if isinstance(e.extra, CommArgs) else args_of.get((e.ts, e.name))
        kind = collective_type(e.name, a.collective if a else "")
        nbytes = message_bytes(a) if a else -1
        group = a.group_size if a else -1
        launch = metrics.launch_by_corr.get(e.corr) if records is not None and e.corr >= 0 else None
        found = records.at(launch) if records is not None and launch is not None else None
        if found is not None:
            host_kind, host_bytes, host_group = found
            if host_kind != "other" and (not (a and a.collective) or kind == "other"):
                kind = host_kind  # NCCL's SendRecv kernels run all-to-all: the host record says which
            nbytes = nbytes if nbytes >= 0 else host_bytes
            group = group if group > 0 else host_group
        from_host.append(found is not None)
        counts[kind] = counts.get(kind, 0) + 1
        out.append((kind, e.ts, e.dur, nbytes, group))
    # kernels no host record encloses: take the record_param_comms sizes when they pair one to one
    for i, (kind, ts, dur, nbytes, _group) in enumerate(out):
        if nbytes < 0 and not from_host[i] and kind in host_sizes and len(host_sizes[kind]) == counts[kind]:
            j = seen.get(kind, 0)
            seen[kind] = j + 1
            a = host_sizes[kind][j]
            out[i] = (kind, ts, dur, message_bytes(a), a.group_size)
    comm = union_of(events).intersect(Intervals.from_pairs(metrics.windows)) if events else Intervals.empty()
    return out, comm


class _HostRecords:
    """The host records of collectives per thread, to find the ones enclosing a kernel's launch call.

    ``record_param_comms`` operators (collective name, sizes), ``nccl:*``/``rccl:*``/``gloo:*``
    annotations (``Input Dims``: sizes on every backend) and ``c10d::*`` operators
    (``c10d::alltoall_base_``: the type only).
    """

    _DEPTH = 16  # enclosing records to look back through (nesting is shallow: c10d op > annotation > record)

    def __init__(self, t: Trace) -> None:
        per: dict[tuple[object, object], list[tuple[float, float, CommArgs | None, str]]] = {}
        for e in t.comm_events:
            if e.kind in (Kind.CPU_OP, Kind.USER_ANNOTATION) and isinstance(e.extra, CommArgs):
                per.setdefault((e.pid, e.tid), []).append((e.ts, e.ts + e.dur, e.extra, e.name))
        for o in t.ops:
            if o.name.startswith("c10d::"):
                per.setdefault((o.pid, o.tid), []).append((o.ts, o.ts + o.dur, None, o.name))
        self._per = {k: sorted(v, key=lambda r: r[0]) for k, v in per.items()}
        self._starts = {k: [r[0] for r in v] for k, v in self._per.items()}

    def at(self, launch: Event) -> tuple[str, int, int] | None:
        """(type, bytes or -1, group size or -1) of the records enclosing a launch call; None if none does."""
        key = (launch.pid, launch.tid)
        recs = self._per.get(key)
        if not recs:
            return None
        i = bisect_right(self._starts[key], launch.ts) - 1
        kind, nbytes, group, hit = "other", -1, -1, False
        for j in range(i, max(i - self._DEPTH, -1), -1):
            start, end, a, name = recs[j]
            if end < launch.ts:
                continue
            hit = True
            k = collective_type(name, a.collective if a else "")
            if kind == "other" and k != "other":
                kind = k
            if a is not None:
                if nbytes < 0:
                    nbytes = message_bytes(a)
                if group < 0 < a.group_size:
                    group = a.group_size
        return (kind, nbytes, group) if hit else None


def _count_in(metrics: TraceMetrics, events: Sequence[Event]) -> int:
    return sum(1 for e in events if _in_steps(metrics, e.ts))


def _ddp_rounds(metrics: TraceMetrics, instances: list[Instance]) -> tuple[int, int]:
    """(DDP forwards in the steps, how many were followed by an all-reduce before the next forward or step end)."""
    fwd = [e.ts for e in metrics.trace.annotations if e.name == DDP_FORWARD and _in_steps(metrics, e.ts)]
    if not fwd:
        return 0, 0
    ar = sorted(s for k, s, _d, _b, _g in instances if k == "all_reduce")
    rounds = 0
    for i, start in enumerate(fwd):
        step = metrics.step_of(start)
        end = metrics.steps[step].end if step is not None else start
        if i + 1 < len(fwd) and fwd[i + 1] < end:
            end = fwd[i + 1]
        if bisect_left(ar, start) < bisect_right(ar, end):
            rounds += 1
    return len(fwd), rounds


def _backend(t: Trace) -> str:
    """``distributedInfo.backend`` when the trace has it, else the prefix of its collective annotations."""
    if t.backend:
        return t.backend.lower()[:16]
    names = {e.name.split(":", 1)[0].lower() for e in t.comm_events if ":" in e.name[:8]}
    return next((b for b in ("nccl", "rccl", "gloo") if b in names), "")


def instances_by_type(sums: Sequence[RankSummary]) -> list[dict[int, list[int]]]:
    """Per summary, each collective type's instances in order: the *j*-th of a type matches across ranks."""
    import numpy as np  # a sort per rank with many collectives (a Python loop over millions costs seconds)

    index: list[dict[int, list[int]]] = []
    for s in sums:
        if len(s.inst_type) < 256:  # (numpy's calls cost more than the loop on a few)
            by_type: dict[int, list[int]] = {}
            for i, t in enumerate(s.inst_type):
                by_type.setdefault(t, []).append(i)
            index.append(by_type)
            continue
        types = np.asarray(s.inst_type, dtype=np.int64)
        order = np.argsort(types, kind="stable")
        cuts = np.flatnonzero(np.diff(types[order])) + 1
        index.append({int(types[part[0]]): part.tolist() for part in np.split(order, cuts) if len(part)})
    return index

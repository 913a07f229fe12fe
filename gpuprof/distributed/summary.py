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
collective of a type across ranks.

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
from gpuprof.trace.intervals import Intervals
from gpuprof.trace.metrics import TraceMetrics, is_communication_kernel, union_of
from gpuprof.trace.model import CommArgs, Event, Trace
from gpuprof.trace.vocab import Kind

__all__ = ["RankSummary", "CollectiveStat", "summarize", "rank_from_path", "SUMMARY_VERSION", "CAUSE_KEYS"]

SUMMARY_VERSION = 1

# the parts of a step that can make a rank slow, in the order reports list them
CAUSE_KEYS = ("compute", "data_loading", "host", "sync", "unrecorded")

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
    else:
        ops = metrics.host_intervals["cpu_ops"]
        compute = ops.subtract(dl)
        exposed = comm.subtract(ops).subtract(dl)
        host = sync = Intervals.empty()
        unrecorded = win.subtract(ops).subtract(dl).subtract(comm)
        data_loading = dl
        device = "cpu"

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
    fwd, rounds = _ddp_rounds(metrics, instances)
    searches = [o for o in t.ops if o.name == UNUSED_SEARCH and _in_steps(metrics, o.ts)]
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
        inst_step=[metrics.step_of(i[1]) or 0 for i in instances],
        inst_start=[i[1] for i in instances],
        ddp_forwards=fwd,
        ddp_sync_rounds=rounds,
        optimizer_steps=_count_in(metrics, [e for e in t.annotations if e.name.startswith("Optimizer.step#")]),
        unused_search_us=mean(union_of(searches).intersect(win)) if searches else 0.0,
        unused_searches=len(searches),
    )


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
    for e in events:
        a = e.extra if isinstance(e.extra, CommArgs) else args_of.get((e.ts, e.name))
        kind = collective_type(e.name, a.collective if a else "")
        counts[kind] = counts.get(kind, 0) + 1
        out.append((kind, e.ts, e.dur, message_bytes(a) if a else -1, a.group_size if a else -1))
    # kernels without sizes: take the host records' sizes when they pair one to one
    for i, (kind, ts, dur, nbytes, _group) in enumerate(out):
        if nbytes < 0 and kind in host_sizes and len(host_sizes[kind]) == counts[kind]:
            j = seen.get(kind, 0)
            seen[kind] = j + 1
            a = host_sizes[kind][j]
            out[i] = (kind, ts, dur, message_bytes(a), a.group_size)
    comm = union_of(events).intersect(Intervals.from_pairs(metrics.windows)) if events else Intervals.empty()
    return out, comm


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


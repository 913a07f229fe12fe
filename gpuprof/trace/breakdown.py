"""Where each step's time goes, and what the host did while the GPU was idle.

Definitions (all times in µs, as in the trace):

**Step-time breakdown**: each instant of a step is given to the first of
these that is active at it: ``kernel`` (non-communication kernels on the main
device), ``communication`` (NCCL/RCCL kernels; on a CPU run, gloo's collectives
outside the main thread's operators), ``memcpy``, ``memset``,
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

**Idle parts** (:mod:`gpuprof.trace.idleparts`): the same idle time split by
name instead of kind.
"""

from __future__ import annotations

from gpuprof.trace.gpuwork import union_of
from gpuprof.trace.intervals import Interval, Intervals, first_cover_per_window
from gpuprof.trace.model import Event, Trace, name_of
from gpuprof.trace.table import is_table
from gpuprof.trace.threads import HostThread, ThreadIndex
from gpuprof.trace.vocab import RuntimeClass, classify_runtime, is_dataloader_name, is_optimizer_name

__all__ = ["BREAKDOWN_KEYS", "IDLE_KEYS", "annotated_ranges", "host_layers", "step_breakdown", "idle_breakdown"]

BREAKDOWN_KEYS = ("kernel", "communication", "memcpy", "memset", "runtime", "data_loading", "cpu_exec", "other")
IDLE_KEYS = ("sync", "blocking_copy", "runtime", "data_loading", "optimizer", "cpu_other")


def annotated_ranges(trace: Trace, main: HostThread | None, main_keys: frozenset[HostThread]) -> tuple[list[Event], list[Event]]:
    """The data-loading ranges of the main thread (of any thread when there is no main
    thread) and its optimizer ranges, from the events whose names carry annotations."""
    host_dl_events: list[Event] = []
    optimizer_events: list[Event] = []
    for events in (trace.annotations, trace.ops, trace.python):
        names = set(events.names) if is_table(events) else set(map(name_of, events))
        dl_names = {n for n in names if is_dataloader_name(n)}  # per distinct name, once
        opt_names = {n for n in names if is_optimizer_name(n)} - dl_names
        if not dl_names and not opt_names:
            continue
        if is_table(events):  # Python frames as columns: make only the events named here
            events = events.named((dl_names | opt_names).__contains__)
        for e in events:
            name = e.name
            if name in dl_names:
                if main is None or (e.pid, e.tid) in main_keys:
                    host_dl_events.append(e)
            elif name in opt_names and (e.pid, e.tid) in main_keys:
                optimizer_events.append(e)
    return host_dl_events, optimizer_events


def host_layers(
    main_runtime: list[Event],
    blocking_copy_calls: set[int],
    host_dl_events: list[Event],
    optimizer_events: list[Event],
    threads: ThreadIndex,
    main_keys: frozenset[HostThread],
) -> dict[str, Intervals]:
    """The main thread's time per activity: ``sync``, ``blocking_copy``, ``runtime`` (other runtime
    calls), ``runtime_all`` (the three), ``data_loading``, ``optimizer``, ``cpu_ops`` (operators)."""
    rt_sync, rt_copy, rt_other = [], [], []
    classes = {n: classify_runtime(n) for n in set(map(name_of, main_runtime))}  # once per distinct name
    for r in main_runtime:
        rc = classes[r.name]
        if rc is RuntimeClass.SYNC:
            rt_sync.append(r)
        elif id(r) in blocking_copy_calls or (rc is RuntimeClass.MEMCPY and not r.name.endswith("Async")):
            rt_copy.append(r)
        else:
            rt_other.append(r)
    host = {
        "sync": union_of(rt_sync),
        "blocking_copy": union_of(rt_copy),
        "runtime": union_of(rt_other),
        "data_loading": union_of(host_dl_events),
        "optimizer": union_of(optimizer_events),
        "cpu_ops": union_of([o for o in threads.ops_on(main_keys) if not o.name.startswith("ProfilerStep#")]),
    }
    host["runtime_all"] = host["sync"].union(host["blocking_copy"]).union(host["runtime"])
    return host


def step_breakdown(
    windows: list[Interval], kernel: Intervals, comm: Intervals, memcpy: Intervals, memset: Intervals, host: dict[str, Intervals]
) -> list[dict[str, float]]:
    """Per step window, the step-time breakdown (GPU sets of the main device; ``host`` from :func:`host_layers`)."""
    return _priority_split(
        windows,
        [
            ("kernel", kernel),
            ("communication", comm),
            ("memcpy", memcpy),
            ("memset", memset),
            ("runtime", host["runtime_all"]),
            ("data_loading", host["data_loading"]),
            ("cpu_exec", host["cpu_ops"]),
        ],
        rest="other",
    )


def idle_breakdown(windows: list[Interval], gpu_busy: Intervals | None, host: dict[str, Intervals]) -> list[dict[str, float]]:
    """Per step window, the GPU idle breakdown of the main device (``gpu_busy``; None without
    GPU activity, where idle is meaningless: all zeros rather than a fake split)."""
    if gpu_busy is None:
        return [{k: 0.0 for k in IDLE_KEYS} for _ in windows]
    idle = _priority_split(
        windows,
        [
            ("_gpu_busy", gpu_busy),
            ("sync", host["sync"]),
            ("blocking_copy", host["blocking_copy"]),
            ("runtime", host["runtime"]),
            ("data_loading", host["data_loading"]),
            ("optimizer", host["optimizer"]),
        ],
        rest="cpu_other",
    )
    for d in idle:
        d.pop("_gpu_busy")
    return idle


def _priority_split(windows: list[Interval], layers: list[tuple[str, Intervals]], rest: str) -> list[dict[str, float]]:
    """Per window, the time each layer covers that no earlier layer covered; ``rest`` is what none covers."""
    split = first_cover_per_window(windows, [ivs for _, ivs in layers]).tolist()
    names = [name for name, _ in layers] + [rest]
    return [dict(zip(names, row)) for row in split]

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

import numpy as np

from gpuprof.trace.columns import Columns, columns, named
from gpuprof.trace.gpuwork import union_of
from gpuprof.trace.intervals import Interval, Intervals, first_cover_per_window
from gpuprof.trace.model import Event, Trace
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
        names = set(columns(trace, events).names)  # a table's own names; a list's, read once and shared
        dl_names = {n for n in names if is_dataloader_name(n)}  # per distinct name, once
        opt_names = {n for n in names if is_optimizer_name(n)} - dl_names
        if not dl_names and not opt_names:
            continue
        # only the events named here (Python frames as columns: only they are made)
        for e in named(events, (dl_names | opt_names).__contains__, trace):
            name = e.name
            if name in dl_names:
                if main is None or (e.pid, e.tid) in main_keys:
                    host_dl_events.append(e)
            elif name in opt_names and (e.pid, e.tid) in main_keys:
                optimizer_events.append(e)
    return host_dl_events, optimizer_events


def host_layers(main_runtime: list[Event], blocking_copy_calls: set[int], host_dl_events: list[Event],
                optimizer_events: list[Event], threads: ThreadIndex, main_keys: frozenset[HostThread],
                trace: Trace | None = None) -> dict[str, Intervals]:
    """The main thread's time per activity: ``sync``, ``blocking_copy``, ``runtime`` (other runtime
    calls), ``runtime_all`` (the three), ``data_loading``, ``optimizer``, ``cpu_ops`` (operators)."""
    rc = _columns_of(trace, main_runtime)
    # per distinct name, once: 0 sync, 1 a blocking copy by name, 2 other
    kind = np.fromiter(
        (0 if c is RuntimeClass.SYNC else 1 if c is RuntimeClass.MEMCPY and not n.endswith("Async") else 2
         for n in rc.names for c in (classify_runtime(n),)), np.int8, len(rc.names))[rc.name_code]
    if blocking_copy_calls:  # the copies found blocking by their GPU side, whatever the call's name
        blocking = np.fromiter(map(blocking_copy_calls.__contains__, map(id, main_runtime)), bool, rc.n)
        kind[blocking & (kind == 2)] = 1
    ops = threads.ops_on(main_keys)
    oc = _columns_of(trace, ops)
    is_op = np.fromiter((not n.startswith("ProfilerStep#") for n in oc.names), bool, len(oc.names))[oc.name_code]
    host = {
        "sync": _union(rc, kind == 0),
        "blocking_copy": _union(rc, kind == 1),
        "runtime": _union(rc, kind == 2),
        "data_loading": union_of(host_dl_events),
        "optimizer": union_of(optimizer_events),
        "cpu_ops": _union(oc, is_op),
    }
    host["runtime_all"] = host["sync"].union(host["blocking_copy"]).union(host["runtime"])
    return host


def _columns_of(trace: Trace | None, events: list[Event]) -> Columns:
    """The shared columns of ``events`` (a list ``trace`` holds, such as a ThreadIndex group), else its own."""
    return columns(trace, events) if trace is not None else Columns(events)


def _union(c: Columns, keep: np.ndarray) -> Intervals:
    """:func:`union_of` the events of ``c`` where ``keep``: the same arrays, from the columns."""
    if not keep.any():
        return Intervals.empty()
    return Intervals.from_spans(c.ts[keep], c.dur[keep])


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

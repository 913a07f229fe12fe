"""The trace model: normalised events, grouped by kind.

The loader turns each raw Kineto event into one compact :class:`Event`
(a msgspec Struct without GC tracking) and drops what the analysis never
reads (flow arrows, counters, most metadata). Events of one kind live in one
list, sorted by start time once loading is done.

Times are microseconds, as in the file (Chrome trace convention).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, Iterator, Union

import msgspec

from gpuprof.report import DeviceInfo
from gpuprof.trace.vocab import Kind

__all__ = ["Event", "Trace", "CommArgs", "DTYPE_HALF", "DTYPE_FLOAT", "DTYPE_DOUBLE", "ts_of", "dur_of", "name_of", "device_of"]

# Bit flags summarising an operator's input dtypes (from "Input type").
DTYPE_FLOAT = 1  # float32
DTYPE_HALF = 2  # float16 / bfloat16 / float8
DTYPE_DOUBLE = 4


# Field getters that run in C, for map()/sort keys/np.fromiter over many events.
ts_of = attrgetter("ts")
dur_of = attrgetter("dur")
name_of = attrgetter("name")
device_of = attrgetter("device")


class Event(msgspec.Struct, gc=False):
    """One normalised trace event.

    * ``ts``/``dur``: start and duration in µs (negative durations become 0).
    * ``pid``/``tid``: as in the trace; for GPU events ``pid`` is the device and
      ``tid`` the stream as written by Kineto.
    * ``ext``: the operator's External id linking host ops, runtime calls and
      GPU work (-1 when absent); ``corr``: the runtime call's correlation id,
      shared by the launch and the GPU activity it caused (-1 when absent).
    * ``device``/``stream``: GPU events only (-1 otherwise); for [memory]
      events ``device`` is the Device Id and ``stream`` the Device Type
      (0 CPU, 1 CUDA, ... as in c10::DeviceType).
    * ``nbytes``: bytes copied or set (memcpy/memset) or allocated (memory; negative = freed).
    * ``extra``: per-kind payload: CopyKind (memcpy), dtype flags (op),
      (Total Allocated, Total Reserved) tuple (memory), (python id, parent id)
      tuple (python frames), the legacy "Call stack" string (2021 ops).
    """

    kind: int
    name: str
    ts: float
    dur: float
    pid: Union[int, str]
    tid: Union[int, str]
    ext: int = -1
    corr: int = -1
    device: int = -1
    stream: int = -1
    nbytes: int = 0
    extra: Any = None

    @property
    def end(self) -> float:
        return self.ts + self.dur


class CommArgs(msgspec.Struct, gc=False, frozen=True):
    """What a communication event's args say about its collective (any field may be unknown).

    ``collective`` is the name as written (``allreduce``, ``nccl:all_reduce``'s
    ``all_reduce``...); ``nelems``/``dtype`` the message (``In msg nelems`` of
    ``record_param_comms``, else ``Input Dims``/``Input type``); ``group_size``
    and ``pg`` the process group when recorded.
    """

    collective: str = ""
    nelems: int = -1
    dtype: str = ""
    group_size: int = -1
    pg: str = ""


@dataclass
class Trace:
    """One loaded trace file."""

    path: str
    devices: list[DeviceInfo] = field(default_factory=list)
    rank: int | None = None
    world_size: int | None = None
    backend: str = ""  # distributedInfo.backend ("nccl", "gloo"...), "" when absent
    base_time_ns: int | None = None
    with_stack: bool = False
    profile_memory: bool = False
    num_events: int = 0  # events in the file, including those gpuprof does not keep
    file_bytes: int = 0  # size on disk
    json_bytes: int = 0  # size of the JSON text (uncompressed)
    # events by kind, each sorted by ts
    ops: list[Event] = field(default_factory=list)  # Kind.CPU_OP
    annotations: list[Event] = field(default_factory=list)  # Kind.USER_ANNOTATION
    python: list[Event] = field(default_factory=list)  # Kind.PYTHON_FUNCTION
    runtime: list[Event] = field(default_factory=list)  # Kind.RUNTIME
    kernels: list[Event] = field(default_factory=list)  # Kind.KERNEL
    memcpys: list[Event] = field(default_factory=list)  # Kind.MEMCPY
    memsets: list[Event] = field(default_factory=list)  # Kind.MEMSET
    gpu_syncs: list[Event] = field(default_factory=list)  # Kind.GPU_SYNC
    gpu_annotations: list[Event] = field(default_factory=list)  # Kind.GPU_ANNOTATION
    memory: list[Event] = field(default_factory=list)  # Kind.MEMORY
    # communication events (collective annotations and kernels, record_param_comms) again,
    # each with its CommArgs in ``extra``: read by gpuprof.distributed, not part of lists()
    comm_events: list[Event] = field(default_factory=list)
    # what loading had to guess or leave out (B/E events without a partner, X events
    # without dur): copied into the trace's notes in the report
    load_notes: list[str] = field(default_factory=list)
    process_labels: dict[Union[int, str], str] = field(default_factory=dict)
    thread_names: dict[tuple[Union[int, str], Union[int, str]], str] = field(default_factory=dict)

    def lists(self) -> dict[Kind, list[Event]]:
        return {
            Kind.CPU_OP: self.ops,
            Kind.USER_ANNOTATION: self.annotations,
            Kind.PYTHON_FUNCTION: self.python,
            Kind.RUNTIME: self.runtime,
            Kind.KERNEL: self.kernels,
            Kind.MEMCPY: self.memcpys,
            Kind.MEMSET: self.memsets,
            Kind.GPU_SYNC: self.gpu_syncs,
            Kind.GPU_ANNOTATION: self.gpu_annotations,
            Kind.MEMORY: self.memory,
        }

    def gpu_events(self) -> Iterator[Event]:
        """Kernels, copies and memsets: the work that keeps a GPU busy."""
        yield from self.kernels
        yield from self.memcpys
        yield from self.memsets

    @property
    def has_gpu_activity(self) -> bool:
        return bool(self.kernels or self.memcpys or self.memsets)

    @property
    def kept_events(self) -> int:
        return sum(len(v) for v in self.lists().values())

    def sort(self) -> None:
        key = ts_of  # in C: a Python key function costs as much as the sort
        for events in self.lists().values():
            events.sort(key=key)
        self.comm_events.sort(key=key)

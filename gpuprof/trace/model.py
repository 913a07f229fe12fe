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
from typing import Any, Iterator, Sequence, Union

import msgspec

from gpuprof.trace.vocab import CopyKind, Kind

__all__ = ["DeviceInfo", "Event", "Trace", "MemoryPayload", "CommArgs", "DTYPE_HALF", "DTYPE_FLOAT", "DTYPE_FP16",
           "DTYPE_BF16", "DTYPE_DOUBLE", "ts_of", "dur_of", "name_of", "op_dtypes", "op_records_autograd",
           "OP_AUTOGRAD", "op_call_stack", "op_shape_key", "op_flops", "op_concrete_inputs", "CONCRETE_INPUT_OPS",
           "copy_kind", "memory_totals", "memory_addr", "KernelConfig", "kernel_config"]

# Bit flags summarising an operator's input dtypes (from "Input type").
DTYPE_FLOAT = 1  # float32
DTYPE_HALF = 2  # float16 / bfloat16 / float8
DTYPE_DOUBLE = 4
DTYPE_FP16 = 8  # IEEE float16 (set with DTYPE_HALF): the 16-bit type whose gradients need loss scaling
DTYPE_BF16 = 16  # bfloat16 (set with DTYPE_HALF)
_DTYPE_MASK = DTYPE_FLOAT | DTYPE_HALF | DTYPE_DOUBLE | DTYPE_FP16 | DTYPE_BF16
# Not a dtype: set (in the same payload int) when the operator carries autograd's "Sequence number",
# which PyTorch writes only for an operator that recorded an autograd node: grad mode on and an input
# that requires grad. Never under torch.no_grad()/inference_mode(), nor for a frozen model's operators.
# Read it with op_records_autograd(); op_dtypes() masks it out.
OP_AUTOGRAD = 32

# The operators whose "Concrete Inputs" (record_shapes' scalar and list arguments) the loader keeps:
# the convolutions, whose stride/padding/dilation decide their FLOPs (gpuprof.trace.flops). Kept
# for these names only, so the payload of every other operator stays as small and as shared as before.
CONCRETE_INPUT_OPS = frozenset({
    "aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::convolution", "aten::_convolution",
    "aten::cudnn_convolution", "aten::mkldnn_convolution", "aten::miopen_convolution",
    "aten::convolution_backward",
})


# Field getters that run in C, for map()/sort keys/np.fromiter over many events.
ts_of = attrgetter("ts")
dur_of = attrgetter("dur")
name_of = attrgetter("name")


@dataclass(frozen=True)
class DeviceInfo:
    """One GPU as the trace describes it (``deviceProperties``), or as far as it is known.

    Also part of the report (``traces[].devices`` in docs/report-schema.md).
    """

    id: int
    name: str = ""
    compute_capability: tuple[int, int] | None = None
    total_memory: int | None = None
    num_sms: int | None = None
    vendor: str = ""  # "nvidia", "amd" or "" when unknown


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
    * ``extra``: a per-kind payload; read it only through the accessors
      below (:func:`op_dtypes`, :func:`op_call_stack`, :func:`copy_kind`,
      :func:`memory_totals`, :func:`memory_addr`), which know its encoding.
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


class MemoryPayload(msgspec.Struct, gc=False, frozen=True):
    """What a ``[memory]`` event carries besides its bytes and device.

    ``allocated``/``reserved``: the allocator's Total Allocated / Total
    Reserved after the event (None / -1 where the trace has none: PyTorch
    1.8-era traces, and older builds that write no Total Reserved);
    ``addr``: the block's address (-1 when absent), which is what pairs a
    free with its allocation.
    """

    allocated: Union[int, None]
    reserved: int
    addr: int


class KernelConfig(msgspec.Struct, gc=False, frozen=True):
    """A kernel's launch configuration as Kineto records it (None / -1 where the trace has no value).

    ``occupancy`` is Kineto's "est. achieved occupancy %" as a fraction.
    """

    grid: Union[tuple[int, ...], None]
    block: Union[tuple[int, ...], None]
    registers: int
    occupancy: float


# --------------------------------------------------------------------------- payload accessors
#
# The loader stores an operator's payload as its dtype flags and OP_AUTOGRAD (an int: no
# object per op) or, for 2021 traces with a "Call stack", a (flags, stack)
# tuple, or for operators with ``Input Dims`` (record_shapes) a shared (flags, stack or None, Input Dims
# text) tuple, or for the few operators with recorded FLOPs (``kernel_flop``) or kept ``Concrete Inputs``
# (CONCRETE_INPUT_OPS) a shared (flags, stack or None, Input Dims or None, FLOPs or None, Concrete Inputs
# text or None) tuple; a copy's as its CopyKind; a kernel's as a shared KernelConfig (when recorded); a [memory]
# event's as a MemoryPayload.
# These functions are the one place that knows it.


def op_dtypes(op: Event | None) -> int:
    """The DTYPE_* flags of an operator's input types (0: not recorded, or not an op)."""
    if op is None:
        return 0
    extra = op.extra
    if type(extra) is tuple:
        extra = extra[0]
    return extra & _DTYPE_MASK if type(extra) is int else 0


def op_records_autograd(op: Event) -> bool:
    """Whether the operator recorded an autograd node (it carries autograd's ``Sequence number``).

    True only when grad mode was on and one of its inputs required grad: a
    forward operator of a model that will (or could) be differentiated. Backward
    operators carry it too; callers that want the forward tell them by name.
    """
    extra = op.extra
    if type(extra) is tuple:
        extra = extra[0]
    return type(extra) is int and bool(extra & OP_AUTOGRAD)


def op_shape_key(op: Event) -> str | None:
    """The ``Input Dims`` text of an operator (JSON, as in the trace; one string object per distinct text
    within one loaded trace), None without record_shapes or for other events."""
    extra = op.extra
    if type(extra) is tuple and len(extra) >= 3:
        return extra[2]  # type: ignore[no-any-return]
    return None


def op_flops(op: Event) -> float | None:
    """The FLOPs the trace records for one call of the operator (``kernel_flop``), None when it records none."""
    extra = op.extra
    if type(extra) is tuple and len(extra) == 5:
        return extra[3]  # type: ignore[no-any-return]
    return None


def op_concrete_inputs(op: Event) -> str | None:
    """The ``Concrete Inputs`` JSON text of a CONCRETE_INPUT_OPS operator, None when not recorded (or another op)."""
    extra = op.extra
    if type(extra) is tuple and len(extra) == 5:
        return extra[4]  # type: ignore[no-any-return]
    return None


def op_call_stack(op: Event) -> str | None:
    """The legacy ``Call stack`` string of a 2021-era operator (innermost frame first), if any."""
    extra = op.extra
    if type(extra) is tuple and type(extra[1]) is str:
        return extra[1]
    return None


def copy_kind(copy: Event) -> CopyKind | None:
    """Direction and memory kinds of a memcpy event (None for other events)."""
    extra = copy.extra
    return extra if isinstance(extra, CopyKind) else None


def memory_totals(mem: Event) -> tuple[int, int] | None:
    """(Total Allocated, Total Reserved) after a ``[memory]`` event; reserved is -1 where not
    written. None when the event has no totals (or is not a memory event)."""
    extra = mem.extra
    if type(extra) is MemoryPayload and extra.allocated is not None:
        return extra.allocated, extra.reserved
    return None


def kernel_config(kernel: Event) -> KernelConfig | None:
    """The launch configuration of a kernel event (None when the trace records none)."""
    extra = kernel.extra
    return extra if type(extra) is KernelConfig else None


def memory_addr(mem: Event) -> int:
    """The address of a ``[memory]`` event's block (-1 when absent)."""
    extra = mem.extra
    return extra.addr if type(extra) is MemoryPayload else -1


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
    # Kind.PYTHON_FUNCTION: a loaded trace holds them as columns (gpuprof.trace.table.EventTable, a
    # read-only Sequence[Event]); code that builds a Trace by hand may give a list
    python: Sequence[Event] = field(default_factory=list)
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

    def lists(self) -> dict[Kind, Sequence[Event]]:
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
            if isinstance(events, list):
                events.sort(key=key)  # (an EventTable is made sorted)
        self.comm_events.sort(key=key)

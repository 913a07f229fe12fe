"""The memory model shared by snapshots and profiler traces.

Both inputs become, per device, one :class:`DeviceMemory`: the allocator's
history as parallel arrays (one slot per event, in time order) plus, for
snapshots, the allocator's state when the snapshot was taken (segments and
their blocks). Parallel lists of ints keep a million events in tens of MB and
let the analysis run as flat loops.
"""

from __future__ import annotations

import os
from array import array
from dataclasses import dataclass, field
from typing import Any, MutableSequence, cast

from gpuprof.memory.attribution import KindTable
from gpuprof.memory.frames import SiteTable
from gpuprof.redact import scrub

__all__ = ["ALLOC", "FREE_REQUESTED", "FREE_COMPLETED", "SEGMENT_ALLOC", "SEGMENT_FREE", "OOM", "ACTION_NAMES",
           "BlockState", "Block", "Segment", "OomEvent", "DeviceMemory", "MemoryData", "compact_columns"]

# Event kinds (PyTorch's TraceEntry actions). segment_map/segment_unmap
# (expandable segments growing/shrinking) count as SEGMENT_ALLOC/SEGMENT_FREE:
# both change reserved memory by ``size``.
ALLOC = 0
FREE_REQUESTED = 1  # the tensor died; its bytes stop counting as allocated
FREE_COMPLETED = 2  # the block is back in the cache (later than FREE_REQUESTED after record_stream)
SEGMENT_ALLOC = 3
SEGMENT_FREE = 4
OOM = 5

ACTION_NAMES = {"alloc": ALLOC, "free_requested": FREE_REQUESTED, "free_completed": FREE_COMPLETED,
                "segment_alloc": SEGMENT_ALLOC, "segment_free": SEGMENT_FREE, "segment_map": SEGMENT_ALLOC,
                "segment_unmap": SEGMENT_FREE, "oom": OOM}


class BlockState:
    """Block states in a snapshot's segments."""

    ALLOCATED = "active_allocated"  # a live tensor
    PENDING_FREE = "active_pending_free"  # freed, waiting on other streams' work (record_stream)
    INACTIVE = "inactive"  # free, cached by the allocator


@dataclass
class Block:
    """One block of a segment at snapshot time."""

    address: int
    size: int
    requested_size: int
    state: str
    site: int  # SiteTable id
    kind: int = 0  # KindTable id: what the block is (category, stage, module); 0 = no stack


@dataclass
class Segment:
    """One cudaMalloc'd (or expandable) region at snapshot time."""

    address: int
    total_size: int
    stream: int
    segment_type: str  # "large" or "small"
    is_expandable: bool
    blocks: list[Block]


@dataclass
class OomEvent:
    """An allocation that failed: ``size`` requested while ``device_free`` bytes were free on the device."""

    index: int  # position in the event arrays
    time: float
    size: int
    device_free: int | None
    stream: int
    site: int


@dataclass
class DeviceMemory:
    """One device's allocator history and final state.

    Arrays ``time``/``action``/``addr``/``size``/``site``/``stream`` hold one
    slot per history event, in order. ``time`` is in µs when ``has_time``,
    else the event's index. ``allocated``/``reserved`` hold the totals the
    file itself recorded after each event (profiler traces), or are None
    (snapshots: the analysis reconstructs them).
    """

    device: str  # "cuda:0", "cpu"
    index: int
    # Lists, or compact arrays for snapshots (see compact_columns); both index, iterate and append alike.
    time: MutableSequence[float] = field(default_factory=list)
    action: MutableSequence[int] = field(default_factory=list)
    addr: MutableSequence[int] = field(default_factory=list)
    size: MutableSequence[int] = field(default_factory=list)
    site: MutableSequence[int] = field(default_factory=list)
    stream: MutableSequence[int] = field(default_factory=list)
    kind: MutableSequence[int] = field(default_factory=list)  # KindTable id per event (empty: inputs without stacks)
    allocated: list[int] | None = None
    reserved: list[int] | None = None
    has_time: bool = True
    segments: list[Segment] | None = None  # None: the input has no final state (traces)
    ooms: list[OomEvent] = field(default_factory=list)
    total_memory: int | None = None
    free_memory: int | None = None  # the device's free bytes when the snapshot was taken (gpuprof's own dumps)
    name: str = ""  # the GPU's name when the input says it ("Tesla T4")
    bf16: bool | None = None  # whether the GPU computes in bfloat16 (None: unknown)
    has_segment_events: bool = True  # False for traces: reserved comes only from the recorded totals
    has_addresses: bool = True  # False for traces whose [memory] events carry no Addr (frees cannot be matched)

    def __len__(self) -> int:
        return len(self.action)

    def widen_columns(self) -> None:
        """Turn compact columns back into lists (a value that does not fit a machine integer: kept exactly)."""
        self.time, self.action, self.addr, self.size = list(self.time), list(self.action), list(self.addr), list(self.size)
        self.site, self.stream, self.kind = list(self.site), list(self.stream), list(self.kind)


def compact_columns(dm: DeviceMemory) -> DeviceMemory:
    """Give ``dm`` empty machine-integer columns: 41 bytes an event instead of about 180 as lists of ints (a
    snapshot's history is millions of events). ``time`` holds the integer µs snapshots record; a float time, or
    a value out of range, widens the columns to lists (:meth:`DeviceMemory.widen_columns`) before it is added."""
    # array("q") holds the ints a snapshot's time_us are; typed as the float column the model reads
    dm.time = cast("MutableSequence[float]", array("q"))
    dm.action = array("B")
    dm.addr = array("Q")
    dm.size = array("Q")
    dm.site = array("i")
    dm.stream = array("q")
    dm.kind = array("i")
    return dm


@dataclass
class MemoryData:
    """Everything loaded from one input file."""

    path: str
    source_type: str  # "snapshot" or "trace"
    devices: list[DeviceMemory]
    sites: SiteTable
    notes: list[str] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)  # allocator_settings of the snapshot
    steps: list[tuple[int, float, float]] = field(default_factory=list)  # (step, start µs, end µs), traces only
    kinds: KindTable = field(default_factory=KindTable)  # what each stack says (gpuprof.memory.attribution)
    # record_function ranges the snapshot recorded (external_annotations): (device, name, start µs, end µs)
    annotations: list[tuple[int, str, float, float]] = field(default_factory=list)
    # pinned host memory PyTorch's host allocator held at the dump (gpuprof's own dumps): {"allocated_bytes",
    # "active_bytes"}; None when the file does not say
    pinned_host: dict[str, int] | None = None

    def __post_init__(self) -> None:
        self.path = scrub(os.fspath(self.path))  # the name every view shows: a URL's credentials masked (gpuprof.redact)

"""A saved ``report.json`` as types: every value's type and range on its field (docs/report-schema.md).

:func:`gpuprof.saved.check.saved_report` decodes a report's JSON object into :class:`SavedReport` with msgspec:
a string where a number belongs, a negative duration, a share over 1 or a count beyond 2^53 is refused by the
type, naming its field. Fields absent from older 1.x reports have defaults; the ones every 1.x report has do
not. Unknown fields (a later minor version's) are ignored, as the compatibility policy says. What a type cannot
say (a configurable ceiling on one step, counts against the trace's own event count, a section's kind) is
:mod:`gpuprof.saved.check`'s.
"""

from __future__ import annotations

import sys
from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType

from gpuprof.report import MAX_TRACE_US, JobSummary

__all__ = ["SavedReport", "SavedTrace", "SavedFinding", "ViewRow", "MAX_INTEGER", "SHARE_CEILING", "given"]

MAX_INTEGER = 2**53  # beyond it an integer is no count of anything recorded (and loses precision as a float)
# a rounding margin for shares computed as a quotient (busy / step time of the same events): 1 + 1e-9 is
# arithmetic, 1.01 is not a share
SHARE_CEILING = 1.0 + 1e-6

Us = Annotated[float, Meta(ge=0.0, le=MAX_TRACE_US)]  # a duration (µs); one step's also has check's ceiling
Time = Annotated[float, Meta(ge=-MAX_TRACE_US, le=MAX_TRACE_US)]  # a time from an origin (µs)
Count = Annotated[int, Meta(ge=0, le=MAX_INTEGER)]
Int = Annotated[int, Meta(ge=-MAX_INTEGER, le=MAX_INTEGER)]
Positive = Annotated[int, Meta(ge=1, le=MAX_INTEGER)]
Share = Annotated[float, Meta(ge=0.0, le=SHARE_CEILING)]
Amount = Annotated[float, Meta(ge=0.0, le=sys.float_info.max)]  # FLOPs, an MFU against a peak table: no ceiling
Severity = Literal["info", "warning", "error"]


class Device(Struct):
    id: Int = 0
    name: str = ""
    total_memory: Count | None = None
    num_sms: Count | None = None
    vendor: str = ""
    compute_capability: tuple[Count, Count] | None = None  # (major, minor)


class TopKernel(Struct):
    name: str
    count: Count
    total_us: Us
    mean_us: Us = 0.0
    share_of_gpu: Share = 0.0


class TopOp(Struct):
    name: str
    count: Count
    total_us: Us
    self_us: Us = 0.0
    gpu_us: Us = 0.0
    gpu_total_us: Us = 0.0


class Copy(Struct):
    count: Count
    total_us: Us
    direction: str = ""
    memory: str = ""
    bytes: Count = 0
    bandwidth_gbps: Amount | None = None


class Sync(Struct):
    count: Count
    total_us: Us
    cause: str = ""
    runtime: str = ""
    location: str | None = None


class ViewRow(Struct):
    """A row of a trace's views (docs/views.md): an operator, kernel, module or range; each kind's fields."""

    name: str
    calls: Count = 0
    input_shapes: str | None = None  # operators
    cpu_total_us: Us = 0.0
    cpu_self_us: Us = 0.0
    gpu_self_us: Us = 0.0
    gpu_total_us: Us = 0.0
    stacks: list[str] = []
    flops: Amount | None = None
    flops_source: str | None = None
    tflops: Amount | None = None
    total_us: Us = 0.0  # kernels
    mean_us: Us = 0.0
    max_us: Us = 0.0
    tensor_cores: bool | None = None
    op_dtype: str | None = None
    precision: str | None = None
    mfu: Amount | None = None  # against a peak table: an estimate, not bounded by 1
    grid: list[Count] | None = None
    block: list[Count] | None = None
    registers_per_thread: Count | None = None
    occupancy: Share | None = None
    reference_mfu: Amount | None = None
    known_flops_share: Share | None = None  # modules and ranges
    peak_precision: str | None = None


class Views(Struct):
    version: Positive = 1
    kernel_total_us: Us = 0.0
    unattributed_gpu_us: Us = 0.0
    peak_device: str | None = None
    reference_precision: str | None = None
    operators: list[ViewRow] = []
    kernels: list[ViewRow] = []
    modules: list[ViewRow] = []
    ranges: list[ViewRow] = []
    rest: dict[str, dict[str, float]] = {}  # view -> summed fields of the rows past the report's limit


class MfuModule(Struct):
    name: str
    gpu_total_us: Us = 0.0
    mfu: Amount | None = None
    known_flops_share: Share | None = None
    peak_precision: str | None = None
    reference_mfu: Amount | None = None


class Mfu(Struct):
    value: Amount | None = None
    known_flops_share: Share | None = None
    no_peak_share: Share | None = None
    peak_source: str | None = None
    flops_per_step: Amount | None = None
    flops_by_precision: dict[str, Amount] = {}
    per_module: list[MfuModule] = []
    peak_precision: str | None = None
    reference_value: Amount | None = None
    reference_precision: str | None = None


class CriticalPart(Struct):
    kind: str
    name: str
    us: Us


class CriticalPath(Struct):
    length_us: Us
    parts: list[CriticalPart]
    host_ahead_us: Us = 0.0


class Lane(Struct):
    id: str
    kind: str
    label: str
    # (start, duration, name index, kind index, depth, count)
    events: list[tuple[Time, Us, Count, Count, Count, Positive]] = []
    total: Count = 0
    depth: Count = 1


class TimelineStep(Struct):
    id: Int
    start_us: Time
    end_us: Time


class Marker(Struct):
    code: str
    lane: str
    start_us: Time
    end_us: Time
    where: str = ""


class Timeline(Struct):
    version: Positive = 1
    origin_us: Time = 0.0
    span_us: Us = 0.0
    resolution_us: Us = 0.0
    step_resolution_us: Us = 0.0
    events_total: Count = 0
    events_kept: Count = 0
    left_out: dict[str, Count] = {}
    kinds: list[str] = []
    names: list[str] = []
    lanes: list[Lane] = []
    steps: list[TimelineStep] = []
    critical_step: Count | None = None
    critical: list[tuple[str, Time, Time, str, str, Positive]] = []
    markers: list[Marker] = []


class SavedTrace(Struct):
    """One trace summary; the first eight fields every 1.x report has (``gpuprof diff`` computes with them)."""

    path: str
    num_steps: Count
    step_time_us: Us  # the median step
    step_time_mean_us: Us
    gpu_busy_us: Us  # mean per step
    gpu_utilization: Share | None  # None: no GPU activity
    breakdown_us: dict[str, Us]  # mean per step
    idle_breakdown_us: dict[str, Us]
    devices: list[Device] = []
    has_gpu_activity: bool = False
    step_ids: list[Int] = []
    lead_in_us: Us | None = None
    top_kernels: list[TopKernel] = []
    top_ops: list[TopOp] = []
    copies: list[Copy] = []
    syncs: list[Sync] = []
    rank: Count | None = None
    world_size: Positive | None = None
    num_events: Count | UnsetType = UNSET  # absent: the counts are not checked against it
    file_bytes: Count = 0
    notes: list[str] = []
    step_times_us: list[Us] = []  # 1.2
    views: Views | None = None
    data_loading_share: Share | None = None  # 1.4
    mfu: Mfu | None = None
    comm_wait_us: Us | None = None
    comm_wait_source: str | None = None
    gpu_working_utilization: Share | None = None
    critical_path: CriticalPath | None = None  # 1.5
    timeline: Timeline | None = None
    cause_per_step: dict[str, list[Amount]] = {}  # 1.6

    def total_us(self) -> float:
        """The trace's step time over all its steps."""
        return self.step_time_mean_us * self.num_steps


def given(value: str | UnsetType) -> str:
    """A finding's text field as written, "" where the report leaves it out."""
    return "" if value is UNSET else value


class Location(Struct):
    file: str
    line: Int | None = None
    function: str | None = None


class EvidenceEvent(Struct):
    name: str
    ts: Time
    dur: Us = 0.0
    pid: int | str | None = None
    tid: int | str | None = None


class Evidence(Struct):
    metric: str
    value: int | float | str | None = None  # an integer stays one, as written
    threshold: int | float | None = None
    unit: str = ""
    events: list[EvidenceEvent] = []
    extra: dict[str, Any] = {}  # the rule's own (checked for non-finite numbers only)


class Link(Struct):
    kind: str
    code: str
    part: str | None = None
    count: Count | None = None


class SavedFinding(Struct):
    """A finding; ``name``, ``severity``, ``message`` and ``origin`` are UNSET where the report leaves them out (a
    report gpuprof wrote always has them: :func:`gpuprof.saved.read.live_report` refuses a finding without)."""

    code: str
    name: str | UnsetType = UNSET
    severity: Severity | UnsetType = UNSET
    message: str | UnsetType = UNSET
    advice: str = ""
    evidence: list[Evidence] = []
    cost_us_per_step: Us | None = None
    cost_share: Share | None = None
    location: Location | None = None
    origin: str | UnsetType = UNSET
    source: str | None = None
    links: list[Link] = []
    what_if_saving_us: Us | None = None
    what_if_note: str | None = None

    def where(self) -> str | None:
        """``file:line`` (or the file) of the user's source, when known."""
        loc = self.location
        if loc is None or not loc.file:
            return None
        return f"{loc.file}:{loc.line}" if loc.line is not None else loc.file


class SavedReport(Struct):
    """A saved report, decoded. ``sections`` stay open objects (each kind's layout is its module's)."""

    schema_version: str
    command: str = "analyze"
    inputs: list[str] = []
    traces: list[SavedTrace] = []
    findings: list[SavedFinding] = []
    job: JobSummary | None = None  # the live type: its step times carry their ranges
    sections: list[dict[str, Any]] = []
    notes: list[str] = []
    failed_rules: list[str] = []
    failed_ranks: list[str] = []

    def sections_of(self, kind: str) -> list[dict[str, Any]]:
        return [s for s in self.sections if s.get("kind") == kind]


def decode(doc: Any) -> SavedReport:
    """``doc`` (a parsed report) as a :class:`SavedReport`; msgspec.ValidationError naming the first bad field."""
    return msgspec.convert(doc, SavedReport)

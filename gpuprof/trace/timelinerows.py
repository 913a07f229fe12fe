"""The report's timeline of one trace, as data (``traces[].timeline``; docs/report-schema.md, docs/views.md).

Plain records beside the views' rows (:mod:`gpuprof.trace.viewrows`), so the
report carries them without depending on the code that fills them
(:mod:`gpuprof.views.timeline`). Every time is µs relative to ``origin_us``
(the first recorded step's start, in the trace's own clock), rounded to 0.1 µs.

Bounded whatever the trace: at most :data:`MAX_EVENTS` event rows,
:data:`MAX_LANES` lanes, :data:`MAX_DEPTH` nesting rows per lane,
:data:`MAX_MARKERS` markers, :data:`MAX_CRITICAL` critical-path runs and
names of at most :data:`MAX_NAME` characters, so a 1 GB trace's page stays small.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec

__all__ = ["TIMELINE_VERSION", "EVENT_KINDS", "LANE_KINDS", "BUCKETS", "MAX_EVENTS", "MAX_LANES", "MAX_DEPTH",
           "MAX_MARKERS", "MAX_CRITICAL", "MAX_NAME", "EventRow", "CriticalRow", "StoredCritical", "TimelineLane", "TimelineStep",
           "TimelineMarker", "Timeline"]

TIMELINE_VERSION = 1
# what an event row's kind index names (fixed: a reader may hard-code it; the JSON repeats it in `kinds`)
EVENT_KINDS = ("op", "runtime", "annotation", "kernel", "memcpy", "memset", "sync", "collective")
LANE_KINDS = ("host", "gpu", "collective")
BUCKETS = 4096  # decimation starts at the recorded span / BUCKETS (about 3 buckets a pixel of a 1280 px window)
MAX_EVENTS = 12_000  # event rows per trace, at most: the bucket width doubles until the rows fit
MAX_LANES = 48  # lanes (threads, streams), the busiest kept
MAX_DEPTH = 8  # nesting rows per host lane: operators deeper than this are left out (counted in `left_out`)
MAX_MARKERS = 1000
MAX_CRITICAL = 5000
MAX_NAME = 300  # characters of a name kept (a longer one ends in "…")

# [start_us, dur_us, name index, kind index (EVENT_KINDS), depth, count]. count 1: one trace event; more: a
# block standing for `count` events shorter than a bucket that started in one bucket, drawn from the first
# one's start to the last one's end and named after the longest of them.
EventRow = tuple[float, float, int, int, int, int]
# [lane id, start_us, end_us, kind, name]: one segment of the critical path of the critical step, as its code
# gives it (the trace's clock)
CriticalRow = tuple[str, float, float, str, str]
# as the timeline keeps it: relative times, and the segments it stands for (segments of one lane that follow
# each other within a gap merged into one run, named after the longest; gpuprof.views.timelinepath)
StoredCritical = tuple[str, float, float, str, str, int]


@dataclass
class TimelineLane:
    """One host thread (``host:<pid>:<tid>``), GPU stream (``gpu:<device>:<stream>``) or a rank's collectives
    (``collective:<rank>``), with its event rows in time order."""

    id: str
    kind: str  # LANE_KINDS
    label: str  # what the page names it by (a thread's name where the trace has one)
    events: list[EventRow] = field(default_factory=list)
    total: int = 0  # trace events of the lane in the recorded span (before decimation)
    depth: int = 1  # nesting rows drawn


@dataclass(frozen=True)
class TimelineStep:
    id: int
    start_us: float
    end_us: float


@dataclass(frozen=True)
class TimelineMarker:
    """Where a finding happens: one of its evidence events, or (``where`` "step") the critical step."""

    code: str
    lane: str
    start_us: float
    end_us: float
    where: str  # "event" or "step"


@dataclass
class Timeline:
    """The recorded steps as lanes (``traces[].timeline``)."""

    version: int = TIMELINE_VERSION
    origin_us: float = 0.0  # the first step's start, in the trace's clock: every other time is relative to it
    span_us: float = 0.0  # the last step's end, relative
    resolution_us: float = 0.0  # the bucket width the events were decimated at (outside the critical step)
    step_resolution_us: float = 0.0  # the bucket width inside the critical step (finer: up to half the rows)
    events_total: int = 0  # trace events in the recorded span, on the kept lanes
    events_kept: int = 0  # event rows (a merged block is one)
    left_out: dict[str, int] = field(default_factory=dict)  # what the bounds left out: "lanes", "deep", "markers"...
    kinds: list[str] = field(default_factory=lambda: list(EVENT_KINDS))
    names: list[str] = field(default_factory=list)
    lanes: list[TimelineLane] = field(default_factory=list)
    steps: list[TimelineStep] = field(default_factory=list)
    critical_step: int | None = None  # index in `steps` of the step the critical path is of (the median step)
    critical: list[StoredCritical] = field(default_factory=list)
    markers: list[TimelineMarker] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return msgspec.to_builtins(self)  # type: ignore[no-any-return]

"""Checking a saved report's values before anything is computed from them (docs/report-schema.md).

A ``report.json`` read back (``gpuprof diff``, ``gpuprof analyze
report.json``, the TensorBoard tab, a capture run's runtime findings) may
have been edited, truncated by hand, or written by a stranger. Python's JSON
reader takes ``NaN`` and ``Infinity`` (and ``1e999`` becomes infinite), and
the diff's arithmetic would turn a string, a NaN or a negative duration into
a figure, or into 0: a ``--fail-on-regression`` gate could then pass on a
report whose step time is not a number. So every value the schema gives a
type and a range is checked here, against that schema, and the first one
that does not fit is a :class:`ReportProblem` naming its field
(``traces[0].step_time_us``); callers turn it into one line naming the file
(exit 2).

What is checked: no number anywhere is NaN or infinite; the top-level lists
are lists of the documented types; each trace summary's figures are numbers
(not booleans or strings) of their documented range: durations, sizes and
counts not negative, shares (``gpu_utilization``, ``share_of_gpu``,
``cost_share``) between 0 and 1, a rank 0 or more, a world size 1 or more;
each finding has a code, and a name, message and severity (a known one) of
the right type where present, a cost that is a number of 0 or more; a timeline's rows are lists of the
documented length and types (the page indexes its names and kinds with them). Fields absent from older 1.x
reports (``step_times_us``, ``views``, ``critical_path``, a finding's ``what_if_*``, ``timeline``) may be
missing; the ones every 1.x report has may not. Open maps
(a finding's ``evidence[].extra``, sections other than the trace summaries)
are checked for non-finite numbers only: their shape is the rule's or the
section's.

Values beyond physical sense are refused too, against documented ceilings (docs/limits.md): a duration of
one step (a step time, a part of its breakdown, a finding's cost per step, the critical path) of more than
:data:`MAX_STEP_S` (one day; ``GPUPROF_MAX_STEP_S`` raises it), any other duration or time (totals over a
trace, timestamps) beyond 2^53 µs (285 years, the trace loader's own ceiling), an integer beyond 2^53, and
a count of a trace's events (launches, calls, copies, steps, a timeline's events) above the trace's
``num_events``. Such a value is no measurement, and the arithmetic of a diff or a history would overflow
it to infinity or NaN: ``1e308`` as a step time would turn a ``--fail-on-regression`` gate into "within
the noise".
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping

__all__ = ["ReportProblem", "check_report", "check_finding", "first_non_finite", "MAX_STEP_S", "MAX_STEP_ENV",
           "MAX_TRACE_US", "MAX_INTEGER", "max_step_us"]

MAX_STEP_S = 86_400.0  # one day: the longest step a saved report may hold (docs/limits.md)
MAX_STEP_ENV = "GPUPROF_MAX_STEP_S"
MAX_TRACE_US = float(2**53)  # 285 years: no clock reads more; the trace loader leaves such events out too
MAX_INTEGER = 2**53  # beyond it an integer is no count of anything recorded (and loses precision as a float)

# A rounding margin for shares computed as a quotient (busy / step time of the same events): a share of
# 1 + 1e-9 is arithmetic, 1.01 is not a share.
_SHARE_SLACK = 1e-6

Check = Callable[[Any, str], None]


class ReportProblem(ValueError):
    """A value of a saved report that does not fit the schema: ``field`` (a JSON path) and what is wrong."""

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        self.problem = problem
        super().__init__(f"{field}: {problem}")


def _join(path: str, name: object) -> str:
    return f"{path}.{name}" if path else str(name)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _number(low: float | None = None, high: float | None = None, integer: bool = False,
            nullable: bool = False) -> Check:
    what = "an integer" if integer else "a number"

    def check(v: Any, path: str) -> None:
        if v is None and nullable:
            return
        if not _is_number(v) or (integer and not isinstance(v, int)):
            raise ReportProblem(path, f"is {_shown(v)}, not {what}" + (" or null" if nullable else ""))
        if isinstance(v, float) and not math.isfinite(v):
            raise ReportProblem(path, f"is {v}, not a finite number")
        if integer and abs(v) > MAX_INTEGER:
            raise ReportProblem(path, f"is {_shown(v)}; no count or index of a recorded trace is above 2^53")
        if low is not None and v < low:
            raise ReportProblem(path, f"is {_shown(v)}; it cannot be less than {low:g}")
        if high is not None and v > high + (_SHARE_SLACK if high == 1 else 0):
            raise ReportProblem(path, f"is {_shown(v)}; it cannot be more than {high:g}"
                                + (" (a share: 1 is 100%)" if high == 1 else ""))

    return check


def _text(nullable: bool = False) -> Check:
    def check(v: Any, path: str) -> None:
        if not (isinstance(v, str) or (nullable and v is None)):
            raise ReportProblem(path, f"is {_shown(v)}, not a string" + (" or null" if nullable else ""))

    return check


def _one_of(*choices: str) -> Check:
    def check(v: Any, path: str) -> None:
        if v not in choices:
            raise ReportProblem(path, f"is {_shown(v)}, not one of {', '.join(choices)}")

    return check


def _list(item: Check, nullable: bool = False) -> Check:
    def check(v: Any, path: str) -> None:
        if v is None and nullable:
            return
        if not isinstance(v, list):
            raise ReportProblem(path, f"is {_shown(v)}, not a list")
        for i, x in enumerate(v):
            item(x, f"{path}[{i}]")

    return check


def _map(value: Check) -> Check:
    """An object whose keys are names and whose every value passes ``value``."""

    def check(v: Any, path: str) -> None:
        if not isinstance(v, dict):
            raise ReportProblem(path, f"is {_shown(v)}, not an object")
        for k, x in v.items():
            value(x, _join(path, k))

    return check


def _object(required: Mapping[str, Check], optional: Mapping[str, Check] | None = None,
            nullable: bool = False) -> Check:
    """An object with these fields (unknown ones are a later minor version's: ignored, as the policy says)."""

    def check(v: Any, path: str) -> None:
        if v is None and nullable:
            return
        if not isinstance(v, dict):
            raise ReportProblem(path, f"is {_shown(v)}, not an object")
        for name, field_check in required.items():
            if name not in v:
                raise ReportProblem(_join(path, name), "is missing")
            field_check(v[name], _join(path, name))
        for name, field_check in (optional or {}).items():
            if name in v:
                field_check(v[name], _join(path, name))

    return check


def max_step_us() -> float:
    """The ceiling on one step's duration in µs: ``GPUPROF_MAX_STEP_S`` seconds, else :data:`MAX_STEP_S` (an
    InputError naming the variable when it is not a positive number)."""
    from gpuprof.limits import env_seconds

    return env_seconds(MAX_STEP_ENV, MAX_STEP_S) * 1e6


def _seconds(us: float) -> str:
    s = us / 1e6
    return f"{s:,.0f} s" if s < 1e6 else f"{s:.3g} s"


def _duration(per_step: bool, nullable: bool = False, signed: bool = False, scale: float = 1.0) -> Check:
    """A duration (µs; ``scale`` 1000 for ms) not negative (unless ``signed``: a time from an origin), not
    beyond its ceiling: one step's (``per_step``), or 2^53 µs for anything else (module docstring)."""
    base = _number(low=None if signed else 0.0, nullable=nullable)

    def check(v: Any, path: str) -> None:
        base(v, path)
        if v is None:
            return
        if abs(v) > MAX_TRACE_US / scale:  # compared before any arithmetic: 10**400 (an int) has no float
            raise ReportProblem(path, f"is {_shown(v)}; no recorded time is beyond 2^53 µs (285 years)")
        us = abs(v) * scale
        if per_step:
            ceiling = max_step_us()
            if us > ceiling:
                raise ReportProblem(path, f"is {_shown(v)} ({_seconds(us)}): no step lasts longer than "
                                          f"{_seconds(ceiling)} ({MAX_STEP_ENV} raises the ceiling)")

    return check


_US = _duration(per_step=False)  # a duration in µs, over a trace (a total)
_US_OR_NULL = _duration(per_step=False, nullable=True)
_STEP_US = _duration(per_step=True)  # a duration in µs within one step (a step, a part of one, a cost per step)
_STEP_US_OR_NULL = _duration(per_step=True, nullable=True)
_COUNT = _number(low=0, integer=True)
_SHARE = _number(low=0.0, high=1.0)
_SHARE_OR_NULL = _number(low=0.0, high=1.0, nullable=True)
_TEXTS = _list(_text())

_DEVICE = _object({}, {"id": _number(integer=True), "name": _text(), "total_memory": _number(low=0, integer=True, nullable=True),
                       "num_sms": _number(low=0, integer=True, nullable=True), "vendor": _text(),
                       "compute_capability": _list(_number(low=0, integer=True), nullable=True)})
_TOP_KERNEL = _object({"name": _text(), "count": _COUNT, "total_us": _US},
                      {"mean_us": _US, "share_of_gpu": _SHARE})
_TOP_OP = _object({"name": _text(), "count": _COUNT, "total_us": _US},
                  {"self_us": _US, "gpu_us": _US, "gpu_total_us": _US})
_COPY = _object({"count": _COUNT, "total_us": _US},
                {"direction": _text(), "memory": _text(), "bytes": _number(low=0, integer=True),
                 "bandwidth_gbps": _number(low=0.0, nullable=True)})
_SYNC = _object({"count": _COUNT, "total_us": _US}, {"cause": _text(), "runtime": _text(), "location": _text(nullable=True)})
_FLOPS = {"flops": _number(low=0.0, nullable=True), "flops_source": _text(nullable=True),
          "tflops": _number(low=0.0, nullable=True)}
_VIEW_OPERATOR = _object({"name": _text()}, {
    "input_shapes": _text(nullable=True), "calls": _COUNT, "cpu_total_us": _US, "cpu_self_us": _US,
    "gpu_self_us": _US, "gpu_total_us": _US, "stacks": _TEXTS, **_FLOPS})
_DIMS = _list(_number(low=0, integer=True), nullable=True)
_VIEW_KERNEL = _object({"name": _text()}, {
    "calls": _COUNT, "total_us": _US, "mean_us": _US, "max_us": _US, "tensor_cores": lambda v, p: _bool(v, p, True),
    "op_dtype": _text(nullable=True), "precision": _text(nullable=True), **_FLOPS,
    "mfu": _number(low=0.0, nullable=True),  # against a peak table: an estimate, not bounded by 1
    "grid": _DIMS, "block": _DIMS, "registers_per_thread": _number(low=0, integer=True, nullable=True),
    "occupancy": _SHARE_OR_NULL, "reference_mfu": _number(low=0.0, nullable=True)})
_MFU_FIELDS = {"mfu": _number(low=0.0, nullable=True), "known_flops_share": _SHARE_OR_NULL,
               "peak_precision": _text(nullable=True), "reference_mfu": _number(low=0.0, nullable=True)}
_VIEW_SCOPE = _object({"name": _text()}, {"calls": _COUNT, "cpu_total_us": _US, "gpu_self_us": _US, "gpu_total_us": _US,
                                          **_MFU_FIELDS})
_MFU = _object({}, {"value": _number(low=0.0, nullable=True), "known_flops_share": _SHARE_OR_NULL,
                    "no_peak_share": _SHARE_OR_NULL, "peak_source": _text(nullable=True),
                    "flops_per_step": _number(low=0.0, nullable=True), "flops_by_precision": _map(_number(low=0.0)),
                    "per_module": _list(_object({"name": _text()}, {"gpu_total_us": _US, **_MFU_FIELDS})),
                    "peak_precision": _text(nullable=True), "reference_value": _number(low=0.0, nullable=True),
                    "reference_precision": _text(nullable=True)},
               nullable=True)
_VIEWS = _object({}, {"version": _number(low=1, integer=True), "kernel_total_us": _US, "unattributed_gpu_us": _US,
                      "peak_device": _text(nullable=True), "reference_precision": _text(nullable=True),
                      "operators": _list(_VIEW_OPERATOR),
                      "kernels": _list(_VIEW_KERNEL), "modules": _list(_VIEW_SCOPE), "ranges": _list(_VIEW_SCOPE)},
                 nullable=True)

# the critical path (1.5, docs/critical-path.md): parts of the mean step, each a duration
_CRITICAL_PART = _object({"kind": _text(), "name": _text(), "us": _STEP_US}, {})
_CRITICAL_PATH = _object({"length_us": _STEP_US, "parts": _list(_CRITICAL_PART)}, {"host_ahead_us": _STEP_US}, nullable=True)

def _row(*cells: Check) -> Check:
    """A list of exactly these cells (a timeline's event row or critical segment)."""

    def check(v: Any, path: str) -> None:
        if not isinstance(v, list) or len(v) != len(cells):
            raise ReportProblem(path, f"is {_shown(v)}, not a list of {len(cells)} values")
        for i, (x, c) in enumerate(zip(v, cells)):
            c(x, f"{path}[{i}]")

    return check


_INDEX = _number(low=0, integer=True)
_TIME = _duration(per_step=False, signed=True)  # from the timeline's origin: an event that began before the first step is negative
_TIMELINE = _object({}, {
    "version": _number(low=1, integer=True), "origin_us": _TIME, "span_us": _US, "resolution_us": _US, "step_resolution_us": _US,
    "events_total": _COUNT, "events_kept": _COUNT, "left_out": _map(_COUNT), "kinds": _TEXTS, "names": _TEXTS,
    "lanes": _list(_object({"id": _text(), "kind": _text(), "label": _text()}, {
        "events": _list(_row(_TIME, _US, _INDEX, _INDEX, _INDEX, _number(low=1, integer=True))),
        "total": _COUNT, "depth": _COUNT})),
    "steps": _list(_object({"id": _number(integer=True), "start_us": _TIME, "end_us": _TIME})),
    "critical_step": _number(low=0, integer=True, nullable=True),
    "critical": _list(_row(_text(), _TIME, _TIME, _text(), _text(), _number(low=1, integer=True))),
    "markers": _list(_object({"code": _text(), "lane": _text(), "start_us": _TIME, "end_us": _TIME}, {"where": _text()})),
}, nullable=True)

# the fields of a trace summary that `gpuprof diff` computes with; every 1.x report has these
_TRACE = _object(
    {"path": _text(), "num_steps": _COUNT, "step_time_us": _STEP_US, "step_time_mean_us": _STEP_US,
     "gpu_busy_us": _STEP_US, "gpu_utilization": _SHARE_OR_NULL, "breakdown_us": _map(_STEP_US),
     "idle_breakdown_us": _map(_STEP_US)},
    {"devices": _list(_DEVICE), "has_gpu_activity": lambda v, p: _bool(v, p), "step_ids": _list(_number(integer=True)),
     "lead_in_us": _US_OR_NULL, "top_kernels": _list(_TOP_KERNEL), "top_ops": _list(_TOP_OP), "copies": _list(_COPY),
     "syncs": _list(_SYNC), "rank": _number(low=0, integer=True, nullable=True),
     "world_size": _number(low=1, integer=True, nullable=True), "num_events": _COUNT,
     "file_bytes": _number(low=0, integer=True), "notes": _TEXTS, "step_times_us": _list(_STEP_US), "views": _VIEWS,
     "data_loading_share": _SHARE_OR_NULL, "mfu": _MFU, "comm_wait_us": _STEP_US_OR_NULL,
     "comm_wait_source": _text(nullable=True), "gpu_working_utilization": _SHARE_OR_NULL,
     "critical_path": _CRITICAL_PATH,
     "timeline": _TIMELINE, "cause_per_step": _map(_list(_number(low=0.0)))},
)

_LOCATION = _object({"file": _text()}, {"line": _number(integer=True, nullable=True), "function": _text(nullable=True)},
                    nullable=True)
_EVENT = _object({"name": _text(), "ts": _duration(per_step=False, signed=True)}, {"dur": _US})
_EVIDENCE = _object({"metric": _text()}, {"threshold": _number(nullable=True), "unit": _text(), "events": _list(_EVENT),
                                          "extra": _map(lambda v, p: None)})
_LINK = _object({"kind": _text(), "code": _text()}, {"part": _text(nullable=True),
                                                      "count": _number(low=0, integer=True, nullable=True)})
_FINDING = _object(
    {"code": _text()},
    {"name": _text(), "severity": _one_of("info", "warning", "error"), "message": _text(), "advice": _text(), "evidence": _list(_EVIDENCE), "cost_us_per_step": _STEP_US_OR_NULL, "cost_share": _SHARE_OR_NULL,
     "location": _LOCATION, "origin": _text(), "source": _text(nullable=True), "links": _list(_LINK),
     "what_if_saving_us": _STEP_US_OR_NULL, "what_if_note": _text(nullable=True)},
)

# a capture's job (1.3): the step times it measured, each one step's (its other fields: the typed reader's)
_STEP_FIGURES = {k: _STEP_US for k in ("step_time_median_us", "step_time_min_us", "step_time_p90_us",
                                        "step_time_max_us")}
_JOB = _object({}, {
    "phases": _list(_object({}, _STEP_FIGURES)),
    "series": _object({}, {k: _list(_STEP_US) for k in ("step_time_us", "step_time_min_us", "step_time_max_us")},
                      nullable=True),
}, nullable=True)

_REPORT = _object(
    {"schema_version": _text()},
    {"command": _text(), "inputs": _TEXTS, "traces": _list(_TRACE), "findings": _list(_FINDING), "job": _JOB,
     "sections": _list(lambda v, p: _section(v, p)), "notes": _TEXTS, "failed_rules": _TEXTS, "failed_ranks": _TEXTS},
)


# sections gpuprof writes only with ranks in them: an emptied list would read as a job without findings
_RANKED_SECTIONS = ("cross_rank", "rank_summaries")


def _section(v: Any, path: str) -> None:
    _object({"kind": _text()})(v, path)
    if v["kind"] == "capture":  # its median step (ms) stands for the run's in `gpuprof history` without traces
        _object({}, {"step_time_median_ms": _duration(per_step=True, nullable=True, scale=1000.0)})(v, path)
    if v["kind"] in _RANKED_SECTIONS:
        ranks = v.get("ranks")
        if not isinstance(ranks, list):
            raise ReportProblem(_join(path, "ranks"), f"is {_shown(ranks)}, not a list")
        if not ranks:
            raise ReportProblem(_join(path, "ranks"), f"is empty: a {v['kind']} section describes at least one rank")


def _bool(v: Any, path: str, nullable: bool = False) -> None:
    if not (isinstance(v, bool) or (nullable and v is None)):
        raise ReportProblem(path, f"is {_shown(v)}, not true or false" + (" or null" if nullable else ""))


def first_non_finite(doc: Any, root: str = "") -> str | None:
    """The path of the first NaN or infinite number anywhere in ``doc`` (a JSON value), or None.

    Iterative: a report nested as deep as the JSON reader allows is walked without recursion.
    """
    stack: list[tuple[Any, str]] = [(doc, root)]
    while stack:
        v, path = stack.pop()
        if isinstance(v, float):
            if not math.isfinite(v):
                return path or "(the whole document)"
        elif isinstance(v, dict):
            stack.extend((x, _join(path, k)) for k, x in reversed(list(v.items())))
        elif isinstance(v, list):
            stack.extend((x, f"{path}[{i}]") for i, x in reversed(list(enumerate(v))))
    return None


def _counts_of(t: Mapping[str, Any], path: str) -> list[tuple[str, Any]]:
    """(field, value) of every count of the trace summary ``t`` that counts some of its events."""
    out: list[tuple[str, Any]] = [(_join(path, "num_steps"), t.get("num_steps"))]
    for key in ("top_kernels", "top_ops", "copies", "syncs"):
        out += [(f"{path}.{key}[{i}].count", x.get("count")) for i, x in enumerate(t.get(key) or [])]
    views = t.get("views") or {}
    for key in ("operators", "kernels", "modules", "ranges"):
        out += [(f"{path}.views.{key}[{i}].calls", x.get("calls")) for i, x in enumerate(views.get(key) or [])]
    timeline = t.get("timeline") or {}
    out.append((f"{path}.timeline.events_total", timeline.get("events_total")))
    out += [(f"{path}.timeline.lanes[{i}].total", x.get("total")) for i, x in enumerate(timeline.get("lanes") or [])]
    return out


def _check_counts(doc: Mapping[str, Any]) -> None:
    """No count of a trace's events above the trace's ``num_events`` (where the summary gives it); no more step
    times than steps; a timeline keeps no more events than it had (the types were checked before)."""
    for i, t in enumerate(doc.get("traces") or []):
        path = f"traces[{i}]"
        events = t.get("num_events")
        if isinstance(events, int):
            for field, n in _counts_of(t, path):
                if isinstance(n, int) and n > max(events, 1):  # a trace without events is one step
                    raise ReportProblem(field, f"is {n:,}, more than the {events:,} events of the trace "
                                               f"({path}.num_events)")
        times = t.get("step_times_us")
        if isinstance(times, list) and len(times) > max(t["num_steps"], 1):
            raise ReportProblem(_join(path, "step_times_us"), f"holds {len(times):,} step times for "
                                                              f"{t['num_steps']:,} steps ({path}.num_steps)")
        timeline = t.get("timeline") or {}
        kept, total = timeline.get("events_kept"), timeline.get("events_total")
        if isinstance(kept, int) and isinstance(total, int) and kept > total:
            raise ReportProblem(f"{path}.timeline.events_kept", f"is {kept:,}, more than the {total:,} events "
                                                                 f"it kept them from ({path}.timeline.events_total)")


def check_report(doc: Mapping[str, Any]) -> None:
    """Raise :class:`ReportProblem` for the first value of ``doc`` (a parsed report) that does not fit the schema."""
    bad = first_non_finite(doc)
    if bad is not None:
        raise ReportProblem(bad, "is NaN or infinite, not a finite number")
    _REPORT(doc, "")
    _check_counts(doc)


def check_finding(d: Any, path: str = "finding") -> None:
    """Raise :class:`ReportProblem` when ``d`` is not a finding's JSON form (types and ranges, as above)."""
    bad = first_non_finite(d, path)
    if bad is not None:
        raise ReportProblem(bad, "is NaN or infinite, not a finite number")
    _FINDING(d, path)

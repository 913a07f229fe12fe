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
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping

__all__ = ["ReportProblem", "check_report", "check_finding", "first_non_finite"]

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


_US = _number(low=0.0)  # a duration in µs
_US_OR_NULL = _number(low=0.0, nullable=True)
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
    "occupancy": _SHARE_OR_NULL})
_MFU_FIELDS = {"mfu": _number(low=0.0, nullable=True), "known_flops_share": _SHARE_OR_NULL}
_VIEW_SCOPE = _object({"name": _text()}, {"calls": _COUNT, "cpu_total_us": _US, "gpu_self_us": _US, "gpu_total_us": _US,
                                          **_MFU_FIELDS})
_MFU = _object({}, {"value": _number(low=0.0, nullable=True), "known_flops_share": _SHARE_OR_NULL,
                    "no_peak_share": _SHARE_OR_NULL, "peak_source": _text(nullable=True),
                    "flops_per_step": _number(low=0.0, nullable=True), "flops_by_precision": _map(_number(low=0.0)),
                    "per_module": _list(_object({"name": _text()}, {"gpu_total_us": _US, **_MFU_FIELDS}))},
               nullable=True)
_VIEWS = _object({}, {"version": _number(low=1, integer=True), "kernel_total_us": _US, "unattributed_gpu_us": _US,
                      "peak_device": _text(nullable=True), "operators": _list(_VIEW_OPERATOR),
                      "kernels": _list(_VIEW_KERNEL), "modules": _list(_VIEW_SCOPE), "ranges": _list(_VIEW_SCOPE)},
                 nullable=True)

# the critical path (1.5, docs/critical-path.md): parts of the mean step, each a duration
_CRITICAL_PART = _object({"kind": _text(), "name": _text(), "us": _US}, {})
_CRITICAL_PATH = _object({"length_us": _US, "parts": _list(_CRITICAL_PART)}, {}, nullable=True)

def _row(*cells: Check) -> Check:
    """A list of exactly these cells (a timeline's event row or critical segment)."""

    def check(v: Any, path: str) -> None:
        if not isinstance(v, list) or len(v) != len(cells):
            raise ReportProblem(path, f"is {_shown(v)}, not a list of {len(cells)} values")
        for i, (x, c) in enumerate(zip(v, cells)):
            c(x, f"{path}[{i}]")

    return check


_INDEX = _number(low=0, integer=True)
_TIME = _number()  # relative to the timeline's origin: an event that began before the first step is negative
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
    {"path": _text(), "num_steps": _COUNT, "step_time_us": _US, "step_time_mean_us": _US, "gpu_busy_us": _US,
     "gpu_utilization": _SHARE_OR_NULL, "breakdown_us": _map(_US), "idle_breakdown_us": _map(_US)},
    {"devices": _list(_DEVICE), "has_gpu_activity": lambda v, p: _bool(v, p), "step_ids": _list(_number(integer=True)),
     "lead_in_us": _US_OR_NULL, "top_kernels": _list(_TOP_KERNEL), "top_ops": _list(_TOP_OP), "copies": _list(_COPY),
     "syncs": _list(_SYNC), "rank": _number(low=0, integer=True, nullable=True),
     "world_size": _number(low=1, integer=True, nullable=True), "num_events": _COUNT,
     "file_bytes": _number(low=0, integer=True), "notes": _TEXTS, "step_times_us": _list(_US), "views": _VIEWS,
     "data_loading_share": _SHARE_OR_NULL, "mfu": _MFU, "comm_wait_us": _US_OR_NULL,
     "comm_wait_source": _text(nullable=True), "gpu_working_utilization": _SHARE_OR_NULL,
     "critical_path": _CRITICAL_PATH,
     "timeline": _TIMELINE, "cause_per_step": _map(_list(_number(low=0.0)))},
)

_LOCATION = _object({"file": _text()}, {"line": _number(integer=True, nullable=True), "function": _text(nullable=True)},
                    nullable=True)
_EVENT = _object({"name": _text(), "ts": _number()}, {"dur": _US})
_EVIDENCE = _object({"metric": _text()}, {"threshold": _number(nullable=True), "unit": _text(), "events": _list(_EVENT),
                                          "extra": _map(lambda v, p: None)})
_LINK = _object({"kind": _text(), "code": _text()}, {"part": _text(nullable=True),
                                                      "count": _number(low=0, integer=True, nullable=True)})
_FINDING = _object(
    {"code": _text()},
    {"name": _text(), "severity": _one_of("info", "warning", "error"), "message": _text(), "advice": _text(), "evidence": _list(_EVIDENCE), "cost_us_per_step": _US_OR_NULL, "cost_share": _SHARE_OR_NULL,
     "location": _LOCATION, "origin": _text(), "source": _text(nullable=True), "links": _list(_LINK),
     "what_if_saving_us": _US_OR_NULL, "what_if_note": _text(nullable=True)},
)

_REPORT = _object(
    {"schema_version": _text()},
    {"command": _text(), "inputs": _TEXTS, "traces": _list(_TRACE), "findings": _list(_FINDING),
     "sections": _list(lambda v, p: _section(v, p)), "notes": _TEXTS, "failed_rules": _TEXTS, "failed_ranks": _TEXTS},
)


# sections gpuprof writes only with ranks in them: an emptied list would read as a job without findings
_RANKED_SECTIONS = ("cross_rank", "rank_summaries")


def _section(v: Any, path: str) -> None:
    _object({"kind": _text()})(v, path)
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


def check_report(doc: Mapping[str, Any]) -> None:
    """Raise :class:`ReportProblem` for the first value of ``doc`` (a parsed report) that does not fit the schema."""
    bad = first_non_finite(doc)
    if bad is not None:
        raise ReportProblem(bad, "is NaN or infinite, not a finite number")
    _REPORT(doc, "")


def check_finding(d: Any, path: str = "finding") -> None:
    """Raise :class:`ReportProblem` when ``d`` is not a finding's JSON form (types and ranges, as above)."""
    bad = first_non_finite(d, path)
    if bad is not None:
        raise ReportProblem(bad, "is NaN or infinite, not a finite number")
    _FINDING(d, path)

"""Checking a saved report before anything is computed from it: what its types cannot say.

A ``report.json`` read back (``gpuprof diff``, ``gpuprof analyze report.json``, ``gpuprof history``, the
TensorBoard tab, a capture run's runtime findings) may have been edited, truncated by hand, or written by a
stranger. Python's JSON reader takes ``NaN`` and ``Infinity`` (and ``1e999`` becomes infinite), and a diff's
arithmetic would turn a string, a NaN or a negative duration into a figure: a ``--fail-on-regression`` gate
could then pass on a report whose step time is not a number. So :func:`saved_report` refuses, as a
:class:`ReportProblem` naming the field (``traces[0].step_time_us``; callers turn it into one line naming the
file, exit 2):

* a NaN or infinite number anywhere, open maps included (:func:`first_non_finite`);
* a value of the wrong type or outside its range: the types of :mod:`gpuprof.saved.types` (durations, sizes
  and counts not negative, shares between 0 and 1, times and counts within 2^53, a known severity);
* what a type cannot say: a duration of one step (a step time, a part of its breakdown, a finding's cost per
  step, the critical path) of more than :data:`MAX_STEP_S` (one day; ``GPUPROF_MAX_STEP_S`` raises it), a
  count of a trace's events (launches, calls, copies, steps, a timeline's events) above the trace's
  ``num_events``, more step times than steps, a section without a kind, a ranked section without ranks.

Such a value is no measurement, and the arithmetic of a diff or a history would overflow it to infinity or
NaN: ``1e308`` as a step time would turn a ``--fail-on-regression`` gate into "within the noise".
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Iterator

import msgspec

from gpuprof.report import MAX_TRACE_US
from gpuprof.saved.types import SHARE_CEILING, SavedFinding, SavedReport, SavedTrace

__all__ = ["ReportProblem", "saved_report", "problem_of", "first_non_finite", "MAX_STEP_S", "MAX_STEP_ENV", "max_step_us"]

MAX_STEP_S = 86_400.0  # one day: the longest step a saved report may hold (docs/limits.md)
MAX_STEP_ENV = "GPUPROF_MAX_STEP_S"
# sections gpuprof writes only with ranks in them: an emptied list would read as a job without findings
_RANKED_SECTIONS = ("cross_rank", "rank_summaries")


class ReportProblem(ValueError):
    """A value of a saved report that does not fit the schema: ``field`` (a JSON path) and what is wrong."""

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        self.problem = problem
        super().__init__(f"{field}: {problem}")


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def max_step_us() -> float:
    """The ceiling on one step's duration in µs: ``GPUPROF_MAX_STEP_S`` seconds, else :data:`MAX_STEP_S` (an
    InputError naming the variable when it is not a positive number)."""
    from gpuprof.limits import env_seconds

    return env_seconds(MAX_STEP_ENV, MAX_STEP_S) * 1e6


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
            stack.extend((x, f"{path}.{k}" if path else str(k)) for k, x in reversed(list(v.items())))
        elif isinstance(v, list):
            stack.extend((x, f"{path}[{i}]") for i, x in reversed(list(enumerate(v))))
    return None


_AT = re.compile(r" - at `\$(.*)`$")
_BOUND = re.compile(r"^Expected `(\w+)` (>=|<=) (\S+)$")
_WRONG = re.compile(r"^Expected `(.+)`, got `(\w+)`$")
_MISSING = re.compile(r"^Object missing required field `(.+)`$")
_WHAT = {"float": "a number", "int": "an integer", "str": "a string", "bool": "true or false", "array": "a list",
         "object": "an object"}


def _value_at(doc: Any, path: str) -> Any:
    for key in re.findall(r"\.([^.\[]+)|\[(\d+)\]", path):
        try:
            doc = doc[int(key[1])] if key[1] else doc[key[0]]
        except (LookupError, TypeError, ValueError):
            return None
    return doc


def _keyed(doc: Any, where: str, error: str, type_: Any) -> str:
    """``where`` with msgspec's ``[...]`` (a value of a map, unnamed) replaced by the key whose value fails: the
    map halved until one key is left whose value fails as the whole did (a few conversions for any size)."""
    head, _, tail = where.partition("[...]")
    mapping = _value_at(doc, head)
    if not isinstance(mapping, dict):
        return where
    items = list(mapping.items())
    left = items
    try:
        while len(left) > 1:
            mapping.clear()
            mapping.update(left[:len(left) // 2])
            try:
                msgspec.convert(doc, type_)
                same = False
            except msgspec.ValidationError as err:
                same = str(err) == error  # the first failing value is in this half
            left = left[:len(left) // 2] if same else left[len(left) // 2:]
    finally:
        mapping.clear()
        mapping.update(items)
    return f"{head}.{left[0][0]}{tail}" if left else where


def problem_of(err: msgspec.ValidationError, doc: Any, root: str, type_: Any) -> ReportProblem:
    """msgspec's message (``Expected `float` >= 0.0 - at `$.traces[0].gpu_busy_us```) in the report's words."""
    text = str(err)
    at = _AT.search(text)
    where = at.group(1) if at else ""
    text = text[:at.start()] if at else text
    if "[...]" in where:
        where = _keyed(doc, where, str(err), type_)
    field = (root + where).lstrip(".") or "(the whole document)"
    if (m := _MISSING.match(text)) is not None:
        return ReportProblem(f"{field}.{m.group(1)}" if where or root else m.group(1), "is missing")
    value = _value_at(doc, where)
    if (m := _BOUND.match(text)) is not None or text == "Number out of range":
        bound = float(m.group(3)) if m else MAX_TRACE_US
        if abs(bound) >= MAX_TRACE_US / 1000:  # the 2^53 µs ceiling (in ms too)
            return ReportProblem(field, f"is {_shown(value)}; no recorded time, size or count is beyond 2^53 "
                                        "(285 years in µs)")
        if bound == SHARE_CEILING:
            return ReportProblem(field, f"is {_shown(value)}; it cannot be more than 1 (a share: 1 is 100%)")
        assert m is not None
        return ReportProblem(field, f"is {_shown(value)}; it cannot be {'less' if m.group(2) == '>=' else 'more'} "
                                    f"than {bound:g}")
    if (m := _WRONG.match(text)) is not None:
        want = " or ".join(_WHAT.get(t.strip("`"), t.strip("`")) for t in m.group(1).split(" | "))
        return ReportProblem(field, f"is {_shown(value)}, not {want.replace('None', 'null')}")
    if text.startswith("Invalid enum value"):  # the one Literal of the types: a finding's severity
        return ReportProblem(field, f"is {_shown(value)}, not one of info, warning, error")
    return ReportProblem(field, f"is {_shown(value)}: {text[0].lower()}{text[1:]}")


def _per_step(t: SavedTrace, path: str) -> Iterator[tuple[str, float]]:
    """(field, µs) of every duration of one step in the trace summary ``t``."""
    yield from ((f"{path}.{k}", getattr(t, k)) for k in ("step_time_us", "step_time_mean_us", "gpu_busy_us"))
    for key in ("breakdown_us", "idle_breakdown_us"):
        yield from ((f"{path}.{key}.{k}", v) for k, v in getattr(t, key).items())
    yield from ((f"{path}.step_times_us[{i}]", v) for i, v in enumerate(t.step_times_us))
    if t.comm_wait_us is not None:
        yield f"{path}.comm_wait_us", t.comm_wait_us
    if (c := t.critical_path) is not None:
        yield f"{path}.critical_path.length_us", c.length_us
        yield f"{path}.critical_path.host_ahead_us", c.host_ahead_us
        yield from ((f"{path}.critical_path.parts[{i}].us", p.us) for i, p in enumerate(c.parts))


def _finding_per_step(f: SavedFinding, path: str) -> Iterator[tuple[str, float]]:
    for key in ("cost_us_per_step", "what_if_saving_us"):
        if (v := getattr(f, key)) is not None:
            yield f"{path}.{key}", v


def _all_per_step(r: SavedReport) -> Iterator[tuple[str, float]]:
    for i, t in enumerate(r.traces):
        yield from _per_step(t, f"traces[{i}]")
    for i, f in enumerate(r.findings):
        yield from _finding_per_step(f, f"findings[{i}]")
    if r.job is not None:
        for i, p in enumerate(r.job.phases):
            yield from ((f"job.phases[{i}].{k}", getattr(p, k)) for k in
                        ("step_time_median_us", "step_time_min_us", "step_time_p90_us", "step_time_max_us"))
        for key in ("step_time_us", "step_time_min_us", "step_time_max_us"):
            yield from ((f"job.series.{key}[{i}]", v) for i, v in enumerate(getattr(r.job.series, key, [])))


def _check_steps(values: Iterator[tuple[str, float]], scale: float = 1.0) -> None:
    ceiling = max_step_us()
    for field, v in values:
        if v * scale > ceiling:
            raise ReportProblem(field, f"is {_shown(v)} ({_seconds(v * scale)}): no step lasts longer than "
                                       f"{_seconds(ceiling)} ({MAX_STEP_ENV} raises the ceiling)")


def _seconds(us: float) -> str:
    s = us / 1e6
    return f"{s:,.0f} s" if s < 1e6 else f"{s:.3g} s"


def _counts_of(t: SavedTrace, path: str) -> Iterator[tuple[str, int]]:
    """(field, value) of every count of the trace summary ``t`` that counts some of its events."""
    yield f"{path}.num_steps", t.num_steps
    for key in ("top_kernels", "top_ops", "copies", "syncs"):
        yield from ((f"{path}.{key}[{i}].count", x.count) for i, x in enumerate(getattr(t, key)))
    for key in ("operators", "kernels", "modules", "ranges"):
        yield from ((f"{path}.views.{key}[{i}].calls", x.calls) for i, x in enumerate(getattr(t.views, key, [])))
    if t.timeline is not None:
        yield f"{path}.timeline.events_total", t.timeline.events_total
        yield from ((f"{path}.timeline.lanes[{i}].total", x.total) for i, x in enumerate(t.timeline.lanes))


def _check_counts(r: SavedReport) -> None:
    """No count of a trace's events above the trace's ``num_events`` (where the summary gives it); no more step
    times than steps; a timeline keeps no more events than it had."""
    for i, t in enumerate(r.traces):
        path = f"traces[{i}]"
        if isinstance(t.num_events, int):
            for field, n in _counts_of(t, path):
                if n > max(t.num_events, 1):  # a trace without events is one step
                    raise ReportProblem(field, f"is {n:,}, more than the {t.num_events:,} events of the trace "
                                               f"({path}.num_events)")
        if len(t.step_times_us) > max(t.num_steps, 1):
            raise ReportProblem(f"{path}.step_times_us", f"holds {len(t.step_times_us):,} step times for "
                                                         f"{t.num_steps:,} steps ({path}.num_steps)")
        if t.timeline is not None and t.timeline.events_kept > t.timeline.events_total:
            raise ReportProblem(f"{path}.timeline.events_kept",
                                f"is {t.timeline.events_kept:,}, more than the {t.timeline.events_total:,} events "
                                f"it kept them from ({path}.timeline.events_total)")


def _check_sections(r: SavedReport) -> None:
    for i, s in enumerate(r.sections):
        path = f"sections[{i}]"
        kind = s.get("kind")
        if not isinstance(kind, str):
            raise ReportProblem(f"{path}.kind", "is missing" if kind is None else f"is {_shown(kind)}, not a string")
        if kind == "capture":  # its median step (ms) stands for the run's in `gpuprof history` without traces
            try:
                ms = msgspec.convert(s, _Capture).step_time_median_ms
            except msgspec.ValidationError as err:
                raise problem_of(err, s, path, _Capture) from None
            if ms is not None:
                _check_steps(iter([(f"{path}.step_time_median_ms", ms)]), 1000.0)
        if kind in _RANKED_SECTIONS:
            ranks = s.get("ranks")
            if not isinstance(ranks, list):
                raise ReportProblem(f"{path}.ranks", f"is {_shown(ranks)}, not a list")
            if not ranks:
                raise ReportProblem(f"{path}.ranks", f"is empty: a {kind} section describes at least one rank")


class _Capture(msgspec.Struct):
    step_time_median_ms: Annotated[float, msgspec.Meta(ge=0.0, le=MAX_TRACE_US / 1000)] | None = None


def saved_report(doc: Any) -> SavedReport:
    """``doc`` (a parsed report) as a :class:`SavedReport`, or :class:`ReportProblem` for the first value of it
    that does not fit the schema (module docstring)."""
    bad = first_non_finite(doc)
    if bad is not None:
        raise ReportProblem(bad, "is NaN or infinite, not a finite number")
    try:
        report = msgspec.convert(doc, SavedReport)
    except msgspec.ValidationError as err:
        raise problem_of(err, doc, "", SavedReport) from None
    _check_steps(_all_per_step(report))
    _check_counts(report)
    _check_sections(report)
    return report

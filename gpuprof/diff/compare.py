"""Compare two reports (before → after): the diff document of docs/diff.md.

Input: two reports in their JSON form (``Report.to_dict()``, a saved
``report.json``, or the plugin's run view turned into one). Every figure of a
side is taken over all its traces (every rank and every span), per step:

* **step time**: the median of all the side's steps pooled; **mean step**:
  total step time / steps. **Breakdown and idle parts**, **GPU busy**: means
  per step weighted by each trace's steps; **GPU utilisation**: busy / step
  time over the traces with GPU activity.
* **noise** of the step time: twice the standard error of the difference of
  the two sides' step times, ``2·sqrt(σb²/nb + σa²/na)``, with σ the robust
  spread of each side's steps (1.4826 × median absolute deviation); None when
  a side has fewer than 2 steps. :mod:`gpuprof.diff.gate` explains its use.
* **operators** (by name and input shapes) and **kernels** (by name): time per
  step, summed over the side's traces / its steps. A row is *changed* when its
  time moved by at least ``MIN_ROW_SHARE`` of the before mean step and
  ``MIN_ROW_CHANGE`` of its own before time; *added*/*removed* when it exists
  on one side only (with at least ``MIN_ROW_SHARE`` of the step).
* **findings** are matched by code and source location; a side's cost of a
  finding is its per-step cost weighted by the steps of the traces it was found
  in, over all the side's steps. For a removed finding, the *predicted* saving
  is that cost before; the *measured* change is the mean step time before minus
  after, and, for codes tied to one part of the step (``PART_OF_CODE``), that
  part's change too.
"""

from __future__ import annotations

import re
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from msgspec import UNSET

from gpuprof.diff.cause import cause_of, judge_cause, relation
from gpuprof.diff.whatif import what_if_gap
from gpuprof.saved.check import saved_report
from gpuprof.saved.figures import RunFigures, steps_of
from gpuprof.saved.types import SavedFinding, SavedReport, SavedTrace, given
from gpuprof.stats import mean_noise as mean_noise_us
from gpuprof.stats import noise_band as noise_band_us
from gpuprof.stats import rank_test_p
from gpuprof.trace.breakdown import BREAKDOWN_KEYS, IDLE_KEYS

__all__ = ["DIFF_SCHEMA_VERSION", "diff_reports", "Side", "side_from_report", "PART_OF_CODE", "METRICS"]

DIFF_SCHEMA_VERSION = "1.1"

# every metric a diff compares, in its order (`metrics[].name`): the parts of the step and of the GPU's idle time
# in the report's order
METRICS = ("step_time", "step_time_mean", "gpu_busy", "gpu_utilization", *(f"breakdown.{k}" for k in BREAKDOWN_KEYS),
           *(f"idle.{k}" for k in IDLE_KEYS), "gpu_idle")

MIN_ROW_SHARE = 0.002  # 0.2% of the before mean step
MIN_ROW_CHANGE = 0.05  # 5% of the row's own before time
MAX_ROWS = 200  # rows per list in the diff document

# the part of the step a finding's cost comes out of, when it is one part (metric names as in `metrics`)
PART_OF_CODE = {"GP101": "gpu_idle", "GP102": "breakdown.data_loading", "GP601": "breakdown.data_loading",
                "GP201": "idle.blocking_copy", "GP202": "idle.blocking_copy", "GP203": "idle.sync",
                "GP302": "breakdown.kernel"}


@dataclass
class Side:
    """One run, reduced to what the diff compares (see the module docstring)."""

    label: str
    traces: int = 0
    ranks: list[int] = field(default_factory=list)
    devices: list[str] = field(default_factory=list)
    step_times: list[float] = field(default_factory=list)
    metrics: dict[str, float | None] = field(default_factory=dict)  # per step (µs) or fraction
    per_rank_step: dict[int, float] = field(default_factory=dict)  # rank -> median step
    operators: dict[tuple[str, str | None], dict[str, float]] = field(default_factory=dict)  # per step
    kernels: dict[str, dict[str, float]] = field(default_factory=dict)  # per step
    findings: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    causes: dict[str, list[float]] = field(default_factory=dict)  # rule code -> its cause figure per step, pooled


def side_from_report(doc: Mapping[str, Any] | SavedReport, label: str) -> Side:
    """Reduce a report (its JSON form, checked and typed by :mod:`gpuprof.saved`, or the typed report) to a
    :class:`Side`; its step time and GPU utilisation are the run's :class:`~gpuprof.saved.RunFigures`."""
    report = doc if isinstance(doc, SavedReport) else saved_report(doc)
    traces = report.traces
    side = Side(label=label, traces=len(traces), step_times=steps_of(traces))
    total_steps = sum(t.num_steps for t in traces)
    parts: dict[str, float] = defaultdict(float)
    by_rank: dict[int, list[float]] = defaultdict(list)
    for t in traces:
        for values, prefix in ((t.breakdown_us, "breakdown."), (t.idle_breakdown_us, "idle.")):
            for k, v in values.items():
                parts[prefix + k] += v * t.num_steps
        if t.rank is not None:
            by_rank[t.rank] += steps_of([t])
        side.devices += [d.name for d in t.devices if d.name and d.name not in side.devices]
        _add_rows(side, t)
        for code, causes in t.cause_per_step.items():
            side.causes.setdefault(code, []).extend(causes)
    n = max(total_steps, 1)
    side.ranks = sorted(by_rank)
    side.per_rank_step = {r: statistics.median(v) for r, v in by_rank.items() if v}
    figures = RunFigures.of_traces(traces)
    m = side.metrics
    m["step_time"] = figures.step_time_us
    m["step_time_mean"] = sum(t.total_us() for t in traces) / total_steps if total_steps else None
    m["gpu_busy"] = sum(t.gpu_busy_us * t.num_steps for t in traces if t.gpu_utilization is not None) / n
    m["gpu_utilization"] = figures.gpu_utilization
    for k in BREAKDOWN_KEYS:
        m["breakdown." + k] = parts["breakdown." + k] / n
    for k in IDLE_KEYS:
        m["idle." + k] = parts["idle." + k] / n
    m["gpu_idle"] = sum(parts["idle." + k] for k in IDLE_KEYS) / n
    for rows in (side.operators, side.kernels):
        for row in rows.values():
            for k in row:
                if k != "calls":
                    row[k] /= n
    _add_findings(side, report.findings, {t.path: t.num_steps for t in traces}, total_steps)
    return side


_OP_FIELDS = ("calls", "cpu_self_us", "cpu_total_us", "gpu_self_us", "gpu_total_us")


def _add_rows(side: Side, t: SavedTrace) -> None:
    if t.views is not None:
        ops = [((o.name, o.input_shapes), (o.calls, o.cpu_self_us, o.cpu_total_us, o.gpu_self_us, o.gpu_total_us))
               for o in t.views.operators]
        kernels = [(k.name, k.calls, k.total_us) for k in t.views.kernels]
    else:  # an older report: the top operators and kernels, by name only
        ops = [((o.name, None), (o.count, o.self_us, o.total_us, o.gpu_us, o.gpu_total_us)) for o in t.top_ops]
        kernels = [(k.name, k.count, k.total_us) for k in t.top_kernels]
    for key, values in ops:
        row = side.operators.setdefault(key, defaultdict(float))
        for f, v in zip(_OP_FIELDS, values):
            row[f] += v
    for name, calls, total in kernels:
        krow = side.kernels.setdefault(name, defaultdict(float))
        krow["calls"] += calls
        krow["total_us"] += total


def _add_findings(side: Side, findings: Iterable[SavedFinding], steps_of: Mapping[str, int], total_steps: int) -> None:
    for f in findings:
        if not f.code:
            continue
        key = (f.code, f.where() or "")
        severity = None if f.severity is UNSET else f.severity
        got = side.findings.get(key)
        if got is None:
            got = side.findings[key] = {"code": f.code, "name": given(f.name), "location": key[1] or None,
                                        "severity": severity, "message": given(f.message), "cost_us_per_step": None,
                                        "what_if_us_per_step": None, "what_if_note": None, "count": 0}
        got["count"] += 1
        if _rank_of_severity(severity) > _rank_of_severity(got["severity"]):
            got["severity"] = severity
        # a trace's cost per step counts for that trace's steps; the side's cost is over all its steps
        n = steps_of.get(str(f.source), 0) or (total_steps if len(steps_of) <= 1 else 0)
        weight = n / total_steps if total_steps and n else 1.0
        if f.cost_us_per_step is not None:
            got["cost_us_per_step"] = (got["cost_us_per_step"] or 0.0) + f.cost_us_per_step * weight
        if f.what_if_saving_us is not None:  # the replayed saving (docs/critical-path.md), weighted the same way
            got["what_if_us_per_step"] = (got["what_if_us_per_step"] or 0.0) + f.what_if_saving_us * weight
        if f.what_if_note is not None and got["what_if_note"] is None:
            got["what_if_note"] = f.what_if_note


def _rank_of_severity(s: Any) -> int:
    return {"info": 0, "warning": 1, "error": 2}.get(str(s), -1)


# --------------------------------------------------------------------------- the comparison
FIXED_PART_SHARE = 0.25  # a fixed finding's part of the step shrinks by at least this share of its predicted saving
P_CHANGED = 0.05  # the rank test's level: a larger p leaves the step-time change within the noise


LOWER_IS_BETTER = {"gpu_utilization": False, "gpu_busy": False}  # everything else is a time: lower is better


def diff_reports(before: Mapping[str, Any] | SavedReport, after: Mapping[str, Any] | SavedReport,
                 labels: tuple[str, str] = ("before", "after")) -> dict[str, Any]:
    """The diff document (docs/diff.md) of two reports (their JSON form, or read back typed)."""
    from gpuprof.version import __version__

    before, after = (d if isinstance(d, SavedReport) else saved_report(d) for d in (before, after))
    b, a = side_from_report(before, labels[0]), side_from_report(after, labels[1])
    band = noise_band_us(b.step_times, a.step_times)
    p_value = rank_test_p(b.step_times, a.step_times)
    mean_b = b.metrics.get("step_time_mean") or 0.0
    metrics = []
    for name in b.metrics:
        x, y = b.metrics[name], a.metrics.get(name)
        change = (y / x - 1.0) if x and y is not None else None
        noise = None if band is None else (band / mean_b if name == "gpu_utilization" and mean_b else band)
        within = None if noise is None or x is None or y is None else abs(y - x) <= noise
        if name in ("step_time", "step_time_mean") and p_value is not None and within is not None:
            within = within or p_value >= P_CHANGED  # the step times' own ranks do not tell the two runs apart
        metrics.append({
            "name": name,
            "unit": "fraction" if name == "gpu_utilization" else "us",
            "before": x,
            "after": y,
            "change_us": (y - x) if x is not None and y is not None and name != "gpu_utilization" else None,
            "change": change,
            "lower_is_better": LOWER_IS_BETTER.get(name, True),
            # the step-time noise band, in this metric's unit (docs/diff.md, "Noise")
            "noise": noise,
            "within_noise": within,
            **({"p_value": p_value} if name == "step_time" else {}),
        })
    row_noise = mean_noise_us(b.step_times, a.step_times)
    vendors = (_vendor(b.devices), _vendor(a.devices))
    rel, rel_reason = relation(before, after, _op_time(b), _op_time(a))
    return {
        "diff_schema_version": DIFF_SCHEMA_VERSION,
        "tool": {"name": "gpuprof", "version": __version__},
        "before": _side_info(b, before),
        "after": _side_info(a, after),
        "relation": rel,
        "relation_reason": rel_reason,
        "metrics": metrics,
        "ranks": _ranks(b, a),
        "row_noise_us": row_noise,
        "operators": _rows(b.operators, a.operators, mean_b, ("gpu_self_us", "cpu_self_us"), True, row_noise),
        "kernels": _rows({(k, None): v for k, v in b.kernels.items()}, {(k, None): v for k, v in a.kernels.items()},
                         mean_b, ("total_us",), False, row_noise),
        "findings": _findings(b, a, metrics, vendors, row_noise, (rel, rel_reason)),
        "regression": None,
    }


def _op_time(s: Side) -> dict[str, float]:
    """Operator name -> its self time per step (CPU and GPU), shapes pooled: what :func:`relation` compares."""
    out: dict[str, float] = defaultdict(float)
    for (name, _), row in s.operators.items():
        out[name] += row.get("cpu_self_us", 0.0) + row.get("gpu_self_us", 0.0)
    return dict(out)


def _side_info(s: Side, doc: SavedReport) -> dict[str, Any]:
    return {"label": s.label, "inputs": doc.inputs, "traces": s.traces, "steps": len(s.step_times),
            "step_times_us": s.step_times, "ranks": s.ranks, "devices": s.devices}


def _ranks(b: Side, a: Side) -> list[dict[str, Any]]:
    ranks = sorted(set(b.per_rank_step) | set(a.per_rank_step))
    if len(ranks) < 2:
        return []
    out = []
    for r in ranks:
        x, y = b.per_rank_step.get(r), a.per_rank_step.get(r)
        out.append({"rank": r, "before_step_us": x, "after_step_us": y, "change": (y / x - 1.0) if x and y is not None else None})
    return out


def _rows(before: Mapping[tuple[str, str | None], Mapping[str, float]], after: Mapping[tuple[str, str | None], Mapping[str, float]],
          step_us: float, fields: tuple[str, ...], with_shapes: bool,
          noise_us: float | None = None) -> dict[str, list[dict[str, Any]]]:
    """Rows that got slower or faster, and those on one side only, biggest change first; a row on both sides whose
    change per step is within ``noise_us`` (the noise of a per-step mean, :func:`gpuprof.stats.mean_noise`) is listed in
    ``within_noise`` instead of slower or faster."""
    floor = MIN_ROW_SHARE * step_us
    out: dict[str, list[dict[str, Any]]] = {"slower": [], "faster": [], "added": [], "removed": [], "within_noise": []}
    for key in set(before) | set(after):
        x, y = before.get(key), after.get(key)
        name, shapes = key
        row: dict[str, Any] = {"name": name}
        if with_shapes:
            row["input_shapes"] = shapes
        row["calls_before"] = x.get("calls") if x else None
        row["calls_after"] = y.get("calls") if y else None
        best, best_delta = fields[0], 0.0
        for f in fields:
            fb, fa = (x or {}).get(f, 0.0), (y or {}).get(f, 0.0)
            row[f + "_before"] = fb if x else None
            row[f + "_after"] = fa if y else None
            if abs(fa - fb) > abs(best_delta):
                best, best_delta = f, fa - fb
        before_t = (x or {}).get(best, 0.0)
        row["measure"] = best
        row["change_us"] = best_delta
        row["change"] = best_delta / before_t if before_t else None
        if abs(best_delta) < floor:
            continue
        if x is None:
            out["added"].append(row)
        elif y is None:
            out["removed"].append(row)
        elif abs(best_delta) >= MIN_ROW_CHANGE * before_t:
            if noise_us is not None and abs(best_delta) <= noise_us:
                out["within_noise"].append(row)
            else:
                out["slower" if best_delta > 0 else "faster"].append(row)
    for k, rows in out.items():
        rows.sort(key=lambda r: -abs(r["change_us"]))
        out[k] = rows[:MAX_ROWS]
    return out


def _findings(b: Side, a: Side, metrics: list[dict[str, Any]] | None = None,
              vendors: tuple[str | None, str | None] = (None, None),
              row_noise: float | None = None,
              rel: tuple[str, str | None] = ("before_after", None)) -> dict[str, list[dict[str, Any]]]:
    step_change = None
    mb, ma = b.metrics.get("step_time_mean"), a.metrics.get("step_time_mean")
    if mb is not None and ma is not None:
        step_change = mb - ma
    by_name = {m["name"]: m for m in metrics or []}
    out: dict[str, list[dict[str, Any]]] = {"removed": [], "added": [], "changed": [], "unchanged": []}
    for key in list(b.findings) + [k for k in a.findings if k not in b.findings]:
        x, y = b.findings.get(key), a.findings.get(key)
        base = x or y
        assert base is not None
        row: dict[str, Any] = {"code": base["code"], "name": base["name"], "location": base["location"],
                               "severity_before": x["severity"] if x else None, "severity_after": y["severity"] if y else None,
                               "cost_before_us_per_step": x["cost_us_per_step"] if x else None,
                               "cost_after_us_per_step": y["cost_us_per_step"] if y else None,
                               "message_before": x["message"] if x else None, "message_after": y["message"] if y else None}
        if y is None:
            part = PART_OF_CODE.get(base["code"])
            pb, pa = (b.metrics.get(part), a.metrics.get(part)) if part else (None, None)
            row["predicted_saving_us_per_step"] = x["cost_us_per_step"] if x else None
            row["what_if_saving_us_per_step"] = x.get("what_if_us_per_step") if x else None
            row["what_if_note"] = x.get("what_if_note") if x else None
            row["measured_saving_us_per_step"] = step_change
            row["measured_part"] = part
            row["measured_part_saving_us_per_step"] = (pb - pa) if pb is not None and pa is not None else None
            out["removed"].append(row)
        elif x is None:
            out["added"].append(row)
        elif x["severity"] != y["severity"] or _cost_moved(x["cost_us_per_step"], y["cost_us_per_step"]):
            out["changed"].append(row)
        else:
            out["unchanged"].append(row)
    _pair_moved(out)
    for row in out["removed"]:
        figure = cause_of(row["code"])
        judged = judge_cause(figure, b.causes.get(row["code"], []), a.causes.get(row["code"], []), rank_test_p) if figure else None
        row["cause"] = judged.as_row() if judged else None
        verdict, reason = _verdict(row, judged, by_name, vendors, row_noise, rel)
        row["fixed"] = reason is None
        row["verdict"] = verdict
        row["not_fixed_reason"] = reason
        row["what_if_gap"] = what_if_gap(row, row_noise)
    for kind in ("changed", "unchanged"):  # the finding fires on both sides: its cause is there after
        for row in out[kind]:
            row["verdict"] = "still_there" if rel[0] == "before_after" else rel[0]
    for row in out["added"]:
        row["verdict"] = "new" if rel[0] == "before_after" else rel[0]
    return out


def _verdict(row: dict[str, Any], judged: Any, metrics: Mapping[str, dict[str, Any]],
             vendors: tuple[str | None, str | None], row_noise: float | None,
             rel: tuple[str, str | None]) -> tuple[str, str | None]:
    """(verdict, why not fixed) of a finding found before and not after (docs/diff.md, "Fixed"): ``fixed`` (why:
    None), ``still_there``, ``not_confirmed``, or the sides' relation (``ranks``, ``different_programs``)."""
    if rel[0] != "before_after":
        return rel[0], rel[1]
    if vendors[0] and vendors[1] and vendors[0] != vendors[1]:
        return "not_confirmed", _not_fixed_because(row, metrics, vendors, row_noise)
    if judged is not None:  # the rule's own cause figure decides, against its own per-step spread
        if judged.improved:
            return "fixed", None
        if judged.improved is not None:
            return "still_there", f"still there: its cause did not improve beyond its noise: {judged.text()}"
        if not judged.improvement > 0:  # with no spread (< 2 steps a side) a better cause leaves it to the step
            return "still_there", f"still there: its cause is not better (fewer than 2 steps a side): {judged.text()}"
    reason = _not_fixed_because(row, metrics, vendors, row_noise)
    return ("fixed", None) if reason is None else ("not_confirmed", reason)


def _pair_moved(out: dict[str, list[dict[str, Any]]]) -> None:
    """A code found before at one place and after at another is one finding that moved, never both fixed and new:
    pair them (in order) into ``changed``, with both locations."""
    for code in {r["code"] for r in out["removed"]} & {r["code"] for r in out["added"]}:
        gone = [r for r in out["removed"] if r["code"] == code]
        new = [r for r in out["added"] if r["code"] == code]
        for x, y in zip(gone, new):
            out["removed"].remove(x)
            out["added"].remove(y)
            out["changed"].append({**x, "location": y["location"], "location_before": x["location"], "moved": True,
                                   "severity_after": y["severity_after"], "cost_after_us_per_step": y["cost_after_us_per_step"],
                                   "message_after": y["message_after"]})
        # the unpaired rest of the larger side keeps its list: the code is then in one list only


def _not_fixed_because(row: dict[str, Any], metrics: Mapping[str, dict[str, Any]],
                       vendors: tuple[str | None, str | None], row_noise: float | None) -> str | None:
    """Why a finding absent after is not confirmed fixed (docs/diff.md, "Fixed"); None when its cause is gone."""
    if vendors[0] and vendors[1] and vendors[0] != vendors[1]:
        return (f"the runs are on different vendors' GPUs ({vendors[0]} before, {vendors[1]} after): their copy, kernel and "
                "runtime names differ, so a finding can vanish without its cause going")
    mean = metrics.get("step_time_mean")
    if mean is not None and mean.get("change_us") is not None and mean["change_us"] > 0 and mean.get("within_noise") is False:
        return ("the run got slower by " + f"{mean['change_us'] / 1000:.3g} ms per step: a finding that compares steps "
                "or shares of the step can vanish because everything got slow, not because its cause went")
    part, saved = row.get("measured_part"), row.get("measured_part_saving_us_per_step")
    predicted = row.get("predicted_saving_us_per_step") or 0.0
    bar = max(row_noise or 0.0, FIXED_PART_SHARE * predicted)
    if part and saved is not None and saved <= bar:
        return (f"the part of the step it costs ({part}) shrank by {max(saved, 0.0) / 1000:.3g} ms per step, not beyond "
                f"the noise and a quarter of its predicted {predicted / 1000:.3g} ms: its cause did not shrink")
    return None


def _vendor(devices: Iterable[str]) -> str | None:
    """``nvidia``, ``amd`` or None (no device, or both kinds) from the device names."""
    kinds = set()
    for d in devices:
        low = d.lower()
        if any(w in low for w in ("amd", "instinct", "radeon")) or re.search(r"\bmi\d{3}", low):
            kinds.add("amd")
        elif any(w in low for w in ("nvidia", "tesla", "geforce", "quadro", "rtx", "a100", "h100", "v100", "t4")):
            kinds.add("nvidia")
    return kinds.pop() if len(kinds) == 1 else None


def _cost_moved(x: float | None, y: float | None) -> bool:
    """Two costs differ by more than 10% (or one is unknown)."""
    if x is None or y is None:
        return (x is None) != (y is None)
    return abs(y - x) > 0.1 * max(abs(x), abs(y), 1e-9)

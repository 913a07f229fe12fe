"""The history as a JSON document and as a terminal table with sparklines (docs/history.md)."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from gpuprof.history.changes import ChangePoint, FindingChange, change_points, finding_changes
from gpuprof.history.runs import METRICS, History
from gpuprof.render.safe import shorten, visible

__all__ = ["history_dict", "history_json", "history_terminal", "sparkline", "fmt_metric"]

HISTORY_VERSION = 1
_BARS = "▁▂▃▄▅▆▇█"


def _analyse(hist: History) -> tuple[list[ChangePoint], list[FindingChange]]:
    names = [r.name for r in hist.runs]
    points = [p for m in METRICS for p in change_points(names, m, [r.figures[m] for r in hist.runs])]
    return points, finding_changes(names, [r.findings for r in hist.runs])


def history_dict(hist: History) -> dict[str, Any]:
    points, changes = _analyse(hist)
    return {"history_version": HISTORY_VERSION, "root": hist.root, "runs": [r.to_dict() for r in hist.runs],
            "change_points": [asdict(p) for p in points], "finding_changes": [asdict(c) for c in changes],
            "notes": hist.notes}


def history_json(hist: History) -> str:
    return json.dumps(history_dict(hist), indent=2, allow_nan=False) + "\n"


def sparkline(values: list[float | None]) -> str:
    """One bar per run, scaled from the lowest to the highest value; a blank for a run without the figure."""
    xs = [v for v in values if v is not None]
    if not xs:
        return " " * len(values)
    lo, hi = min(xs), max(xs)
    span = hi - lo
    return "".join(" " if v is None else _BARS[0 if span == 0 else min(7, int((v - lo) / span * 8))] for v in values)


def fmt_metric(metric: str, v: float | None) -> str:
    """One figure of a run as the terminal and the page show it."""
    if v is None:
        return "-"
    if metric == "step_time_us":
        return f"{v / 1000:.2f} ms"
    if metric == "memory_peak_bytes":
        return f"{v / (1 << 20):.0f} MiB"
    return f"{v * 100:.1f}%"


def history_terminal(hist: History) -> str:
    points, changes = _analyse(hist)
    marked = {(p.run, p.metric) for p in points}
    names = [shorten(visible(r.name), 40) for r in hist.runs]
    width = max([len("run"), *map(len, names)])
    lines = [f"gpuprof history: {len(hist.runs)} runs under {visible(hist.root)} (oldest first)", ""]
    for m, (label, _) in METRICS.items():
        vals = [r.figures[m] for r in hist.runs]
        xs = [v for v in vals if v is not None]
        span = f"  {fmt_metric(m, min(xs))} .. {fmt_metric(m, max(xs))}" if xs else "  (not in the reports)"
        lines.append(f"  {label:<16} {sparkline(vals)}{span}")
    lines.append("")
    header = f"  {'run':<{width}}  " + "  ".join(f"{label:>16}" for label, _ in METRICS.values()) + "  findings"
    lines.append(header)
    for r, name in zip(hist.runs, names):
        cells = [(fmt_metric(m, r.figures[m]) + (" *" if (r.name, m) in marked else "  ")) for m in METRICS]
        lines.append(f"  {name:<{width}}  " + "  ".join(f"{c:>16}" for c in cells) + "  " +
                     (", ".join(r.findings) or "-"))
    lines.append("")
    if points:
        lines.append("Change points (* above; docs/history.md):")
        for p in points:
            label = METRICS[p.metric][0]
            lines.append(f"  {visible(p.run)}: {label} {fmt_metric(p.metric, p.before)} -> {fmt_metric(p.metric, p.after)}")
    else:
        lines.append("No change point: every figure moved within its runs' noise.")
    if changes:
        lines += ["Findings:", *(f"  {c.code} {c.change} in {visible(c.run)}" for c in changes)]
    lines += [f"note: {visible(n)}" for n in hist.notes]
    return "\n".join(lines) + "\n"

"""The diff document for people: terminal (rich) and markdown, from one list of tables.

Every name (operator, kernel, file, label) comes from the traces, so it goes
through :func:`gpuprof.render.safe.visible` (terminal) or the markdown
escapes of :mod:`gpuprof.render.markdown` before it is shown.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any

from gpuprof.units import fmt_pct, fmt_us

__all__ = ["render_diff_terminal", "render_diff_markdown", "diff_tables", "Table"]

TOP = 10  # rows per list in the terminal and markdown (the JSON has them all)

_LABELS = {"step_time": "Step median", "step_time_mean": "Step mean", "gpu_busy": "GPU busy",
           "gpu_utilization": "GPU utilisation", "gpu_idle": "GPU idle"}


@dataclass
class Table:
    """One titled table of plain-text cells (``names``: indices of columns holding names from the traces)."""

    title: str
    headers: list[str]
    rows: list[list[str]]
    names: tuple[int, ...] = (0,)
    empty: str = "none"


def _label(name: str) -> str:
    if name in _LABELS:
        return _LABELS[name]
    kind, _, part = name.partition(".")
    return ("idle: " if kind == "idle" else "") + part.replace("_", " ")


def _val(x: float | None, unit: str) -> str:
    if x is None:
        return "-"
    return fmt_pct(x) if unit == "fraction" else fmt_us(x)


def _change(c: float | None) -> str:
    return "-" if c is None else f"{c * 100:+.1f}%"


def _delta(us: float | None) -> str:
    if us is None:
        return "-"
    return ("+" if us > 0 else "-" if us < 0 else "") + fmt_us(abs(us))


def diff_tables(diff: dict[str, Any]) -> list[Table]:
    """The tables every renderer draws, in order."""
    tables = []
    rows = []
    for m in diff["metrics"]:
        if m["name"] != "step_time" and not m["before"] and not m["after"]:
            continue  # a part that is zero on both sides
        rows.append([_label(m["name"]), _val(m["before"], m["unit"]), _val(m["after"], m["unit"]),
                     _delta(m["change_us"]) if m["unit"] == "us" else _change_points(m), _change(m["change"])])
    tables.append(Table("Per step (before → after)", ["", "before", "after", "change", "%"], rows, names=()))
    if diff["ranks"]:
        tables.append(Table("Step time per rank", ["rank", "before", "after", "%"], [
            [str(r["rank"]), _val(r["before_step_us"], "us"), _val(r["after_step_us"], "us"), _change(r["change"])]
            for r in diff["ranks"]], names=()))
    f = diff["findings"]
    tables.append(Table("Findings fixed (predicted saving = the finding's cost before; what-if = replayed on the "
                        "step graph; measured = the step's change)",
                        ["code", "where", "predicted", "what-if", "measured (step)", "measured (part)"], [
        [r["code"] + " " + r["name"], r["location"] or "-", _val(r["predicted_saving_us_per_step"], "us"),
         _val(r.get("what_if_saving_us_per_step"), "us"),
         _saving(r["measured_saving_us_per_step"]),
         (f"{_saving(r['measured_part_saving_us_per_step'])} {_label(r['measured_part'])}" if r["measured_part"] else "-")]
        for r in f["removed"] if r.get("fixed", True)], names=(0, 1)))
    judged = [r for r in f["removed"] if r.get("fixed", True) and r.get("cause")]
    if judged:  # the figure that is each fixed finding's cause, against its own per-step noise (docs/diff.md)
        tables.append(Table("Findings fixed: their cause, per step", ["code", "where", "cause before → after"], [
            [r["code"] + " " + r["name"], r["location"] or "-", _cause(r["cause"])] for r in judged], names=(0, 1)))
    gaps = [r for r in f["removed"] if r.get("fixed", True) and r.get("what_if_gap")]
    if gaps:  # the what-if against the measured change, where they differ beyond ±15% (docs/critical-path.md)
        tables.append(Table("Findings fixed: what-if against measured", ["code", "where", "why they differ"], [
            [r["code"] + " " + r["name"], r["location"] or "-", str(r["what_if_gap"])] for r in gaps], names=(0, 1)))
    gone = [r for r in f["removed"] if not r.get("fixed", True)]
    if gone:
        tables.append(Table("Findings gone but not confirmed fixed", ["code", "where", "why not"], [
            [r["code"] + " " + r["name"], r["location"] or "-", str(r["not_fixed_reason"])] for r in gone], names=(0, 1)))
    tables.append(Table("Findings new", ["code", "where", "severity", "cost/step"], [
        [r["code"] + " " + r["name"], r["location"] or "-", str(r["severity_after"]), _val(r["cost_after_us_per_step"], "us")]
        for r in f["added"]], names=(0, 1)))
    tables.append(Table("Findings changed", ["code", "where", "severity", "cost before", "cost after"], [
        [r["code"] + " " + r["name"], r["location"] or "-", f"{r['severity_before']} → {r['severity_after']}",
         _val(r["cost_before_us_per_step"], "us"), _val(r["cost_after_us_per_step"], "us")]
        for r in f["changed"]], names=(0, 1)))
    for kind, title in (("operators", "Operators"), ("kernels", "Kernels")):
        d = diff[kind]
        noise = diff.get("row_noise_us")
        within = f"within the noise (change ≤ ±{fmt_us(noise)} per step)" if noise is not None else "within the noise"
        for which, word in (("slower", "slower"), ("faster", "faster"), ("added", "only after"), ("removed", "only before"),
                            ("within_noise", within)):
            if which == "within_noise" and not d.get(which):
                continue
            rows = []
            for r in d.get(which, [])[:TOP]:
                shapes = r.get("input_shapes")
                measure = r["measure"].replace("_us", "").replace("_", " ")
                rows.append([r["name"], shapes or "", measure, _delta(r["change_us"]), _change(r["change"])])
            headers = ["name", "input shapes", "time", "change/step", "%"]
            if kind == "kernels":
                rows = [[x[0], x[3], x[4]] for x in rows]
                headers = ["name", "change/step", "%"]
            more = len(d.get(which, [])) - TOP
            tables.append(Table(f"{title} {word}" + (f" (top {TOP} of {len(d[which])}; all in --format json)" if more > 0 else ""),
                                headers, rows, names=(0, 1) if kind == "operators" else (0,)))
    return tables


def _cause(c: dict[str, Any]) -> str:
    """A cause figure's row (docs/diff.md, "Fixed") in one line: its median (or mean) per step on each side."""
    frac = c["unit"] == "fraction"

    def v(x: float | None) -> str:
        return "-" if x is None else (f"{x:.3%}" if frac else fmt_us(x))

    noise = "" if c.get("noise") is None else f" (noise ±{v(c['noise'])})"
    return f"{c['figure']}: {v(c['before'])} → {v(c['after'])}{noise}"


def _saving(us: float | None) -> str:
    """A time saved per step; a negative saving (the step got longer) is shown with a minus."""
    if us is None:
        return "-"
    return fmt_us(us) if us >= 0 else "-" + fmt_us(-us)


def _change_points(m: dict[str, Any]) -> str:
    if m["before"] is None or m["after"] is None:
        return "-"
    return f"{(m['after'] - m['before']) * 100:+.1f} points"


def _headline(diff: dict[str, Any]) -> list[str]:
    b, a = diff["before"], diff["after"]
    lines = [f"before: {', '.join(b['inputs']) or b['label']} ({b['traces']} traces, {b['steps']} steps)",
             f"after:  {', '.join(a['inputs']) or a['label']} ({a['traces']} traces, {a['steps']} steps)"]
    if diff.get("relation") not in (None, "before_after"):  # ranks of one job, or two programs: not a before/after
        lines.append(f"{str(diff['relation']).replace('_', ' ')}: {diff.get('relation_reason')}")
    st = next((m for m in diff["metrics"] if m["name"] == "step_time"), None)
    if st and st["before"] and st["after"] is not None:
        noise = "" if st["noise"] is None else f" (noise ±{fmt_us(st['noise'])})"
        verdict = ""
        if st.get("within_noise"):
            verdict = (": within the runs' own spread, not a measured change" +
                       (f" (rank test p={st['p_value']:.2f})" if st.get("p_value") is not None else ""))
        lines.append(f"step time {fmt_us(st['before'])} → {fmt_us(st['after'])}: {_change(st['change'])}{noise}{verdict}")
    reg = diff.get("regression")
    if reg:
        lines.append(("REGRESSION: " if reg["regressed"] else "no regression: ") + reg["reason"])
    return lines


def render_diff_terminal(diff: dict[str, Any], color: bool | None = None, width: int | None = None) -> str:
    """The diff for a terminal, at its width: the report's own table layout (names cut in the middle, numbers
    never cut, rows stacked on a narrow terminal), every name made inert first."""
    from rich.console import Console
    from rich.text import Text

    from gpuprof.render.safe import clip
    from gpuprof.render.terminal import emit_named_table as emit_table
    from gpuprof.render.terminal import terminal_width

    buf = io.StringIO()
    console = Console(file=buf, force_terminal=bool(color), color_system="standard" if color else None, no_color=not color,
                      width=width or terminal_width(), highlight=False, emoji=False, soft_wrap=False)
    for line in _headline(diff):
        console.print(Text(clip(line)))  # Text: never read as markup
    for t in diff_tables(diff):
        console.print()
        if not t.rows:
            console.print(Text(t.title, style="bold"))
            console.print(Text("  " + t.empty))
            continue
        columns = [(h, "name" if i in t.names else ("left" if i == 0 else "right")) for i, h in enumerate(t.headers)]
        emit_table(console, t.title, columns, t.rows)
    return buf.getvalue()


def render_diff_markdown(diff: dict[str, Any]) -> str:
    from gpuprof.render.markdown import md_escape, md_name, md_table

    out = ["# gpuprof diff", ""]
    out += [f"- {md_escape(line)}" for line in _headline(diff)]
    for t in diff_tables(diff):
        out += ["", f"## {md_escape(t.title)}", ""]
        if not t.rows:
            out.append(f"_{t.empty}_")
            continue
        rows = [[md_name(c) if i in t.names and c else md_escape(c) for i, c in enumerate(row)] for row in t.rows]
        out.append(md_table([md_escape(h) for h in t.headers], rows, "l" + "r" * (len(t.headers) - 1)))
    return "\n".join(out) + "\n"

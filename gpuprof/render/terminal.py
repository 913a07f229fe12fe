"""Terminal rendering with rich: a summary panel per trace, then the findings, then other sections.

All text that comes from data (file names, kernel names, messages) goes into
``rich.text.Text`` objects, never into markup strings, so a ``[`` in a kernel
name cannot be mistaken for a style tag; and it goes through :func:`_t`, which
makes control characters visible (:mod:`gpuprof.render.safe`), so an escape
sequence in a kernel name is shown, never sent to the terminal.
"""

from __future__ import annotations

import io
import os
import shutil
import sys
from typing import Any, Sequence

from rich import box
from rich.console import Console, Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from gpuprof.findings import Finding, Severity
from gpuprof.render import format as F
from gpuprof.render.safe import clip, visible
from gpuprof.render.sections import terminal_renderer
from gpuprof.report import Report, TraceSummary

__all__ = ["render_terminal", "DEFAULT_WIDTH", "TOP_N"]

DEFAULT_WIDTH = 120  # columns when the output is not a terminal (files, pipes, tests)
MIN_WIDTH = 80
TOP_N = 10  # rows of each top-kernels/ops/copies/syncs table
NAME_WIDTH = 60  # kernel/op names are cut in the middle beyond this

SEVERITY_STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "bold yellow", Severity.INFO: "bold cyan"}


def render_terminal(report: Report, color: bool | None = None, width: int | None = None) -> str:
    """The report as text for a terminal.

    ``color`` None means: colour only when stdout is a terminal and the
    ``NO_COLOR`` environment variable is unset (https://no-color.org).
    ``width`` defaults to the terminal's width on a terminal, else 120.
    """
    is_tty = _stdout_is_tty()
    if color is None:
        color = is_tty and not os.environ.get("NO_COLOR")
    if width is None:
        width = shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns if is_tty else DEFAULT_WIDTH
        width = max(width, MIN_WIDTH)
    buf = io.StringIO()
    console = Console(
        file=buf,
        force_terminal=color,
        color_system="auto" if color else None,
        no_color=not color,  # explicit: an explicit color=True wins over NO_COLOR
        width=width,
        highlight=False,
        emoji=False,
        soft_wrap=False,
        legacy_windows=False,
    )
    if color and console.color_system is None:
        # forced colour with a TERM rich does not know: plain 16 colours are safe
        console = Console(file=buf, force_terminal=True, color_system="standard", width=width, highlight=False, emoji=False)
    _render(console, report)
    text = buf.getvalue()
    if not color:
        # rich pads table rows to their full width; trailing blanks only get in the way in files and diffs
        text = "\n".join(line.rstrip() for line in text.split("\n"))
    return text


def _stdout_is_tty() -> bool:
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):  # replaced or closed stdout
        return False


def _t(text: object, style: str = "") -> Text:
    """Data as inert text: control characters made visible, no markup read, a huge name cut in the middle."""
    return Text(clip(text), style=style)


def _name(name: str) -> Text:
    """A table name cell: visible, then cut in the middle so distinct long names stay distinct."""
    return Text(F.shorten(visible(name), NAME_WIDTH))


def _render(console: Console, report: Report) -> None:
    for trace in report.traces:
        _render_trace(console, trace)
    # summaries (trace and other sections) first, then what to do about them
    for section in report.sections:
        kind = getattr(section, "kind", None)
        fn = terminal_renderer(kind) if isinstance(kind, str) else None
        if fn is None:
            console.print(_t(f"(section {kind!r} cannot be shown in the terminal; use --format json)", style="dim"))
            continue
        fn(console, section)
        console.print()
    _render_findings(console, report)
    if report.notes:
        console.print(Text("Notes", style="bold"))
        for note in report.notes:
            console.print(_t(f"  • {note}"))
        console.print()
    console.print(Text(F.findings_total(report), style=_total_style(report)))


def _total_style(report: Report) -> str:
    sev = report.max_severity()
    return SEVERITY_STYLE[sev] if sev is not None else "bold green"


# --------------------------------------------------------------------------- traces


def _kv_grid(rows: Sequence[tuple[str, str | Text]]) -> Table:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    for key, value in rows:
        grid.add_row(Text(key), value if isinstance(value, Text) else _t(value))
    return grid


def _summary_rows(t: TraceSummary) -> list[tuple[str, str | Text]]:
    rows: list[tuple[str, str | Text]] = [("Device", F.fmt_devices(t.devices))]
    rows.append(("Rank", F.fmt_rank(t.rank, t.world_size)))
    if t.num_steps:
        rows.append(("Steps", f"{t.num_steps} (ids {F.fmt_steps(t.step_ids)})"))
    else:
        rows.append(("Steps", "none found (no ProfilerStep#N ranges); times are over the whole trace"))
    rows.append(("Step time", f"{F.fmt_ms(t.step_time_us)} ms median, {F.fmt_ms(t.step_time_mean_us)} ms mean"))
    if t.gpu_utilization is None:
        util = Text("n/a (no GPU activity in this trace)", style="dim")
    else:
        util = Text(F.fmt_pct(t.gpu_utilization), style=_util_style(t.gpu_utilization))
        util.append(f"  (GPU busy {F.fmt_ms(t.gpu_busy_us)} ms per step)", style="default")
    rows.append(("GPU utilisation", util))
    size = f"{F.fmt_count(t.num_events)} events"
    if t.file_bytes:
        size += f", {F.fmt_bytes(t.file_bytes)} on disk"
    rows.append(("Trace", size))
    return rows


def _util_style(u: float) -> str:
    return "green" if u >= 0.8 else ("yellow" if u >= 0.5 else "red")


def _table(title: str, columns: Sequence[tuple[str, str]]) -> Table:
    """A compact table; ``columns`` are (header, justify)."""
    table = Table(title=title or None, title_justify="left", title_style="bold", header_style="bold", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, expand=False)
    for header, justify in columns:
        if justify == "name":
            table.add_column(header, justify="left", no_wrap=True, overflow="ellipsis", max_width=NAME_WIDTH + 2)
        else:
            table.add_column(header, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    return table


def _breakdown_table(heading: str, values: dict[str, float], order: Sequence[str], labels: dict[str, str], basis_us: float) -> Table:
    # the heading sits in the first column's header: as a table title it would wrap to the table's width
    table = _table("", [(heading, "left"), ("ms/step", "right"), ("% of step", "right")])
    for key, us in F.ordered_items(values, order):
        table.add_row(_t(labels.get(key, key)), F.fmt_ms(us), F.fmt_share_of(us, basis_us))
    return table


def _render_trace(console: Console, t: TraceSummary) -> None:
    basis = F.step_basis_us(t)
    parts: list[RenderableType] = [_kv_grid(_summary_rows(t))]
    tables: list[RenderableType] = []
    if t.breakdown_us:
        tables.append(_breakdown_table("Step time", t.breakdown_us, F.BREAKDOWN_KEYS, F.BREAKDOWN_LABELS, basis))
    if t.idle_breakdown_us and t.gpu_utilization is not None:  # no GPU activity: "idle" means nothing
        tables.append(_breakdown_table("GPU idle: host was in", t.idle_breakdown_us, F.IDLE_KEYS, F.IDLE_LABELS, basis))
    if tables:
        grid = Table.grid(padding=(0, 4))
        for _ in tables:
            grid.add_column(vertical="top")
        grid.add_row(*tables)
        parts.append(Text(""))
        parts.append(grid)
    title = Text("Trace ", style="bold")
    title.append(clip(t.path), style="bold")
    console.print(Panel(Group(*parts), title=title, title_align="left", box=box.ROUNDED, expand=True))

    if t.top_kernels:
        kt = _table("Top kernels", [("Kernel", "name"), ("Calls", "right"), ("Total", "right"), ("Mean", "right"), ("% GPU", "right")])
        for k in t.top_kernels[:TOP_N]:
            kt.add_row(_name(k.name), F.fmt_count(k.count), F.fmt_us(k.total_us), F.fmt_us(k.mean_us), F.fmt_pct(k.share_of_gpu))
        console.print(kt)
        console.print()
    if t.top_ops:
        ot = _table("Top operators", [("Operator", "name"), ("Calls", "right"), ("Total", "right"), ("Self", "right"), ("GPU self", "right")])
        for o in t.top_ops[:TOP_N]:
            ot.add_row(_name(o.name), F.fmt_count(o.count), F.fmt_us(o.total_us), F.fmt_us(o.self_us), F.fmt_us(o.gpu_us))
        console.print(ot)
        console.print()
    if t.copies:
        ct = _table("Copies", [("Direction", "left"), ("Host memory", "left"), ("Count", "right"), ("Bytes", "right"), ("Time", "right"), ("Bandwidth", "right")])
        for c in t.copies[:TOP_N]:
            ct.add_row(_t(c.direction), _t(c.memory), F.fmt_count(c.count), F.fmt_bytes(c.bytes), F.fmt_us(c.total_us), F.fmt_gbps(c.bandwidth_gbps))
        console.print(ct)
        console.print()
    if t.syncs:
        st = _table("Host synchronisations", [("Cause", "name"), ("Runtime call", "left"), ("Count", "right"), ("Total", "right"), ("Location", "left")])
        for s in t.syncs[:TOP_N]:
            st.add_row(_name(s.cause), _t(s.runtime), F.fmt_count(s.count), F.fmt_us(s.total_us), _t(s.location or "-"))
        console.print(st)
        console.print()
    for note in t.notes:
        console.print(_t(f"note: {note}", style="dim"))
    if t.notes:
        console.print()


# --------------------------------------------------------------------------- findings


def _render_findings(console: Console, report: Report) -> None:
    findings = report.sorted_findings()
    if not findings:
        return
    console.print(Text("Findings (most expensive first)", style="bold underline"))
    for i, f in enumerate(findings, 1):
        console.print(_finding_panel(i, f))


def _finding_panel(index: int, f: Finding) -> Panel:
    style = SEVERITY_STYLE[f.severity]
    title = Text(f"{index}. ")
    title.append(f.severity.value.upper(), style=style)
    title.append(f" {clip(f.code)} ", style="bold")
    title.append(clip(f.name))
    rows: list[tuple[str, str | Text]] = [("Cost", F.fmt_cost(f))]
    loc = F.fmt_location(f)
    if loc:
        rows.append(("Where", loc))
    if f.source:
        rows.append(("Input", f.source))
    for e in f.evidence:
        text = _t(F.fmt_evidence(e))
        if e.events:
            text.append(f"  [{len(e.events)} event{'s' if len(e.events) != 1 else ''} in trace]", style="dim")
        rows.append(("Evidence", text))
    body: list[Any] = [_t(f.message), _kv_grid(rows)]
    if f.advice:
        advice = Text("Fix: ", style="bold green")
        advice.append(clip(f.advice))
        body.append(advice)
    return Panel(Group(*body), title=title, title_align="left", border_style=style.replace("bold ", ""), box=box.ROUNDED)

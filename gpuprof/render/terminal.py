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
import sys
from typing import Any, Callable, Sequence

from rich import box
from rich.cells import cell_len
from rich.console import Console, Group, RenderableType
from rich.measure import Measurement
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from gpuprof import units as U
from gpuprof.findings import Finding, Severity
from gpuprof.render import format as F
from gpuprof.render.critpath import critical_rows, fmt_what_if, host_ahead_line
from gpuprof.render.groups import applies_to, group_cost, group_findings, groups_head, trace_labels
from gpuprof.render.layout import GAP, emit_table, wrap_text
from gpuprof.render.safe import clip, one_line, shorten, visible
from gpuprof.render.sections import terminal_renderer
from gpuprof.render.width import DEFAULT_WIDTH, MIN_WIDTH, width_for
from gpuprof.report import JobSummary, Report, TraceSummary
from gpuprof.trace.breakdown import BREAKDOWN_KEYS, IDLE_KEYS

__all__ = ["render_terminal", "terminal_width", "DEFAULT_WIDTH", "MIN_WIDTH", "STACK_BELOW", "TOP_N"]

STACK_BELOW = 60  # tables narrower than this show each row as a name line plus its numbers
TOP_N = 10  # rows of each top-kernels/ops/copies/syncs table
PER_TRACE_NAME = 30  # in the tables with a column per trace, names wrap at this width to leave room for the traces

SEVERITY_STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "bold yellow", Severity.INFO: "bold cyan"}


def render_terminal(report: Report, color: bool | None = None, width: int | None = None) -> str:
    """The report as text for a terminal.

    ``color`` None means: colour only when stdout is a terminal and the
    ``NO_COLOR`` environment variable is unset (https://no-color.org).
    ``width`` defaults to :func:`terminal_width`.
    """
    is_tty = _stdout_is_tty()
    if color is None:
        color = is_tty and not os.environ.get("NO_COLOR")
    if width is None:
        width = terminal_width(is_tty)
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


def terminal_width(is_tty: bool | None = None) -> int:
    """The width to draw at: the terminal's when stdout is one (``shutil.get_terminal_size``, which
    lets ``COLUMNS`` override it, as usual), else ``COLUMNS`` when it is a positive integer, else
    :data:`DEFAULT_WIDTH`; never below :data:`MIN_WIDTH` (:func:`gpuprof.render.width.width_for`)."""
    if is_tty is None:
        is_tty = _stdout_is_tty()
    return width_for(is_tty)


def _stdout_is_tty() -> bool:
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):  # replaced or closed stdout
        return False


def _t(text: object, style: str = "") -> Text:
    """Data as inert text: control characters made visible, no markup read, a huge name cut in the middle."""
    return Text(clip(text), style=style)


def _render(console: Console, report: Report) -> None:
    labels = trace_labels(report)
    if len(report.traces) > 1:
        _render_traces(console, report.traces, labels)
    else:
        for trace in report.traces:
            _render_trace(console, trace)
    if report.job is not None:
        _render_job(console, report.job)
    # summaries (trace and other sections) first, then what to do about them
    for section in report.sections:
        kind = getattr(section, "kind", None)
        fn = terminal_renderer(kind) if isinstance(kind, str) else None
        if fn is None:
            console.print(_t(f"(section {kind!r} cannot be shown in the terminal; use --format json)", style="dim"))
            continue
        fn(console, section)
        console.print()
    _render_findings(console, report, labels)
    if report.notes:
        console.print(Text("Notes", style="bold"))
        for note in report.notes:
            console.print(_t(f"  • {note}"))
        console.print()
    console.print(Text(F.findings_total(report), style=_total_style(report)))


def _render_job(console: Console, job: JobSummary) -> None:
    """The whole job as the capture's watch saw it: its phases, then the CPU figures."""
    from gpuprof.render.job import PHASE_HEADERS, cpu_line, phase_rows

    rows, left = phase_rows(job)
    cols = [(h, "left" if i < 2 else "right") for i, h in enumerate(PHASE_HEADERS)]
    emit_named_table(console, f"Job: {job.steps} steps watched", cols, rows)
    if left:
        console.print(_t(f"  ({left} more phases in report.json's job.phases)", style="dim"))
    cpu = cpu_line(job)
    if cpu is not None:
        console.print(_t(f"  {cpu}"))
    console.print()


def _total_style(report: Report) -> str:
    sev = report.max_severity()
    return SEVERITY_STYLE[sev] if sev is not None else "bold green"


# --------------------------------------------------------------------------- traces


def _kv_grid(rows: Sequence[tuple[str, str | Text]], width: int) -> Table:
    """Keys and values in two columns, in ``width`` cells. Values given as ``str`` (paths, device
    names) are wrapped here between their parts (:func:`gpuprof.render.layout.wrap_text`), so a path
    breaks after a ``/``, never inside a number; ``Text`` values are prose, which rich wraps at blanks."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    room = width - max((cell_len(k) for k, _ in rows), default=0) - 2
    for key, value in rows:
        if isinstance(value, Text):
            grid.add_row(Text(key), value)
        else:
            grid.add_row(Text(key), Text("\n".join(wrap_text(clip(value), room, indent=0))))
    return grid


def _summary_rows(t: TraceSummary) -> list[tuple[str, str | Text]]:
    rows: list[tuple[str, str | Text]] = [("Device", F.fmt_devices(t.devices, t.has_gpu_activity))]
    rows.append(("Rank", F.fmt_rank(t.rank, t.world_size)))
    if t.num_steps:
        rows.append(("Steps", f"{t.num_steps} (ids {F.fmt_steps(t.step_ids)})"))
    else:
        rows.append(("Steps", "none found (no ProfilerStep#N ranges); times are over the whole trace"))
    rows.append(("Step time", f"{U.fmt_ms(t.step_time_us)} ms median, {U.fmt_ms(t.step_time_mean_us)} ms mean"))
    if t.lead_in_us is not None:
        rows.append(("Lead-in", F.fmt_lead_in(t.lead_in_us)))
    if t.gpu_utilization is None:
        util = Text("n/a (no GPU activity in this trace)", style="dim")
    else:
        util = Text(U.fmt_pct(t.gpu_utilization), style=_util_style(t.gpu_utilization))
        util.append(f"  (GPU busy {U.fmt_ms(t.gpu_busy_us)} ms per step)", style="default")
        if (wait := F.fmt_comm_wait(t)) is not None:
            util.append(f"; {wait}", style="default")
    rows.append(("GPU utilisation", util))
    if (mfu := F.fmt_mfu(t)) is not None:
        rows.append(("MFU", mfu))
    size = f"{U.fmt_count(t.num_events)} events"
    if t.file_bytes:
        size += f", {U.fmt_bytes(t.file_bytes)} on disk"
    rows.append(("Trace", size))
    return rows


def _util_style(u: float) -> str:
    return "green" if u >= 0.8 else ("yellow" if u >= 0.5 else "red")


def _table(title: str, columns: Sequence[tuple[str, str]]) -> Table:
    """A compact table; ``columns`` are (header, justify)."""
    table = Table(title=title or None, title_justify="left", title_style="bold", header_style="bold", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, expand=False)
    for header, justify in columns:
        table.add_column(header, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    return table


def emit_named_table(console: Console, title: str, columns: Sequence[tuple[str, str]], rows: Sequence[Sequence[object]]) -> None:
    """Print a table that fits ``console.width`` without cutting a number or a word (also for the diff).

    ``columns`` are (header, kind): kind ``"name"`` marks a column of names or
    phrases from the data (kernel names, causes, locations), which wrap to the
    width left, broken between their parts; ``"left"``/``"right"`` columns keep
    their full width. See :mod:`gpuprof.render.layout` (which also stacks the
    rows when the names would get too narrow).
    """
    emit_table(console, title, [(h, "wrap" if k == "name" else k) for h, k in columns], rows)


def _breakdown_table(heading: str, values: dict[str, float], order: Sequence[str], labels: dict[str, str], basis_us: float) -> Table:
    # the heading sits in the first column's header: as a table title it would wrap to the table's width
    table = _table("", [(heading, "left"), ("ms/step", "right"), ("% of step", "right")])
    for key, us in F.ordered_items(values, order):
        table.add_row(_t(labels.get(key, key)), U.fmt_ms(us), U.fmt_share_of(us, basis_us))
    return table


def _side_by_side(console: Console, tables: list[Table], width: int) -> list[RenderableType]:
    """The tables next to each other when they fit in ``width``, else one below the other."""
    sizes = [Measurement.get(console, console.options, t).maximum for t in tables]
    if sum(sizes) + 4 * (len(tables) - 1) <= width:
        grid = Table.grid(padding=(0, 4))
        for _ in tables:
            grid.add_column(vertical="top")
        grid.add_row(*tables)
        return [grid]
    out: list[RenderableType] = []
    for i, t in enumerate(tables):
        if i:
            out.append(Text(""))
        out.append(t)
    return out


def _render_trace(console: Console, t: TraceSummary) -> None:
    basis = F.step_basis_us(t)
    parts: list[RenderableType] = [_kv_grid([("File", t.path), *_summary_rows(t)], console.width - 4)]
    tables: list[Table] = []
    if t.breakdown_us:
        tables.append(_breakdown_table("Step time", *F.breakdown_rows(t, BREAKDOWN_KEYS), F.BREAKDOWN_LABELS, basis))
    if t.idle_breakdown_us and t.gpu_utilization is not None:  # no GPU activity: "idle" means nothing
        tables.append(_breakdown_table("GPU idle: host was in", t.idle_breakdown_us, IDLE_KEYS, F.IDLE_LABELS, basis))
    if tables:
        parts.append(Text(""))
        parts.extend(_side_by_side(console, tables, console.width - 4))  # 4: the panel's border and padding
    path_rows = critical_rows(t)
    if path_rows:  # beside the breakdown: what set the step's length (docs/critical-path.md)
        table = _table("", [("Critical path", "left"), ("", "left"), ("ms/step", "right"), ("% of path", "right")])
        for kind, name, us, share in path_rows:
            table.add_row(_t(kind), _t(clip(name, 70)), us, share)
        parts += [Text(""), table]
        ahead = host_ahead_line(t)
        if ahead:
            parts.append(Text(ahead, style="dim"))
    console.print(Panel(Group(*parts), title=Text("Trace", style="bold"), title_align="left", box=box.ROUNDED, expand=True))

    from gpuprof.render.views import top_tables, view_tables  # the operator/kernel/module/range views: docs/views.md

    for vt in top_tables(t, TOP_N):
        emit_named_table(console, vt.title, vt.columns, vt.rows)
        console.print()
    if t.syncs:
        rows: list[tuple[str, ...]] = [(s.cause, s.runtime, U.fmt_count(s.count), U.fmt_us(s.total_us), s.location or "-") for s in t.syncs[:TOP_N]]
        emit_named_table(console, "Host synchronisations", [("Cause", "name"), ("Runtime call", "left"), ("Count", "right"), ("Total", "right"), ("Location", "name")], rows)
        console.print()
    for vt in view_tables(t.views):
        emit_named_table(console, vt.title, vt.columns, vt.rows)
        console.print()
    for note in t.notes:
        console.print(_t(f"note: {note}", style="dim"))
    if t.notes:
        console.print()


# --------------------------------------------------------------------------- several traces


def _chunks(n: int, lead: int, col: int, width: int) -> list[range]:
    """Split ``n`` per-trace columns of ``col`` characters into groups that fit beside a ``lead`` column."""
    per = max(1, (width - lead) // (col + GAP))
    per = -(-n // -(-n // per))  # as many tables as needed, the traces spread evenly over them
    return [range(a, min(a + per, n)) for a in range(0, n, per)]


def _emit_per_trace(console: Console, title: str, lead: tuple[str, str], keys: Sequence[str], values: Sequence[Sequence[str]], labels: Sequence[str]) -> None:
    """A table of one row per key and one column per trace (``values[row][trace]``), split into
    several tables of fewer traces each when they do not fit side by side."""
    if not keys:
        return
    col = max([len(x) for x in labels] + [cell_len(v) for row in values for v in row])
    lead_w = max(cell_len(lead[0]), max(cell_len(visible(k)) for k in keys))
    if lead[1] == "name":
        lead_w = min(lead_w, PER_TRACE_NAME)
    if lead[1] == "name" and console.width < STACK_BELOW:
        chunks = [range(len(labels))]  # stacked rows: all traces under each name
    else:
        chunks = _chunks(len(labels), lead_w, col, console.width)
    for chunk in chunks:
        part = title
        if len(chunks) > 1:
            part += f" ({labels[chunk[0]]}" + (f"-{labels[chunk[-1]]})" if len(chunk) > 1 else ")")
        columns = [lead] + [(labels[i], "right") for i in chunk]
        rows = [[k] + [values[r][i] for i in chunk] for r, k in enumerate(keys)]
        emit_named_table(console, part, columns, rows)
        console.print()


def _render_traces(console: Console, traces: Sequence[TraceSummary], labels_by_path: dict[str, str]) -> None:
    """Several traces of one run: one summary with a column per trace, then the top tables across them."""
    labels = [labels_by_path[t.path] for t in traces]
    paths = [t.path for t in traces]
    try:
        common = os.path.commonpath(paths)
    except ValueError:  # relative and absolute mixed, or different drives
        common = ""
    if common in paths:  # one path inside another cannot happen for files; keep the names whole
        common = os.path.dirname(common)
    console.print(Text(f"{len(traces)} traces" + (" in " if common else ""), style="bold") + Text(shorten(visible(common), max(console.width - 16, 20)) if common else "", style="bold"))
    legend = Table.grid(padding=(0, 2))
    legend.add_column(no_wrap=True)
    legend.add_column(overflow="fold")  # whole paths, wrapped: this is where a label is looked up
    for label, path in zip(labels, paths):
        legend.add_row(Text(f"  {label}"), _t(os.path.relpath(path, common) if common else path))
    console.print(legend)
    shared: list[tuple[str, str]] = []
    devices = {F.fmt_devices(t.devices, t.has_gpu_activity) for t in traces}
    ranks = {F.fmt_rank(t.rank, t.world_size) for t in traces}
    if len(devices) == 1:
        shared.append(("Device", devices.pop()))
    if len(ranks) == 1:
        shared.append(("Rank", ranks.pop()))
    if shared:
        console.print(_kv_grid(shared, console.width))
    console.print()

    keys: list[str] = []
    values: list[list[str]] = []

    def row(key: str, cells: list[str]) -> None:
        keys.append(key)
        values.append(cells)

    if len(devices) > 1:
        for label, t in zip(labels, traces):
            console.print(_t(f"Device {label}: {F.fmt_devices(t.devices, t.has_gpu_activity)}"))
    if len(ranks) > 1:
        row("Rank", [("-" if t.rank is None else str(t.rank)) for t in traces])
    row("Steps", [str(t.num_steps) for t in traces])
    row("Step median (ms)", [U.fmt_ms(t.step_time_us) for t in traces])
    row("Step mean (ms)", [U.fmt_ms(t.step_time_mean_us) for t in traces])
    row("GPU utilisation", [U.fmt_pct(t.gpu_utilization) if t.gpu_utilization is not None else "n/a" for t in traces])
    row("GPU busy (ms/step)", [U.fmt_ms(t.gpu_busy_us) for t in traces])
    row("Events", [U.fmt_count(t.num_events) for t in traces])
    for _heading, attr, order, names in (("ms/step", "breakdown_us", BREAKDOWN_KEYS, F.BREAKDOWN_LABELS),
                                         ("GPU idle, host in", "idle_breakdown_us", IDLE_KEYS, F.IDLE_LABELS)):
        seen: dict[str, None] = {}
        for t in traces:
            for k, _ in F.ordered_items(getattr(t, attr), order):
                seen.setdefault(k, None)
        for k in seen:
            label = names.get(k, k)
            key = f"{label} (ms)" if attr == "breakdown_us" else f"idle: {label}"
            row(key, [U.fmt_ms(getattr(t, attr)[k]) if k in getattr(t, attr) else "-" for t in traces])
    _emit_per_trace(console, "Summary per trace (times per step)", ("", "left"), keys, values, labels)

    def top(title: str, header: str, stats: list[list[Any]], value: Callable[[Any], float]) -> None:
        total: dict[str, float] = {}
        per: list[dict[str, float]] = []
        for ss in stats:
            d: dict[str, float] = {}
            for st in ss[:TOP_N]:
                d[st_name(st)] = d.get(st_name(st), 0.0) + value(st)
                total[st_name(st)] = total.get(st_name(st), 0.0) + value(st)
            per.append(d)
        names = sorted(total, key=lambda n: -total[n])[:TOP_N]
        vals = [[U.fmt_us(d[n]) if n in d else "-" for d in per] for n in names]
        _emit_per_trace(console, title, (header, "name"), names, vals, labels)

    def st_name(st: Any) -> str:
        name: str = st.name
        return name

    if any(t.top_kernels for t in traces):
        top("Top kernels (total GPU time per trace)", "Kernel", [t.top_kernels for t in traces], lambda k: k.total_us)
    if any(t.top_ops for t in traces):
        top("Top operators (GPU self time per trace)", "Operator", [t.top_ops for t in traces], lambda o: o.gpu_us)
    copies = [(label, c) for label, t in zip(labels, traces) for c in t.copies[:TOP_N]]
    if copies:
        rows: list[tuple[str, ...]] = [(label, c.direction, c.memory, U.fmt_count(c.count), U.fmt_bytes(c.bytes), U.fmt_us(c.total_us), U.fmt_gbps(c.bandwidth_gbps)) for label, c in copies]
        emit_named_table(console, "Copies", [("Trace", "left"), ("Direction", "left"), ("Host memory", "left"), ("Count", "right"), ("Bytes", "right"), ("Time", "right"), ("Bandwidth", "right")], rows)
        console.print()
    syncs = [(label, s) for label, t in zip(labels, traces) for s in t.syncs[:TOP_N]]
    if syncs:
        rows = [(label, s.cause, s.runtime, U.fmt_count(s.count), U.fmt_us(s.total_us), s.location or "-") for label, s in syncs]
        emit_named_table(console, "Host synchronisations", [("Trace", "left"), ("Cause", "name"), ("Runtime call", "left"), ("Count", "right"), ("Total", "right"), ("Location", "name")], rows)
        console.print()
    notes = [(label, note) for label, t in zip(labels, traces) for note in t.notes]
    for label, note in notes:
        console.print(_t(f"note ({label}): {note}", style="dim"))
    if notes:
        console.print()
    console.print(Text("Each trace's own operator and kernel tables: gpuprof analyze FILE, or --format json.", style="dim"))
    console.print()


# --------------------------------------------------------------------------- findings


def _render_findings(console: Console, report: Report, labels: dict[str, str]) -> None:
    findings = report.sorted_findings()
    if not findings:
        return
    if len(report.traces) <= 1:
        console.print(Text("Findings (most expensive first)", style="bold underline"))
        for i, f in enumerate(findings, 1):
            console.print(_finding_panel(i, f, console.width))
        return
    groups = group_findings(findings)
    head = f"Findings (most expensive first): {groups_head(len(findings), len(report.traces), len(groups))}"
    console.print(Text(head, style="bold underline"))
    for i, group in enumerate(groups, 1):
        console.print(_finding_panel(i, group[0], console.width, group, labels))


def _finding_panel(index: int, f: Finding, console_width: int, group: Sequence[Finding] = (), labels: dict[str, str] | None = None) -> Panel:
    """One finding; with ``group`` (the same finding in several traces, ``f`` the most expensive) the
    traces it applies to, each with its own cost, replace the input line."""
    style = SEVERITY_STYLE[f.severity]
    title = Text(f"{index}. ")
    title.append(f.severity.value.upper(), style=style)
    title.append(f" {clip(f.code)} ", style="bold")
    title.append(clip(f.name))
    labels = labels or {}
    cost = group_cost(group, labels) if group else F.fmt_cost(f)
    rows: list[tuple[str, str | Text]] = [("Cost", cost)]
    what_if = fmt_what_if(f)
    if what_if:
        rows.append(("What-if", what_if))
    loc = F.fmt_location(f)
    if loc:
        rows.append(("Where", loc))
    if group:
        rows.append(("Traces", applies_to(group, labels)))
    elif f.source:
        rows.append(("Input", f.source))
    if f.origin == "runtime":
        rows.append(("From", F.RUNTIME_ORIGIN))
    for e in f.evidence:
        text = _t(F.fmt_evidence(e))
        if e.events:
            text.append(f"  [{len(e.events)} event{'s' if len(e.events) != 1 else ''} in trace]", style="dim")
        rows.append(("Evidence", text))
    # message and advice are prose: a rule's wrapped lines read as one paragraph (rich wraps it to the
    # terminal), not as "\x0a" escapes
    body: list[Any] = [Text(one_line(F.linked_message(f))), _kv_grid(rows, console_width - 4)]
    if f.advice:
        advice = Text("Fix: ", style="bold green")
        advice.append(one_line(f.advice))
        body.append(advice)
    return Panel(Group(*body), title=title, title_align="left", border_style=style.replace("bold ", ""), box=box.ROUNDED)

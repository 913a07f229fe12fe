"""Markdown rendering (GitHub-flavoured): ``report.md`` and the TensorBoard text summary.

The text must read well both on GitHub (CommonMark + GFM tables) and in
TensorBoard (Python-Markdown, HTML sanitised), so: names and code go into code
spans (where ``<``/``>`` are literal in both), prose is escaped with HTML
entities for ``<``/``>``/``&`` and backslashes for the inline markup
characters, and ``|`` is escaped inside table cells.

Names come from strangers, so nothing in them may act: control characters
are made visible first (:mod:`gpuprof.render.safe`), a code span's backtick
fence is longer than any run of backticks in the name (the CommonMark rule),
so a name holding a double backtick cannot close its span early, and raw HTML
never passes through (``<`` is an entity in prose and literal in code spans).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Iterable, Sequence

from gpuprof import units as U
from gpuprof.findings import Finding, Severity
from gpuprof.render import format as F
from gpuprof.render.critpath import critical_rows, fmt_what_if, host_ahead_line
from gpuprof.render.groups import applies_to, group_cost, group_findings, groups_head, trace_labels
from gpuprof.render.safe import clip, one_line, shorten, visible
from gpuprof.render.sections import markdown_renderer
from gpuprof.trace.breakdown import BREAKDOWN_KEYS, IDLE_KEYS

if TYPE_CHECKING:
    from gpuprof.render.views import ViewTable
from gpuprof.report import JobSummary, Report, TraceSummary

__all__ = ["render_markdown", "md_escape", "md_code", "md_name", "md_table"]

TOP_N = 10  # rows of each top-kernels/ops/copies/syncs table
NAME_WIDTH = 80  # kernel/op names are cut in the middle beyond this

SEVERITY_MARK = {Severity.ERROR: "🔴 error", Severity.WARNING: "🟡 warning", Severity.INFO: "🔵 info"}

# Characters that start inline markup; "_" only matters at a word edge (never inside
# num_workers, in CommonMark or Python-Markdown), "#" only at the start of a line.
_INLINE = re.compile(r"([\\`*\[\]|]|(?<!\w)_|_(?!\w)|^#)")


# Only what markdown would read as HTML: "<" before a tag or comment start ("<b", "</", "<!", "<?")
# and "&" starting a character reference ("&amp;", "&#62;"). "num_workers>0" and "a < b" stay as
# written; entities, not backslashes, because Python-Markdown (TensorBoard's) keeps "\<" as is.
_TAG_START = re.compile(r"<(?=[A-Za-z/!?])")
_ENTITY = re.compile(r"&(?=#?[0-9A-Za-z]+;)")


def md_escape(text: str) -> str:
    """``text`` as literal markdown prose (safe inside a table cell too), escaped only where markdown
    would read it otherwise, so the raw ``report.md`` reads like the text."""
    text = one_line(text)  # one line: a newline would end a table row
    text = _ENTITY.sub("&amp;", text)
    text = _TAG_START.sub("&lt;", text)
    text = _INLINE.sub(lambda m: "\\" + m.group(0), text)
    return "\\" + text if text.startswith(">") else text  # ">" starting a line or list item: a blockquote


_BACKTICKS = re.compile("`+")


def md_code(text: str, cell: bool = False) -> str:
    """``text`` as an inline code span whose content reads back as :func:`visible` ``(text)``.

    The fence is one backtick longer than the longest run inside (a span ends
    only at a run of exactly its fence's length), and a space pads both ends
    when the text starts or ends with a backtick or a space (CommonMark strips
    one space from each end). ``cell``: the span sits in a table cell, where
    ``|`` must be escaped (GFM removes the backslash before the span is read).
    """
    text = clip(text)  # no newline either: a code span may not end a table row
    longest = max((len(m.group(0)) for m in _BACKTICKS.finditer(text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text[:1] in ("`", " ") or text[-1:] in ("`", " ") else ""
    if cell:
        text = text.replace("|", "\\|")
    return f"{fence}{pad}{text}{pad}{fence}"


def md_name(name: str, width: int = 80, cell: bool = True) -> str:
    """A (kernel) name as a code span, cut in the middle beyond ``width`` so distinct names stay distinct."""
    return md_code(shorten(visible(name), width), cell=cell)


def md_table(headers: Sequence[str], rows: Iterable[Sequence[str]], align: str | None = None) -> str:
    """A GFM table; ``align`` holds one of ``l``/``r`` per column (columns past it: left), None leaves the
    alignment to the viewer. Cells are already markdown."""
    seps = ["---"] * len(headers) if align is None else ["---:" if a == "r" else ":---" for a in align.ljust(len(headers), "l")]
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(seps) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def render_markdown(report: Report) -> str:
    """The report as one self-contained markdown document."""
    out: list[str] = [f"# gpuprof {md_escape(report.command)} report", ""]
    out.append(f"**{md_escape(F.findings_total(report))}**")
    out.append("")
    if report.inputs:
        out.append("Inputs: " + ", ".join(md_code(i) for i in report.inputs))
        out.append("")
    for t in report.traces:
        out.extend(_trace(t))
    if report.job is not None:
        out.extend(job_markdown(report.job))
    for section in report.sections:
        kind = getattr(section, "kind", None)
        fn = markdown_renderer(kind) if isinstance(kind, str) else None
        if fn is None:
            out.append(f"_Section {md_code(str(kind))} has no markdown view; see the JSON report._")
            out.append("")
            continue
        out.append(fn(section).rstrip("\n"))
        out.append("")
    out.extend(_findings(report))
    if report.notes:
        out.append("## Notes")
        out.append("")
        out.extend(f"- {md_escape(n)}" for n in report.notes)
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


# --------------------------------------------------------------------------- the job


def job_markdown(job: JobSummary) -> list[str]:
    """The whole job as the capture's watch saw it: the phases table and the CPU figures."""
    from gpuprof.render.job import PHASE_HEADERS, cpu_line, phase_rows

    rows, left = phase_rows(job)
    out = [f"## Job: {job.steps} steps watched", "", md_table(PHASE_HEADERS, [[md_escape(c) for c in r] for r in rows], "llrrrrr")]
    if left:
        out.append(f"_{left} more phases in report.json's `job.phases`._")
    cpu = cpu_line(job)
    if cpu is not None:
        out += ["", md_escape(cpu)]
    return out + [""]


# --------------------------------------------------------------------------- traces


def _trace(t: TraceSummary) -> list[str]:
    out = [f"## Trace {md_code(t.path)}", ""]
    if t.num_steps:
        steps = f"{t.num_steps} (ids {F.fmt_steps(t.step_ids)})"
    else:
        steps = "none found (no ProfilerStep#N ranges); times are over the whole trace"
    if t.gpu_utilization is None:
        util = "n/a (no GPU activity in this trace)"
    else:
        util = f"**{U.fmt_pct(t.gpu_utilization)}** (GPU busy {U.fmt_ms(t.gpu_busy_us)} ms per step)"
        if (wait := F.fmt_comm_wait(t)) is not None:
            util += f"; {wait}"
    size = f"{U.fmt_count(t.num_events)} events"
    if t.file_bytes:
        size += f", {U.fmt_bytes(t.file_bytes)} on disk"
    out += [
        f"- **Device:** {md_escape(F.fmt_devices(t.devices, t.has_gpu_activity))}",
        f"- **Rank:** {F.fmt_rank(t.rank, t.world_size)}",
        f"- **Steps:** {steps}",
        f"- **Step time:** {U.fmt_ms(t.step_time_us)} ms median, {U.fmt_ms(t.step_time_mean_us)} ms mean",
        *([f"- **Lead-in:** {F.fmt_lead_in(t.lead_in_us)}"] if t.lead_in_us is not None else []),
        f"- **GPU utilisation:** {util}",
        *([f"- **MFU:** {md_escape(mfu)}"] if (mfu := F.fmt_mfu(t)) is not None else []),
        f"- **Trace:** {size}",
        "",
    ]
    basis = F.step_basis_us(t)
    if t.breakdown_us:
        out += ["### Step time breakdown", ""]
        out.append(_breakdown(*F.breakdown_rows(t, BREAKDOWN_KEYS), F.BREAKDOWN_LABELS, basis))
        out.append("")
    if t.idle_breakdown_us and t.gpu_utilization is not None:  # no GPU activity: "idle" means nothing
        out += ["### While the GPU was idle, the host was in", ""]
        out.append(_breakdown(t.idle_breakdown_us, IDLE_KEYS, F.IDLE_LABELS, basis))
        out.append("")
    path_rows = critical_rows(t)
    if path_rows:  # what set the step's length (docs/critical-path.md)
        path_md = [(md_escape(kind), md_name(name, NAME_WIDTH) if name else "", us, share) for kind, name, us, share in path_rows]
        out += ["### Critical path", "", md_table(["Kind", "Name", "Time per step", "% of path"], path_md, "llrr"), ""]
        ahead = host_ahead_line(t)
        if ahead:
            out += [ahead + ".", ""]
    from gpuprof.render.views import top_tables, view_tables  # the operator/kernel/module/range views: docs/views.md

    out += _views_markdown(top_tables(t, TOP_N))
    if t.syncs:
        out += ["### Host synchronisations", ""]
        rows: list[tuple[str, ...]] = [
            (md_name(s.cause, NAME_WIDTH), md_name(s.runtime, NAME_WIDTH), U.fmt_count(s.count), U.fmt_us(s.total_us), md_name(s.location, NAME_WIDTH) if s.location else "-")
            for s in t.syncs[:TOP_N]
        ]
        out += [md_table(["Cause", "Runtime call", "Count", "Total", "Location"], rows, "llrrl"), ""]
    out += _views_markdown(view_tables(t.views))
    if t.notes:
        out += [f"> Note: {md_escape(n)}" for n in t.notes]
        out.append("")
    return out


def _breakdown(values: dict[str, float], order: Sequence[str], labels: dict[str, str], basis_us: float) -> str:
    rows = [(md_escape(labels.get(k, k)), U.fmt_ms(us), U.fmt_share_of(us, basis_us)) for k, us in F.ordered_items(values, order)]
    return md_table(["", "ms/step", "% of step"], rows, "lrr")


# --------------------------------------------------------------------------- findings


def _findings(report: Report) -> list[str]:
    findings = report.sorted_findings()
    if not findings:
        return []
    # over several traces the same finding is shown once with the traces it applies to (gpuprof.render.groups),
    # as the terminal and the HTML page show it
    groups = group_findings(findings) if len(report.traces) > 1 else [[f] for f in findings]
    labels = trace_labels(report)
    head = "## Findings (most expensive first)"
    if len(groups) < len(findings):
        head += ": " + groups_head(len(findings), len(report.traces), len(groups))
    out = [head, ""]
    if len(report.traces) > 1:
        out += [md_table(["#", "Trace"], [(labels[t.path], md_code(t.path, cell=True)) for t in report.traces], "rl"), ""]
    summary = [
        (str(i), SEVERITY_MARK[g[0].severity], md_code(g[0].code, cell=True), md_escape(g[0].name),
         group_cost(g, labels) if len(g) > 1 else F.fmt_cost(g[0]))
        for i, g in enumerate(groups, 1)
    ]
    out += [md_table(["#", "Severity", "Code", "Finding", "Cost"], summary, "rlllr"), ""]
    for i, g in enumerate(groups, 1):
        out.extend(_finding(i, g[0], g if len(g) > 1 else (), labels))
    return out


def _finding(index: int, f: Finding, group: Sequence[Finding] = (), labels: dict[str, str] | None = None) -> list[str]:
    out = [f"### {index}. {md_code(f.code)} {md_escape(f.name)} ({f.severity.value})", "", md_escape(F.linked_message(f)), ""]
    out.append(f"- **Cost:** {group_cost(group, labels or {}) if group else F.fmt_cost(f)}")
    what_if = fmt_what_if(f)
    if what_if:
        out.append(f"- **What-if:** {md_escape(what_if)}")
    loc = F.fmt_location(f)
    if loc:
        out.append(f"- **Where:** {md_code(loc)}")
    if group:
        out.append(f"- **Traces:** {md_escape(applies_to(group, labels or {}))}")
    elif f.source:
        out.append(f"- **Input:** {md_code(f.source)}")
    if f.origin == "runtime":
        out.append(f"- **From:** {F.RUNTIME_ORIGIN}")
    for e in f.evidence:
        line = f"- **Evidence:** {md_escape(F.fmt_evidence(e))}"
        if e.events:
            line += f", {len(e.events)} event{'s' if len(e.events) != 1 else ''} in the trace"
        out.append(line)
    if f.advice:
        out.append(f"- **Fix:** {md_escape(f.advice)}")
    out.append("")
    return out


def _views_markdown(tables: "list[ViewTable]") -> list[str]:
    """The views' top rows (:func:`gpuprof.render.views.view_tables`) as markdown tables."""
    out: list[str] = []
    for t in tables:
        names = {i for i, (_, kind) in enumerate(t.columns) if kind == "name"}
        rows = [[md_name(c, 80) if i in names else md_escape(c) for i, c in enumerate(r)] for r in t.rows]
        align = "".join("r" if kind == "right" else "l" for _, kind in t.columns)
        out += [f"### {md_escape(t.title)}", "", md_table([md_escape(h) for h, _ in t.columns], rows, align), ""]
    return out

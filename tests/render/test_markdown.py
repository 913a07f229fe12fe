"""Markdown renderer: numbers, cost order, well-formed tables, escaping, sections."""

from __future__ import annotations

import re
import uuid

from gpuprof import units as U
from gpuprof.findings import Finding, Severity
from gpuprof.render import format as F
from gpuprof.render import render
from gpuprof.render.markdown import md_code, md_escape, render_markdown
from gpuprof.render.safe import shorten
from gpuprof.render.sections import register_section
from gpuprof.report import KernelStat, Report, TraceSummary

from .conftest import DemoSection, make_trace_summary


def _line_with(text: str, *needles: str) -> str:
    for line in text.splitlines():
        if all(n in line for n in needles):
            return line
    raise AssertionError(f"no line holds all of {needles!r}")


def _cells(row: str) -> list[str]:
    """The cells of a GFM table row: GFM splits on every pipe not escaped with a backslash, code spans included."""
    inner = row.strip()[1:-1]
    return re.split(r"(?<!\\)\|", inner)


def test_tables_are_well_formed(report):
    out = render_markdown(report)
    lines = out.splitlines()
    i = 0
    n_tables = 0
    while i < len(lines):
        if lines[i].startswith("|") and i + 1 < len(lines) and re.fullmatch(r"\|(:?-+:?\|)+", lines[i + 1]):
            n_tables += 1
            width = len(_cells(lines[i]))
            assert len(_cells(lines[i + 1])) == width
            i += 2
            while i < len(lines) and lines[i].startswith("|"):
                assert len(_cells(lines[i])) == width, lines[i]
                i += 1
            assert i == len(lines) or lines[i] == "", "a table must be followed by a blank line"
        else:
            i += 1
    t = report.traces[0]
    views = t.views
    n_views = 0 if views is None else sum(bool(x) for x in (views.operators, views.kernels, views.modules, views.ranges))
    expected = 2 + sum(bool(x) for x in (t.top_kernels, t.top_ops, t.copies, t.syncs)) + n_views + 1  # + findings table
    expected += report.job is not None  # the job's phases
    expected += t.critical_path is not None  # the critical path (docs/critical-path.md)
    assert n_tables == expected


def test_summary_numbers(report):
    out = render_markdown(report)
    t = report.traces[0]
    assert md_code(t.path) in out
    _line_with(out, "**Device:**", t.devices[0].name, F.fmt_cc(t.devices[0].compute_capability))
    _line_with(out, "**Rank:**", f"rank {t.rank} of {t.world_size}")
    _line_with(out, "**Steps:**", str(t.num_steps), F.fmt_steps(t.step_ids))
    _line_with(out, "**Step time:**", U.fmt_ms(t.step_time_us), U.fmt_ms(t.step_time_mean_us))
    _line_with(out, "**GPU utilisation:**", U.fmt_pct(t.gpu_utilization))
    basis = F.step_basis_us(t)
    for key, us in t.breakdown_us.items():
        assert f"| {F.BREAKDOWN_LABELS[key]} | {U.fmt_ms(us)} | {U.fmt_share_of(us, basis)} |" in out
    for key, us in t.idle_breakdown_us.items():
        assert f"| {F.IDLE_LABELS[key]} | {U.fmt_ms(us)} | {U.fmt_share_of(us, basis)} |" in out
    for k in t.top_kernels:
        _line_with(out, md_code(shorten(k.name, 80), cell=True), U.fmt_count(k.count), U.fmt_us(k.total_us), U.fmt_pct(k.share_of_gpu))
    for c in t.copies:
        _line_with(out, c.direction, U.fmt_bytes(c.bytes), U.fmt_us(c.total_us), U.fmt_gbps(c.bandwidth_gbps))
    for s in t.syncs:
        _line_with(out, md_code(s.cause, cell=True), md_code(s.runtime, cell=True), U.fmt_us(s.total_us))


def test_findings_in_cost_order(report):
    out = render_markdown(report)
    ordered = report.sorted_findings()
    headings = [line for line in out.splitlines() if re.match(r"### \d+\. `GP", line)]
    assert [re.search(r"`(GP\d+)`", h).group(1) for h in headings] == [f.code for f in ordered]
    for i, f in enumerate(ordered, 1):
        _line_with(out, f"| {i} |", md_code(f.code), F.fmt_cost(f))
        assert md_escape(f.message) in out
        assert f"**Fix:** {md_escape(f.advice)}" in out
        for e in f.evidence:
            assert md_escape(F.fmt_evidence(e)) in out
    assert f"**{F.findings_total(report)}**" in out


def test_escaping_keeps_names_and_prose_literal():
    t = make_trace_summary()
    t.top_kernels = [KernelStat("k<T> | x", 1, 1.0, 1.0, 1.0)]
    f = Finding("GP999", "x", Severity.INFO, "*not bold* <b>html</b> a|b", "")
    out = render_markdown(Report("analyze", traces=[t], findings=[f]))
    assert "`k<T> \\| x`" in out  # code span: < literal, pipe escaped for the table
    assert "\\*not bold\\* &lt;b>html&lt;/b> a\\|b" in out
    assert "<b>" not in out


def test_escaping_only_what_markdown_needs():
    """The raw report.md reads like the text: ">", "<" and "&" are escaped only where markdown
    (CommonMark, and Python-Markdown in TensorBoard) would read HTML or a blockquote."""
    assert md_escape("set num_workers>0 when a < b & c") == "set num_workers>0 when a < b & c"
    assert md_escape("<script>x</script> &amp; &#62;") == "&lt;script>x&lt;/script> &amp;amp; &amp;#62;"
    assert md_escape("> not a quote") == "\\> not a quote"
    from markdown_it import MarkdownIt

    for text in ("num_workers>0", "<b>bold</b> & <!-- c --> &lt;", "> q", "a <3 b"):
        html = MarkdownIt("commonmark").render(md_escape(text))
        assert html == f"<p>{text.replace('&', '&amp;').replace('<', '&lt;').replace('>', '&gt;')}</p>\n", text


def test_md_helpers():
    assert md_escape("num_workers=0 _x_ [a](b)") == "num_workers=0 \\_x\\_ \\[a\\](b)"
    assert md_escape("line1\nline2") == "line1 line2"
    assert md_code("a`b") == "``a`b``"


def test_sections_dispatch():
    kind = f"test-md-{uuid.uuid4().hex[:8]}"
    register_section(kind, markdown=lambda s: f"### Demo\n\nrows: {len(s.rows)}\n")
    unknown = DemoSection(f"nobody-{uuid.uuid4().hex[:8]}")
    out = render_markdown(Report("memory", sections=[DemoSection(kind, [{"a": 1}, {"a": 2}, {"a": 3}]), unknown]))
    assert "### Demo\n\nrows: 3\n" in out
    _line_with(out, unknown.kind, "JSON")


def test_empty_and_cpu_only():
    assert "No findings." in render_markdown(Report("analyze"))
    t = TraceSummary(path="cpu.json", breakdown_us={"other": 1.0}, idle_breakdown_us={"cpu_other": 0.0})
    out = render_markdown(Report("analyze", traces=[t]))
    _line_with(out, "**GPU utilisation:**", "n/a")
    _line_with(out, "**Device:**", "CPU only (no GPU device in the trace)")
    assert "idle" not in out.lower().replace("no gpu activity", "")
    assert out.endswith("\n") and not out.endswith("\n\n")


def test_dispatch_through_render(report):
    assert render(report, "markdown") == render_markdown(report)


def test_real_trace_analysis_renders(v100_samples):
    from gpuprof.analysis import analyze

    report = analyze(v100_samples[0])
    out = render_markdown(report)
    t = report.traces[0]
    _line_with(out, "**Step time:**", U.fmt_ms(t.step_time_us))
    for f in report.findings:
        assert md_code(f.code) in out

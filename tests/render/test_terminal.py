"""Terminal renderer: the numbers of the report appear, findings come in cost order, sections dispatch."""

from __future__ import annotations

import uuid

from rich.text import Text

from gpuprof import units as U
from gpuprof.findings import Finding, Severity
from gpuprof.render import format as F
from gpuprof.render import render
from gpuprof.render.sections import register_section
from gpuprof.render.terminal import render_terminal
from gpuprof.render.width import DEFAULT_WIDTH
from gpuprof.report import KernelStat, Report, TraceSummary

from .conftest import DemoSection, make_trace_summary

WIDE = 400  # wide enough that no cell or message wraps, so lines can be searched


def _line_with(text: str, *needles: str) -> str:
    for line in text.splitlines():
        if all(n in line for n in needles):
            return line
    raise AssertionError(f"no line holds all of {needles!r}")


def test_no_colour_means_no_escape_codes(report):
    plain = render_terminal(report, color=False)
    assert "\x1b[" not in plain
    coloured = render_terminal(report, color=True)
    assert "\x1b[" in coloured


def test_color_none_follows_stdout(report, monkeypatch):
    import gpuprof.render.terminal as T

    monkeypatch.setattr(T, "_stdout_is_tty", lambda: False)
    assert "\x1b[" not in render_terminal(report, color=None)
    monkeypatch.setattr(T, "_stdout_is_tty", lambda: True)
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert "\x1b[" in render_terminal(report, color=None, width=120)
    monkeypatch.setenv("NO_COLOR", "1")
    assert "\x1b[" not in render_terminal(report, color=None, width=120)
    assert "\x1b[" in render_terminal(report, color=True, width=120)  # asked for explicitly


def test_default_width_is_respected(report):
    out = render_terminal(report, color=False)
    assert max(len(line) for line in out.splitlines()) <= DEFAULT_WIDTH


def test_summary_numbers(report):
    out = render_terminal(report, color=False, width=WIDE)
    t = report.traces[0]
    assert t.path in out
    dev = t.devices[0]
    assert _line_with(out, "Device", dev.name, F.fmt_cc(dev.compute_capability))
    assert _line_with(out, "Rank", f"rank {t.rank} of {t.world_size}")
    assert _line_with(out, "Steps", str(t.num_steps), F.fmt_steps(t.step_ids))
    assert _line_with(out, "Step time", U.fmt_ms(t.step_time_us) + " ms median")
    assert _line_with(out, "GPU utilisation", U.fmt_pct(t.gpu_utilization))
    basis = F.step_basis_us(t)
    for key, us in t.breakdown_us.items():
        _line_with(out, F.BREAKDOWN_LABELS[key], U.fmt_ms(us), U.fmt_share_of(us, basis))
    for key, us in t.idle_breakdown_us.items():
        _line_with(out, F.IDLE_LABELS[key], U.fmt_ms(us), U.fmt_share_of(us, basis))
    for k in t.top_kernels:  # whole at this width: a name is cut only when it cannot fit
        _line_with(out, k.name, U.fmt_count(k.count), U.fmt_us(k.total_us), U.fmt_pct(k.share_of_gpu))
    for o in t.top_ops:
        _line_with(out, o.name, U.fmt_count(o.count), U.fmt_us(o.self_us), U.fmt_us(o.gpu_us))
    for c in t.copies:
        _line_with(out, c.direction, c.memory, U.fmt_bytes(c.bytes), U.fmt_gbps(c.bandwidth_gbps))
    for s in t.syncs:
        _line_with(out, s.cause, s.runtime, U.fmt_us(s.total_us), s.location)
    for note in t.notes + report.notes:
        assert note in out


def test_breakdown_shares_add_up_to_the_step(report):
    # the percentages shown are of the mean step time, so the rows of a full breakdown add up to ~100%
    out = render_terminal(report, color=False, width=WIDE)
    t = report.traces[0]
    shown = [float(U.fmt_share_of(us, F.step_basis_us(t)).rstrip("%")) for us in t.breakdown_us.values()]
    for key, us in t.breakdown_us.items():
        _line_with(out, F.BREAKDOWN_LABELS[key], U.fmt_share_of(us, F.step_basis_us(t)))
    total = sum(t.breakdown_us.values()) / F.step_basis_us(t) * 100
    assert abs(sum(shown) - total) < 0.1 * len(shown)


def test_findings_in_cost_order_with_details(report):
    out = render_terminal(report, color=False, width=WIDE)
    ordered = report.sorted_findings()
    assert [f.code for f in ordered] != [f.code for f in report.findings]  # the fixture is not pre-sorted
    costs = [f.cost_us_per_step for f in ordered if f.cost_us_per_step is not None]
    assert costs == sorted(costs, reverse=True)
    positions = [out.index(f"{f.severity.value.upper()} {f.code} {f.name}") for f in ordered]
    assert positions == sorted(positions)
    for f in ordered:
        assert f.message in out
        assert f.advice in out
        _line_with(out, "Cost", F.fmt_cost(f))
        if f.location:
            _line_with(out, "Where", f"{f.location.file}:{f.location.line}")
        for e in f.evidence:
            _line_with(out, "Evidence", F.fmt_evidence(e))


def test_total_line_is_last(report):
    out = render_terminal(report, color=False)
    assert out.rstrip("\n").splitlines()[-1] == F.findings_total(report)
    n_err = sum(f.severity is Severity.ERROR for f in report.findings)
    assert f"{n_err} error" in out.rstrip("\n").splitlines()[-1]


def test_sections_dispatch_and_unknown_kinds_are_noted():
    kind = f"test-kind-{uuid.uuid4().hex[:8]}"
    seen = []

    def draw(console, section):
        seen.append(section)
        console.print(Text(f"demo rows: {len(section.rows)} first={section.rows[0]['a']}"))

    register_section(kind, terminal=draw)
    sec = DemoSection(kind, [{"a": 42}, {"a": 7}])
    unknown = DemoSection(f"nobody-draws-{uuid.uuid4().hex[:8]}")
    report = Report("memory", sections=[sec, unknown])
    out = render_terminal(report, color=False)
    assert seen == [sec]
    assert "demo rows: 2 first=42" in out
    note = _line_with(out, unknown.kind)
    assert "json" in note
    assert out.index("demo rows") < out.index(unknown.kind)


def test_empty_report():
    out = render_terminal(Report("analyze"), color=False)
    assert out.strip() == "No findings."


def test_cpu_only_trace_without_devices_or_steps():
    t = TraceSummary(path="cpu.json", breakdown_us={"other": 5_000.0}, idle_breakdown_us={"cpu_other": 0.0}, step_time_us=5_000.0)
    out = render_terminal(Report("analyze", traces=[t]), color=False, width=WIDE)
    assert _line_with(out, "GPU utilisation", "n/a")
    assert _line_with(out, "Device", "CPU only (no GPU device in the trace)")
    assert _line_with(out, "Steps", "none found")
    assert "GPU idle" not in out  # no GPU: no idle breakdown
    # mean unknown: shares fall back to the median step time
    _line_with(out, "Other", U.fmt_ms(5_000.0), "100.0%")


def test_zero_step_time_does_not_divide_by_zero():
    t = TraceSummary(path="x.json", breakdown_us={"kernel": 0.0})
    out = render_terminal(Report("analyze", traces=[t]), color=False)
    _line_with(out, "Kernels", "0.00", "n/a")


def test_names_with_markup_are_literal():
    t = make_trace_summary()
    t.top_kernels = [KernelStat("[bold red]not a style[/bold red]", 1, 1.0, 1.0, 1.0)]
    f = Finding("GP999", "x", Severity.INFO, "value [red]x[/red] ok", "use [b]y[/b]")
    out = render_terminal(Report("analyze", traces=[t], findings=[f]), color=False, width=WIDE)
    assert "[bold red]not a style[/bold red]" in out
    assert "value [red]x[/red] ok" in out
    assert "use [b]y[/b]" in out


def test_dispatch_through_render(report):
    assert render(report, "terminal", color=False) == render_terminal(report, color=False)


def test_real_trace_analysis_renders(v100_samples):
    from gpuprof.analysis import analyze

    path = next(p for p in v100_samples if "num_workers_0" in str(p))
    report = analyze(path)
    out = render_terminal(report, color=False, width=WIDE)
    t = report.traces[0]
    _line_with(out, "Step time", U.fmt_ms(t.step_time_us))
    _line_with(out, "GPU utilisation", U.fmt_pct(t.gpu_utilization))
    assert t.devices[0].name in out
    for f in report.findings:
        assert f.code in out
    assert out.rstrip("\n").splitlines()[-1] == F.findings_total(report)


def test_wrapped_prose_reads_as_one_paragraph_while_controls_stay_inert():
    # rules write advice as indented multi-line text (textwrap.dedent): the panel shows it as one paragraph
    f = Finding("GP999", "x", Severity.INFO, "a message\n  over two lines",
                "Call optimizer.zero_grad(set_to_none=True),\nthe default since PyTorch 2.0.\x1b[2J")
    out = render_terminal(Report("analyze", traces=[make_trace_summary()], findings=[f]), color=False, width=WIDE)
    assert "\\x0a" not in out
    assert "a message over two lines" in out
    assert "set_to_none=True), the default since PyTorch 2.0.\\x1b[2J" in out  # ESC still shown, not acted on
    assert "\x1b" not in out

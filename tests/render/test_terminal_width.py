"""Terminal report at 80 columns and narrower: numbers never cut, names kept distinct,
COLUMNS honoured off a terminal, a directory of traces summarised once."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gpuprof import units as U
from gpuprof.analysis import analyze
from gpuprof.render import format as F
from gpuprof.render.groups import group_findings
from gpuprof.render.safe import is_inert, shorten_distinct, visible
from gpuprof.render.terminal import TOP_N, render_terminal, terminal_width
from gpuprof.render.width import DEFAULT_WIDTH
from gpuprof.report import KernelStat, Report, TraceSummary
from gpuprof_testing.tracegen import TraceBuilder

from .conftest import shared_trace

REPO = Path(__file__).resolve().parents[2]

REAL = [
    "tbplugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
    "hta/TraceLens/tests/traces/h100/gaunernst_bert-small-uncased__1016001.json.gz",
]


@pytest.fixture
def piped(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """stdout is not a terminal; COLUMNS as each test sets it."""
    import gpuprof.render.terminal as T

    monkeypatch.setattr(T, "_stdout_is_tty", lambda: False)
    monkeypatch.delenv("COLUMNS", raising=False)
    return monkeypatch


def _section(text: str, title: str) -> list[str]:
    """The lines of one titled table (or its stacked form), up to the blank line after it."""
    lines = text.splitlines()
    start = lines.index(title)
    end = lines.index("", start)
    return lines[start + 1 : end]


def _has_token(lines: list[str], token: str) -> bool:
    """``token`` appears whole: not run into other text, not followed by an ellipsis."""
    pat = re.compile(r"(?:^|(?<=\s))" + re.escape(token) + r"(?=\s|$)")
    return any(pat.search(line) for line in lines)


@pytest.mark.parametrize("columns", [80, 60, 50])
@pytest.mark.parametrize("rel", REAL, ids=["v100-resnet50", "h100-bert"])
@pytest.mark.slow  # whole real traces analysed: out of the README's fast command
def test_real_trace_numbers_are_never_cut(rel: str, columns: int, piped: pytest.MonkeyPatch) -> None:
    report = analyze(str(shared_trace(rel)))
    t = report.traces[0]
    assert t.top_ops and t.top_kernels
    piped.setenv("COLUMNS", str(columns))
    out = render_terminal(report, color=False)
    assert max(len(line) for line in out.splitlines()) <= columns
    ops = _section(out, "Top operators")
    for o in t.top_ops[:TOP_N]:  # what the JSON report holds for this table, as the table formats it
        for number in (U.fmt_count(o.count), U.fmt_us(o.total_us), U.fmt_us(o.self_us), U.fmt_us(o.gpu_us)):
            assert _has_token(ops, number), (o.name, number)
    kernels = _section(out, "Top kernels")
    for k in t.top_kernels[:TOP_N]:
        for number in (U.fmt_count(k.count), U.fmt_us(k.total_us), U.fmt_us(k.mean_us), U.fmt_pct(k.share_of_gpu)):
            assert _has_token(kernels, number), (k.name, number)


def _name_cells(out: str, title: str = "Top kernels") -> list[str]:
    """The whole name on each row of a table (its first column), table or stacked form, its wrapped
    lines joined and blanks removed (a name breaks after ", " or "::" alike)."""
    lines = _section(out, title)
    names: list[str] = []
    if len(lines) > 1 and lines[1] and set(lines[1]) <= {"─", " "}:  # a table: header, rule per column, rows
        width = len(lines[1].split(" ")[0])
        for line in lines[2:]:
            cell = line[:width].strip()
            if line.startswith(" ") and names:
                names[-1] += cell
            else:
                names.append(cell)
    else:  # stacked: the name's lines flush left, the number pairs indented below it
        prev_name = False
        for line in lines:
            if line.startswith(" "):
                prev_name = False
                continue
            if prev_name:
                names[-1] += line.strip()
            else:
                names.append(line.strip())
            prev_name = True
    return [re.sub(r"\s", "", n) for n in names]


@pytest.mark.parametrize("width", [160, 100, 80, 60, 45])
def test_names_differing_in_the_middle_stay_distinct(width: int) -> None:
    head = "void at::native::vectorized_elementwise_kernel<4, at::native::"
    tail = "<float>, at::detail::Array<char*, 3> >(int, at::native::BinaryFunctor<float>, at::detail::Array<char*, 3>)"
    names = [head + "AddFunctor" + tail, head + "MulFunctor" + tail, head + "SubFunctor" + tail, "short_kernel"]
    kernels = [KernelStat(n, 1000 + i, 5000.0 - i * 100, 5.0, 0.2) for i, n in enumerate(names)]
    report = Report("analyze", traces=[TraceSummary(path="t.json", top_kernels=kernels)])
    out = render_terminal(report, color=False, width=width)
    assert max(len(line) for line in out.splitlines()) <= width
    shown = _name_cells(out)
    # every name whole (wrapped, never cut), so names that differ only in the middle read differently
    assert shown == [re.sub(r"\s", "", n) for n in names]
    assert "…" not in out


@pytest.mark.parametrize("width", [4, 8, 12, 20, 30, 60, 100])
def test_shorten_distinct(width: int) -> None:
    a = "x" * 50 + "A" + "y" * 50
    b = "x" * 50 + "B" + "y" * 50
    c = "\x1b[2J" + a  # made visible first, as the renderers do
    names = [a, b, a, visible(c), "short"]
    out = shorten_distinct(names, width)
    assert len(set(out[i] for i in (0, 1, 3))) == 3
    assert out[0] == out[2]  # equal names stay equal
    assert all(len(s) <= max(width, 4) for s in out)
    assert all(is_inert(s) for s in out)
    if width >= 5:
        assert out[4] == "short"


def test_terminal_width_sources(piped: pytest.MonkeyPatch) -> None:
    assert terminal_width() == DEFAULT_WIDTH
    piped.setenv("COLUMNS", "72")
    assert terminal_width() == 72
    for bad in ("0", "-5", "wide", ""):
        piped.setenv("COLUMNS", bad)
        assert terminal_width() == DEFAULT_WIDTH


def _demo_trace(path: Path) -> Path:
    name = "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>, at::detail::Array<char*, 3> >"
    b = TraceBuilder()
    for _ in range(3):
        with b.step():
            with b.op("aten::add", input_types=["float"]):
                b.kernel(name, us=500)
            b.cpu(us=100, name="python work")
    return b.write(path)


@pytest.mark.parametrize("columns", [64, 90])
@pytest.mark.slow  # a gpuprof interpreter per width: out of the README's fast command
def test_columns_honoured_when_piped(tmp_path: Path, columns: int) -> None:
    trace = _demo_trace(tmp_path / "demo.pt.trace.json")
    env = dict(os.environ, COLUMNS=str(columns), PYTHONPATH=str(REPO), NO_COLOR="1")
    proc = subprocess.run([sys.executable, "-m", "gpuprof", "analyze", str(trace)], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert proc.returncode in (0, 1), proc.stderr
    widths = [len(line) for line in proc.stdout.splitlines()]
    assert max(widths) == columns  # the panels span exactly the width asked for


def _panels(out: str) -> list[tuple[str, str]]:
    """(title line, body text on one line) of each finding panel."""
    panels: list[tuple[str, str]] = []
    for line in out.splitlines():
        if re.match(r"^╭─ \d+\. ", line):
            panels.append((line, ""))
        elif panels and line.startswith("│"):
            panels[-1] = (panels[-1][0], panels[-1][1] + " " + line.strip("│ "))
    return panels


@pytest.mark.slow  # slow pass: a real trace (or job) analysed whole; the README's fast command stays under 300 CPU s on a 2-core VM
@pytest.mark.parametrize("rel", ["tbplugin/samples/resnet50_num_workers_0", "tbplugin/samples"])
@pytest.mark.parametrize("columns", [80, 60])
def test_directory_summary_once_and_each_finding_once(rel: str, columns: int) -> None:
    report = analyze(str(shared_trace(rel)))
    n = len(report.traces)
    assert n >= 2
    findings = report.sorted_findings()
    groups = group_findings(findings)
    assert len(groups) < len(findings)  # the same findings do recur across the traces
    out = render_terminal(report, color=False, width=columns)
    assert max(len(line) for line in out.splitlines()) <= columns
    # one summary: no per-trace panel, a column per trace
    assert "╭─ Trace " not in out
    labels = [f"#{i}" for i in range(1, n + 1)]
    for label, t in zip(labels, report.traces):
        assert _has_token(out.splitlines(), label)
        assert os.path.basename(t.path) in re.sub(r"\n\s*", "", out)  # listed whole (wrapped when narrow)
    medians = [U.fmt_ms(t.step_time_us) for t in report.traces]
    median_lines = [line for line in out.splitlines() if line.startswith("Step median")]
    assert all(any(m in line for line in median_lines) for m in medians)
    # each finding once, with the traces where it applies
    panels = _panels(out)
    assert len(panels) == len(groups)
    for (title, body), group in zip(panels, groups):
        assert f" {group[0].code} " in title
        assert "Input " not in body
        traces = body.split(" Traces ", 1)[1].split(" Evidence ", 1)[0]
        wanted = {lab for lab, t in zip(labels, report.traces) if t.path in {f.source for f in group}}
        shown = set(re.findall(r"#\d+", traces))
        assert shown == wanted, (title, traces)
    assert out.rstrip("\n").splitlines()[-1] == F.findings_total(report)


@pytest.mark.parametrize("width", [30, 45, 60])
def test_shorten_distinct_names_differing_in_several_places(width: int) -> None:
    """Like the elementwise kernels of a real H100 trace: a template argument differs early
    (128, 4 vs 128, 2), the functor later; all must read differently, without a ~N tag."""
    base = "void at::native::elementwise_kernel<128, {n}, at::native::gpu_kernel_impl_nocast<at::native::{f}<float> >(at::TensorIteratorBase&)::{{lambda(int)#1}})"
    names = [base.format(n=n, f=f) for n, f in ((4, "MulFunctor"), (4, "AddFunctor"), (2, "MulFunctor"), (4, "direct_copy"))]
    out = shorten_distinct(names, width)
    assert len(set(out)) == len(names), out
    assert all(len(s) <= width for s in out)
    assert not any(s.endswith(("~1", "~2", "~3", "~4")) for s in out)

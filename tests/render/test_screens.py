"""Every screen at 80 and 200 columns: no line wider than the terminal, no word and no number of the
data cut (``wa…`` for warning, ``resnet50_…module>)``), and the width used when there is room.

Run through the CLI with ``COLUMNS`` set, as a user piping the output would, on the shared V100
ResNet-50 sample (num_workers 0) and a real memory snapshot from ``../shared/snapshots``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpuprof import units as U
from gpuprof.cli import cli
from gpuprof.codes import catalogue, explain_parts
from gpuprof.memory.units import fmt_bytes
from gpuprof.render.layout import reflow, table_lines, wrap_text
from gpuprof.render.safe import one_line
from gpuprof.render.terminal import TOP_N
from gpuprof_testing.realtraces import TRACES, shared_path, v100_samples

WIDTHS = [80, 200]
SNAPSHOT = "cs336_magma_memory_snapshot.pickle"  # Windows paths: long sites with a line number at the end


def _run(columns: int, *args: str) -> str:
    res = CliRunner().invoke(cli, list(args), env={"COLUMNS": str(columns), "NO_COLOR": "1"})
    assert res.exit_code in (0, 1), res.output
    return res.stdout


def _tokens(out: str) -> set[str]:
    """The blank-separated words of a screen, panel borders taken off."""
    return set(re.sub(r"[│╭╮╰╯─]", " ", out).split())


def _assert_fits(out: str, columns: int) -> None:
    widest = max(out.splitlines(), key=len)
    assert len(widest) <= columns, widest
    assert "…" not in out  # nothing shortened with an ellipsis


def _assert_words_whole(out: str, text: str, what: str) -> None:
    tokens = _tokens(out)
    for word in one_line(text).split():
        assert word in tokens, (what, word)


def _section(out: str, title: str) -> list[str]:
    lines = out.splitlines()
    start = lines.index(title)
    end = lines.index("", start) if "" in lines[start:] else len(lines)
    return lines[start + 1 : end]


def _first_column(out: str, title: str) -> list[str]:
    """The first column of a table, each cell's wrapped lines joined, blanks removed (table or stacked)."""
    lines = _section(out, title)
    cells: list[str] = []
    if len(lines) > 1 and lines[1] and set(lines[1]) <= {"─", " "}:
        width = len(lines[1].split(" ")[0])
        for line in lines[2:]:
            if line.startswith(" ") and cells:
                cells[-1] += line[:width].strip()
            else:
                cells.append(line[:width].strip())
    else:
        joined = False
        for line in lines:
            if line.startswith(" "):
                joined = False
            elif joined:
                cells[-1] += line.strip()
            else:
                cells.append(line.strip())
                joined = True
    return [re.sub(r"\s", "", c) for c in cells]


def _nw0() -> Path:
    return next(p for p in v100_samples() if "num_workers_0" in str(p))


# --------------------------------------------------------------------------- layout


@pytest.mark.parametrize("width", [12, 20, 43, 80])
def test_wrap_keeps_every_character_and_fits(width: int) -> None:
    names = [
        "void cudnn::detail::dgrad_engine<float, 512, 6, 5, 3, 3, 3, false>(int, int, int, float const*, int)",
        r"D:\Dev\assignment2-systems\cs336-basics\cs336_basics\model.py:39 (forward)",
        "volta_scudnn_128x128_stridedB_splitK_small_nn_v1",
        "x" * 100,
    ]
    for name in names:
        lines = wrap_text(name, width)
        assert all(len(line) <= width for line in lines), lines
        assert "".join(lines).replace(" ", "") == name.replace(" ", "")


def test_wrap_breaks_at_blanks_before_punctuation() -> None:
    assert wrap_text("a blocking copy (.to(device))", 20) == ["a blocking copy", "  (.to(device))"]
    assert wrap_text("resnet50_profiler_api.py:44 (<module>)", 30) == ["resnet50_profiler_api.py:44", "  (<module>)"]


def test_table_stacks_rather_than_squeezing_names() -> None:
    cols = [("Cause", "wrap"), ("Runtime call", "left"), ("Count", "right"), ("Location", "wrap")]
    rows = [("a blocking copy (.to(device))", "cudaStreamSynchronize", "12", "resnet50_profiler_api.py:44 (<module>)")]
    wide, stacked = table_lines(cols, rows, 120)
    assert not stacked and len(wide) == 3 and "a blocking copy (.to(device))" in wide[2].plain
    narrow, stacked = table_lines(cols, rows, 60)
    assert stacked
    text = "\n".join(t.plain for t in narrow)
    assert narrow[0].plain == "a blocking copy (.to(device))"
    assert "Location resnet50_profiler_api.py:44 (<module>)" in text and "Count 12" in text


def test_reflow_joins_paragraphs_and_keeps_list_items() -> None:
    doc = "One two\nthree four.\n\n* item one\n  goes on\n* item two\n\n    verbatim   line"
    assert reflow(doc, 80) == ["One two three four.", "", "* item one goes on", "* item two", "", "    verbatim   line"]
    assert reflow(doc, 12)[:2] == ["One two", "three four."]


# --------------------------------------------------------------------------- rules and explain


@pytest.mark.parametrize("columns", WIDTHS)
def test_rules_screen(columns: int) -> None:
    out = _run(columns, "rules")
    _assert_fits(out, columns)
    tokens = _tokens(out)
    for c in catalogue():
        for word in (c.code, c.name, *c.severity_text.split()):
            assert word in tokens, (c.code, word)
        _assert_words_whole(out, c.title, c.code)
    if columns == 200:  # room for one row per code: code, name, severity and description on one line
        for c in catalogue():
            assert any(c.code in line and c.name in line and c.title in line for line in out.splitlines()), c.code


@pytest.mark.parametrize("columns", WIDTHS)
def test_explain_screen_rewraps_without_losing_a_word(columns: int) -> None:
    longest = 0
    for c in catalogue():
        out = _run(columns, "explain", c.code)
        assert max(len(line) for line in out.splitlines()) <= columns, c.code
        tokens = _tokens(out)
        flat = re.sub(r"\s", "", out)
        for kind, text in explain_parts(c):
            if kind == "code":  # an example's code whole (a long line goes on, indented, below)
                for line in text.splitlines():
                    assert re.sub(r"\s", "", line.partition("  #")[0]) in flat, (c.code, line)
            else:  # prose re-wrapped at blanks, no word cut
                assert all(w in tokens for w in text.split()), c.code
        longest = max(longest, max(len(line) for line in out.splitlines()))
    if columns == 200:
        assert longest > 120  # prose uses the width it has


# --------------------------------------------------------------------------- analyze


@pytest.mark.slow  # slow pass: a real trace (or job) analysed whole; the README's fast command stays under 300 CPU s on a 2-core VM
@pytest.mark.parametrize("columns", WIDTHS)
def test_analyze_v100_screen(columns: int) -> None:
    path = str(_nw0())
    report = json.loads(_run(columns, "analyze", path, "--format", "json"))
    out = _run(columns, "analyze", path)
    _assert_fits(out, columns)
    tokens = _tokens(out)
    trace = report["traces"][0]
    for f in report["findings"]:
        title = next(line for line in out.splitlines() if f" {f['code']} {f['name']}" in line)
        assert f["severity"].upper() in title.split()
        _assert_words_whole(out, f["message"], f["code"])
        _assert_words_whole(out, f["advice"], f["code"])
        cost = f"{U.fmt_us(f['cost_us_per_step'])}/step" if f["cost_us_per_step"] is not None else "not estimated"
        assert all(w in tokens for w in cost.split()), (f["code"], cost)
    assert Path(path).name in re.sub(r"[│\s]", "", out)  # the file name whole, wrapped at a "/"
    kernels = trace["top_kernels"][:TOP_N]
    assert _first_column(out, "Top kernels") == [re.sub(r"\s", "", k["name"]) for k in kernels]
    for k in kernels:
        for number in (U.fmt_count(k["count"]), U.fmt_pct(k["share_of_gpu"])):
            assert number in tokens
    causes = _first_column(out, "Host synchronisations")
    assert causes == [re.sub(r"\s", "", s["cause"]) for s in trace["syncs"][:TOP_N]]
    for s in trace["syncs"]:
        if s["location"]:  # whole, never "resnet50_…module>)"
            _assert_words_whole(out, s["location"], "sync location")
    if columns == 200:
        # the name column takes the width the numbers leave (it was cut at 60 characters before)
        rule = _section(out, "Top kernels")[1]
        name_width = len(rule.split(" ")[0])
        assert name_width >= columns - 45
        # a name that fits is on one line, whole
        fitting = [k["name"] for k in kernels if len(k["name"]) <= name_width]
        assert fitting and all(any(name in line for line in out.splitlines()) for name in fitting)


# --------------------------------------------------------------------------- memory


@pytest.mark.parametrize("columns", WIDTHS)
def test_memory_snapshot_screen(columns: int) -> None:
    path = str(shared_path("..", "snapshots", SNAPSHOT)) if TRACES.name == "traces" else ""
    if not path:
        pytest.skip("snapshots folder not beside the traces")
    data = json.loads(_run(columns, "memory", path, "--format", "json"))
    out = _run(columns, "memory", path)
    _assert_fits(out, columns)
    tokens = _tokens(out)
    dev = next(s for s in data["sections"] if s["kind"] == "memory")["devices"][0]
    sites = [re.sub(r"\s", "", s["site"]) for s in dev["top_sites"]]
    assert _first_column(out, "Top holders at the peak, by allocation site") == sites
    for s in dev["top_sites"]:
        assert fmt_bytes(s["bytes"]).split()[0] in tokens
    for f in data["findings"]:
        _assert_words_whole(out, f["message"], f["code"])
    if columns == 200:
        assert all(s["site"] in out for s in dev["top_sites"])  # one line each when there is room


def test_memory_of_a_cpu_trace_says_cpu_only() -> None:
    sample = next(Path(__file__).resolve().parents[2].glob("examples/sample_trace/*.pt.trace.json.gz"))
    out = _run(80, "memory", str(sample))
    assert "CPU only (no GPU device in the trace)" in out
    assert "peak reserved" not in out and "reserved (start" not in out  # no caching allocator on a CPU
    assert "0 B at" not in out
    md = _run(80, "memory", str(sample), "--format", "markdown")
    assert "### CPU only (no GPU device in the trace)" in md and "peak reserved" not in md


@pytest.mark.parametrize("columns", WIDTHS)
def test_cross_rank_screen(columns: int) -> None:
    """Two ranks of a real NCCL job: the 11-column per-rank table keeps every number whole (a block
    of pairs per rank at 80 columns, one row per rank at 200)."""
    from gpuprof.units import fmt_us

    hta = ("hta", "HolisticTraceAnalysis", "tests", "data")
    r0 = str(shared_path(*hta, "timeline_analysis", "sampled_rank-0.json.gz"))
    r1 = str(shared_path(*hta, "trace_filter", "sampled_rank-1.json.gz"))
    data = json.loads(_run(columns, "analyze", r0, r1, "--format", "json"))
    out = _run(columns, "analyze", r0, r1)
    assert max(len(line) for line in out.splitlines()) <= columns
    sec = next(s for s in data["sections"] if s["kind"] == "cross_rank")
    lines = out.splitlines()
    for r in sec["ranks"]:
        figures = [fmt_us(r[k]) for k in ("step_us", "compute_us", "comm_us", "exposed_comm_us", "wait_us")]
        if columns == 200:  # one row per rank, all its figures on it
            assert any(line.startswith(f"{r['rank']} ") and all(f in line for f in figures) for line in lines)
        else:
            block = "\n".join(lines[lines.index(f"rank {r['rank']}"):][:4])
            assert all(f in block for f in figures), block

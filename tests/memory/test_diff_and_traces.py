"""The leak finder, and memory analysis of real profiler traces ([memory] events)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuprof.findings import Severity
from gpuprof.memory.analysis import analyze_memory, memory_report
from gpuprof.memory.diff import DiffOptions, diff_report
from gpuprof.memory.load import load_memory, sniff
from gpuprof.trace.load import load_trace
from gpuprof.trace.model import memory_totals
from gpuprof_testing.snapshots import MiB

from .conftest import CPU_TRACE, V100_2021, V100_TOTALS, real_trace


def test_diff_finds_planted_leak_at_the_right_line(leak_pair: tuple[Path, Path]) -> None:
    a, b = leak_pair
    report = diff_report(str(a), str(b))
    leaks = [f for f in report.findings if f.code == "GP520"]
    assert len(leaks) == 1
    f = leaks[0]
    assert f.severity is Severity.WARNING
    assert (f.location.file, f.location.line) == ("/home/u/proj/train.py", 61)  # type: ignore[union-attr]
    assert f.evidence[0].value == 12 * 2 * MiB  # 12 more steps x 2 MiB kept per step
    rows = report.sections[0].devices[0]["sites"]
    assert rows[0]["site"] == "/home/u/proj/train.py:61 (main)"
    assert (rows[0]["blocks_before"], rows[0]["blocks_after"]) == (3, 15)
    assert all(r["growth"] == 0 for r in rows[1:])  # weights and activations did not grow


def test_diff_of_identical_snapshots_and_threshold(leak_pair: tuple[Path, Path]) -> None:
    a, b = leak_pair
    assert diff_report(str(a), str(a)).findings == []
    assert diff_report(str(a), str(b), DiffOptions(min_growth=25 * MiB)).findings == []


def test_trace_memory_with_totals_matches_the_file() -> None:
    p = real_trace(CPU_TRACE)
    trace = load_trace(p)
    report = memory_report(str(p))
    dev = report.sections[0].devices[0]
    assert dev["device"] == "cpu"
    assert dev["allocated"]["peak"] == max(memory_totals(e)[0] for e in trace.memory)
    assert dev["num_allocations"] == sum(1 for e in trace.memory if e.nbytes >= 0)
    # every byte at the peak is attributed (unattributed ones to the pre-history pseudo-site)
    assert sum(s["bytes"] for s in dev["top_sites"]) == dev["allocated"]["peak"] or len(dev["top_sites"]) == 10
    assert any(s["file"] == "gen_trace.py" for s in dev["top_sites"])  # with_stack: the user's script line
    assert report.count_at_or_above(Severity.WARNING) == 0


@pytest.mark.slow  # slow pass: a real trace (or job) analysed whole; the README's fast command stays under 300 CPU s on a 2-core VM
def test_real_v100_trace_with_totals() -> None:
    p = real_trace(V100_TOTALS)
    trace = load_trace(p)
    data = load_memory(p)
    assert not data.notes  # addresses read and matched
    section, findings, analyses = analyze_memory(data)
    cuda = next(d for d in section.devices if d["device"] == "cuda:1")
    mem = [e for e in trace.memory if e.stream == 1]
    assert cuda["allocated"]["peak"] == max(memory_totals(e)[0] for e in mem)
    assert cuda["reserved"]["peak"] == max(memory_totals(e)[1] for e in mem)
    assert cuda["total_memory"] == 34089730048  # Tesla V100-SXM2-32GB from deviceProperties
    assert any("aten::" in s["site"] for s in cuda["top_sites"])  # sites from the enclosing operators


def test_2021_trace_without_totals_rebuilds_them_and_diffs_steps() -> None:
    p = real_trace(V100_2021)
    data = load_memory(p)
    assert any("no Total Allocated" in n for n in data.notes)
    section, _, _ = analyze_memory(data)
    cuda = next(d for d in section.devices if d["device"] == "cuda:0")
    assert cuda["reserved"]["peak"] is None
    assert cuda["allocated"]["peak"] > 0
    # 2021 [memory] events have no Addr: nothing is attributed to a site, nothing is over-counted
    assert any("no Addr" in n for n in data.notes)
    assert [s["site"] for s in cuda["top_sites"]] == ["<unattributed: the trace records no allocation addresses>"]
    assert cuda["top_sites"][0]["bytes"] == cuda["allocated"]["peak"]
    report = diff_report(str(p), None)
    dev = next(d for d in report.sections[0].devices if d["device"] == "cuda:0")
    assert dev["before"].startswith("end of step") and len(dev["step_allocated"]) >= 2
    assert dev["sites"] == []


def test_sniff_decides_by_content_not_extension(tmp_path: Path, clean_snapshot: Path) -> None:
    odd = tmp_path / "snapshot.json"
    odd.write_bytes(clean_snapshot.read_bytes())
    assert sniff(odd) == "snapshot"
    assert memory_report(str(odd)).sections[0].source_type == "snapshot"
    gz = real_trace(CPU_TRACE)
    renamed = tmp_path / "trace.pickle"
    renamed.write_bytes(gz.read_bytes())
    assert sniff(renamed) == "trace"


def test_diff_of_one_current_trace_finds_its_profiler_steps() -> None:
    # torch 2.x writes ProfilerStep#N as a user_annotation, not a cpu_op: the repo's sample
    # trace (gpuprof capture, torch 2.13, steps 16-20: examples/sample_trace/generate.py) must still
    # diff first vs last step
    sample = next((Path(__file__).resolve().parents[2] / "examples" / "sample_trace").glob("*.pt.trace.json.gz"))
    report = diff_report(str(sample), None)
    dev = next(d for d in report.sections[0].devices if d["device"] == "cpu")
    assert (dev["before"], dev["after"]) == ("end of step 16", "end of step 20")
    assert [s["step"] for s in dev["step_allocated"]] == [16, 17, 18, 19, 20]

"""The plugin's verdict on a finished capture, without training: each limit's figure against one computed
here from the raw trace events, the baseline gate (gpuprof diff's), and writing a baseline."""

from __future__ import annotations

import gzip
import json
import statistics
from pathlib import Path
from typing import Any

import pytest

from gpuprof.analysis import analyze
from gpuprof.capture.result import CaptureResult, RecordedTrace, WindowReport
from gpuprof.pytest_plugin.capture import TestCapture
from gpuprof.pytest_plugin.gate import failure
from gpuprof.pytest_plugin.marker import parse_limits
from gpuprof.pytest_plugin.verdict import judge
from gpuprof_testing.tracegen import TraceBuilder

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "examples" / "sample_trace"


def _trace(path: Path, step_ms: list[float]) -> Path:
    b = TraceBuilder(device=None, cc=None, total_memory=None)
    for ms in step_ms:
        with b.step(ms=ms):
            b.cpu(ms=ms * 0.9)
    return b.write(path)


def _raw_step_ms(path: Path) -> list[float]:
    """ProfilerStep durations straight from the file's events (no gpuprof code)."""
    events = json.loads(path.read_text())["traceEvents"]
    return [e["dur"] / 1000 for e in events if str(e.get("name", "")).startswith("ProfilerStep#")]


def _result(report: dict[str, Any], steps: int = 10, median_ms: float | None = 10.0,
            files: tuple[str, ...] = ()) -> CaptureResult:
    return CaptureResult(run_dir="run", out_dir="run", steps=steps, step_time_median_ms=median_ms,
                         traces=(RecordedTrace(path="t.json", first_step=3, last_step=7),), files=files,
                         reports=(WindowReport(at_step=steps, final=True, report=report),))


def test_max_step_ms_is_judged_on_the_captures_median(tmp_path: Path) -> None:
    rep = {"findings": []}
    assert not judge(_result(rep, median_ms=39.9), parse_limits((), {"max_step_ms": 40}, tmp_path), None).failed
    v = judge(_result(rep, steps=12, median_ms=50.0), parse_limits((), {"max_step_ms": 40}, tmp_path), None)
    assert v.broken == ["step time: median 50.00 ms over 12 steps, over max_step_ms=40 (by 25%)"]
    v = judge(_result(rep, median_ms=None), parse_limits((), {"max_step_ms": 40}, tmp_path), None)
    assert v.broken and "not measured" in v.broken[0]


def test_fail_on_takes_the_findings_at_or_above_the_bar(tmp_path: Path) -> None:
    report = analyze(SAMPLE).to_dict()
    rank = {"info": 0, "warning": 1, "error": 2}
    warnings = [f["code"] for f in report["findings"] if f["severity"] == "warning"]
    assert warnings, "the sample trace has warnings (its planted num_workers=0)"
    res = _result(report)
    for bar in ("warning", "info"):
        over = [f for f in report["findings"] if rank[f["severity"]] >= rank[bar]]
        v = judge(res, parse_limits((), {"fail_on": bar}, tmp_path), None)
        codes = ", ".join(dict.fromkeys(f["code"] for f in over))
        assert v.broken[0] == f"findings: {len(over)} at or above {bar!r} ({codes}):"
        # each finding as the capture's summary shows it: severity, code, message, then its fix
        assert [line.split()[:2] for line in v.broken[1:] if not line.startswith("    ")] == [
            [f["severity"], f["code"]] for f in over]
        assert sum(line.startswith("    Fix: ") for line in v.broken[1:]) == sum(1 for f in over if f["advice"])
    assert not judge(res, parse_limits((), {"fail_on": "never"}, tmp_path), None).failed
    assert not judge(res, parse_limits((), {"fail_on": "error"}, tmp_path), None).failed


def test_the_baseline_gate_is_gpuprof_diffs_with_figures_from_the_raw_steps(tmp_path: Path) -> None:
    before = _trace(tmp_path / "before.json", [10.0, 10.2, 9.8, 10.1, 9.9, 10.0])
    after = _trace(tmp_path / "after.json", [15.0, 15.3, 14.8, 15.1, 14.9, 15.0])
    b_doc, a_doc = analyze(before).to_dict(), analyze(after).to_dict()
    expected = statistics.median(_raw_step_ms(after)) / statistics.median(_raw_step_ms(before)) - 1
    lim = parse_limits((), {"baseline": str(before), "max_regression": "20%", "fail_on": "never"}, tmp_path)
    v = judge(_result(a_doc), lim, b_doc, "baseline before.json")
    assert len(v.broken) == 1, v.broken
    line = v.broken[0]
    assert line.startswith(f"regression against baseline before.json: step_time worse by {expected * 100:.1f}%: "
                           "over the 20.0% threshold and beyond the noise")
    assert "(baseline 10.0 ms, this run 15.0 ms)" in line
    # within the threshold: kept, and said under the verdict
    kept = judge(_result(a_doc), parse_limits((), {"baseline": str(before), "max_regression": "60%"}, tmp_path),
                 b_doc)
    assert not kept.failed and "within the 60.0% threshold" in kept.details[0]
    # the other way round: faster is never a regression
    assert not judge(_result(b_doc), lim, a_doc).failed


def _plan(tmp_path: Path, kwargs: dict[str, Any], report: dict[str, Any]) -> TestCapture:
    run = tmp_path / "logs" / "t"
    run.mkdir(parents=True)
    saved = run / "report.json"
    saved.write_text(json.dumps(report))
    plan = TestCapture(tmp_path / "logs", "t", parse_limits((), kwargs, tmp_path))
    plan.result = _result(report, files=(str(saved),))
    plan._done = True
    return plan


def test_update_baseline_writes_the_runs_report_then_the_gate_reads_it(tmp_path: Path) -> None:
    report = analyze(SAMPLE).to_dict()
    plan = _plan(tmp_path, {"baseline": "perf/base.json", "fail_on": "never"}, report)
    assert failure(plan, update_baseline=True) is None
    written = tmp_path / "perf" / "base.json"
    assert written.read_bytes() == (tmp_path / "logs" / "t" / "report.json").read_bytes()
    assert failure(plan) is None  # the same run against itself: no regression


def test_a_missing_baseline_fails_and_says_how_to_write_it(tmp_path: Path) -> None:
    plan = _plan(tmp_path, {"baseline": "nope.json", "fail_on": "never"}, analyze(SAMPLE).to_dict())
    text = failure(plan)
    assert text is not None
    assert f"baseline: {tmp_path / 'nope.json'}: no such baseline (write it with pytest --gpuprof-update-baseline)" \
        in text
    assert "gpuprof: files in " in text


def test_nothing_measured_fails_naming_the_steps_needed(tmp_path: Path) -> None:
    plan = TestCapture(tmp_path, "t", parse_limits((), {"steps": 3}, tmp_path))
    plan._done = True
    text = failure(plan)
    assert text is not None and "needs at least 7 for steps=3" in text
    assert "\n" not in text and text.startswith("gpuprof: limits not checked (fail_on='warning'): ")
    plan.result = CaptureResult(steps=4, step_time_median_ms=5.0)  # steps, but the window never closed
    text = failure(plan)
    assert text is not None and "too few for the recorded window: steps=3 needs at least 7" in text


def _clocked(tmp_path: Path, optimizer_steps: int, off: str | None = None) -> TestCapture:
    """A finished plan whose body took ``optimizer_steps`` and whose capture flushed a partial window."""
    from gpuprof.run.clock import OptimizerClock
    from gpuprof.run.options import RunOptions

    plan = TestCapture(tmp_path, "t", parse_limits((), {"max_step_ms": 1000}, tmp_path))
    plan.clock = OptimizerClock(RunOptions(logdir=str(tmp_path), run="t"))
    plan.clock.steps, plan.clock.off = optimizer_steps, off
    # what a body of 4 optimizer steps leaves: the capture stopped inside its window and wrote the one step it
    # had (a trace and a report with no finding), which the limits alone would pass
    plan.result = CaptureResult(run_dir="run", out_dir="run", steps=optimizer_steps - 1, step_time_median_ms=5.0,
                                traces=(RecordedTrace(path="t.json", first_step=3, last_step=3),),
                                reports=(WindowReport(at_step=3, final=True, report={"findings": []}),))
    plan._done = True
    return plan


def test_a_partial_window_from_too_few_steps_fails_in_one_line(tmp_path: Path) -> None:
    """docs/pytest.md: a body of fewer than steps + 4 optimizer steps fails; 4 steps used to pass on the
    partial trace the capture flushed at the end."""
    text = failure(_clocked(tmp_path, 4))
    assert text == ("gpuprof: limits not checked (max_step_ms=1000, fail_on='warning'): the test body took 4 "
                    "optimizer steps, too few for the recorded window: steps=5 needs at least 9 (train longer in "
                    "the test, or lower steps=)")
    assert failure(_clocked(tmp_path, 9)) is None  # enough steps: the same figures keep the limits
    # a clock that failed stopped counting (its own warning said so): its partial figures are judged, not
    # read as too few steps
    assert failure(_clocked(tmp_path, 4, off="failed")) is None


@pytest.mark.parametrize("gz", [False, True])
def test_a_baseline_trace_or_run_directory_is_analysed(tmp_path: Path, gz: bool) -> None:
    src = _trace(tmp_path / ("b.pt.trace.json" + (".gz" if gz else "")), [10.0] * 6)
    if gz:
        assert gzip.decompress(src.read_bytes())
    from gpuprof.pytest_plugin.verdict import load_baseline

    doc = load_baseline(src)
    assert doc.traces[0].num_steps == 6
    assert load_baseline(tmp_path).traces[0].num_steps == 6  # the directory holding it


@pytest.mark.slow  # slow pass: a real trace (or job) analysed whole; the README's fast command stays under 300 CPU s on a 2-core VM
def test_on_real_traces_the_gate_says_what_gpuprof_diff_says(tmp_path: Path) -> None:
    """A real regression (ResNet-50, 4 DataLoader workers -> 0): the marker's verdict is the CLI gate's."""
    from click.testing import CliRunner

    from gpuprof.cli import cli
    from gpuprof_testing.realtraces import shared_path

    samples = shared_path("tbplugin", "samples")
    saved = {}
    for name in ("resnet50_num_workers_4", "resnet50_num_workers_0"):
        saved[name] = tmp_path / f"{name}.json"
        saved[name].write_text(json.dumps(analyze(samples / name).to_dict()))
    res = CliRunner().invoke(cli, ["diff", str(saved["resnet50_num_workers_4"]), str(saved["resnet50_num_workers_0"]),
                                   "--format", "json", "--fail-on-regression", "5%"])
    assert res.exit_code == 1, res.output
    cli_verdict = json.loads(res.output)["regression"]
    lim = parse_limits((), {"baseline": str(saved["resnet50_num_workers_4"]), "fail_on": "never"}, tmp_path)
    from gpuprof.pytest_plugin.verdict import load_baseline

    after = json.loads(saved["resnet50_num_workers_0"].read_text())
    v = judge(_result(after), lim, load_baseline(lim.baseline), "baseline nw4")  # type: ignore[arg-type]
    assert v.broken == [f"regression against baseline nw4: {cli_verdict['reason']} (baseline "
                        f"{cli_verdict['before'] / 1000:.1f} ms, this run {cli_verdict['after'] / 1000:.1f} ms)"]
    # the step times it compares are the traces' own, pooled per side
    pooled = statistics.median([s for t in after["traces"] for s in t["step_times_us"]])
    assert cli_verdict["after"] == pytest.approx(pooled)

"""Did a test's training keep its limits? The figures that broke them, as the failure message says them.

Three limits (docs/pytest.md, "What fails a test"):

* ``max_step_ms``: the median step time over every step the clock measured
  (``CaptureResult.step_time_median_ms``, the figure the capture's summary
  prints), above the limit;
* ``fail_on``: a finding of the run's report at or above that severity
  (``never``: none fails), each shown as the capture's summary shows it;
* ``baseline`` + ``max_regression``: ``gpuprof diff BASELINE RUN
  --fail-on-regression PCT --metric METRIC``'s verdict (the same comparison
  and noise-aware gate, :mod:`gpuprof.diff`), which fails also when it cannot
  judge (a gate that cannot judge never reads as a pass).

A test that measured nothing (no optimizer step, too few steps for the
recorded window, another profiler running) fails too, saying why: a limit
that was never checked must not read as kept.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuprof.pytest_plugin.marker import Limits

if TYPE_CHECKING:  # pragma: no cover - annotations only
    from gpuprof.capture.result import CaptureResult
    from gpuprof.saved.types import SavedReport

__all__ = ["Verdict", "judge", "load_baseline"]


@dataclass
class Verdict:
    """``broken``: one line per limit broken (empty: the test keeps its limits); ``details``: lines under them."""

    broken: list[str] = field(default_factory=list)
    details: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return bool(self.broken)

    def text(self, limits: Limits, run_dir: str | None) -> str:
        lines = [f"gpuprof: the test's training broke its limits ({limits.describe()}):"]
        lines += [f"  {b}" for b in self.broken]
        lines += self.details
        if run_dir:
            lines.append(f"gpuprof: files in {run_dir} (report.md, report.json, the trace)")
        return "\n".join(lines)


def load_baseline(path: Path) -> SavedReport:
    """The baseline as a typed report: a saved report.json, or a run directory or trace analysed now.

    Raises :class:`gpuprof.errors.InputError` (one line naming the file) for anything else.
    """
    from gpuprof.errors import InputError
    from gpuprof.saved.read import checked, is_saved_report, read_saved

    p = os.fspath(path)
    if os.path.islink(p):
        raise InputError(p, "the baseline is a symbolic link; name the file it points to")
    if is_saved_report(p):
        return read_saved(p)
    if not os.path.exists(p):
        raise InputError(p, "no such baseline (write it with pytest --gpuprof-update-baseline)")
    if not (os.path.isfile(p) or os.path.isdir(p)):
        raise InputError(p, "not a trace file, run directory or report.json")
    from gpuprof.analysis import analyze

    return checked(analyze(p, timeline=False).to_dict(), p)  # the verdict reads no timeline


def judge(result: "CaptureResult", limits: Limits, baseline: SavedReport | None,
          baseline_label: str = "baseline") -> Verdict:
    """The verdict on one test's capture (see the module docstring)."""
    v = Verdict()
    if limits.max_step_ms is not None:
        median = result.step_time_median_ms
        if median is None:
            v.broken.append("step time: not measured (no step finished), so max_step_ms cannot be checked")
        elif median > limits.max_step_ms:
            v.broken.append(f"step time: median {median:.2f} ms over {result.steps} steps, over max_step_ms="
                            f"{limits.max_step_ms:g} (by {(median / limits.max_step_ms - 1) * 100:.0f}%)")
    _findings(result, limits, v)
    if limits.baseline is not None and baseline is not None:
        _regression(result, limits, baseline, baseline_label, v)
    return v


def _findings(result: "CaptureResult", limits: Limits, v: Verdict) -> None:
    if limits.fail_on == "never":
        return
    from gpuprof.capture.end.text import finding_lines
    from gpuprof.findings import Severity, sort_findings

    bar = Severity.parse(limits.fail_on)
    over = [f for f in sort_findings(result.findings()) if f.severity.rank >= bar.rank]
    if not over:
        return
    codes = ", ".join(dict.fromkeys(f.code for f in over))
    v.broken.append(f"findings: {len(over)} at or above {limits.fail_on!r} ({codes}):")
    for f in over:
        v.broken += finding_lines(f)  # indented by two already: under the line above


def _regression(result: "CaptureResult", limits: Limits, baseline: SavedReport, label: str, v: Verdict) -> None:
    from gpuprof.diff.compare import diff_reports
    from gpuprof.diff.gate import judge as gate

    report = result.report
    if report is None:
        v.broken.append(f"regression against {label}: this run wrote no report, so it cannot be compared")
        return
    assert limits.max_regression is not None  # parse_limits sets it whenever there is a baseline
    verdict = gate(diff_reports(baseline, report, (label, "this run")), limits.metric, limits.max_regression)
    figures = f"(baseline {_fmt(verdict['before'], limits.metric)}, this run {_fmt(verdict['after'], limits.metric)})"
    if verdict["worse_by"] is None:
        v.broken.append(f"regression against {label}: cannot judge: {verdict['reason']}")
    elif verdict["regressed"]:
        v.broken.append(f"regression against {label}: {verdict['reason']} {figures}")
    else:
        v.details.append(f"  kept: against {label}, {verdict['reason']} {figures}")


def _fmt(value: Any, metric: str) -> str:
    if not isinstance(value, (int, float)):
        return "not measured"
    if metric in ("gpu_utilization",):
        return f"{value * 100:.1f}%"
    from gpuprof.units import fmt_us

    return fmt_us(float(value))

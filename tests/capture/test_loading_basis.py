"""The breakdown's data-loading share and GP601's, side by side in a capture report, say why they differ."""

from __future__ import annotations

from gpuprof.capture.end.analyse import LOADING_BASIS_GAP, loading_basis_notes
from gpuprof.findings import Evidence, Finding, Severity
from gpuprof.report import Report, TraceSummary


def _gp601(share: float, steps: int) -> Finding:
    return Finding(code="GP601", name="dataloader-no-workers", severity=Severity.WARNING,
                   message=f"{share:.0%} of step time over the run's {steps} steps is spent waiting for data",
                   advice="workers", origin="runtime",
                   evidence=[Evidence("data_loading_share", share, 0.01, "fraction", extra={"steps": steps})])


def _trace(path: str, loading_us: float, step_us: float, steps: int) -> TraceSummary:
    return TraceSummary(path=path, num_steps=steps, step_time_us=step_us, step_time_mean_us=step_us,
                        breakdown_us={"data_loading": loading_us, "other": step_us - loading_us})


def test_different_shares_get_a_note_naming_both_bases() -> None:
    traces = [_trace("a.json", 10_000.0, 100_000.0, 5), _trace("b.json", 20_000.0, 100_000.0, 5)]
    report = Report("capture", traces=traces, findings=[_gp601(0.35, 300)])
    notes = loading_basis_notes(report)
    assert len(notes) == 1
    recorded = (10_000 * 5 + 20_000 * 5) / (100_000 * 10)  # independent: recorded loading time over recorded steps
    assert f"{recorded:.0%}" in notes[0] and "10 recorded steps" in notes[0]
    assert "35%" in notes[0] and "all 300 steps of the run" in notes[0]


def test_close_shares_and_reports_without_gp601_get_none() -> None:
    close = 0.15 + LOADING_BASIS_GAP / 2
    report = Report("capture", traces=[_trace("a.json", 15_000.0, 100_000.0, 5)], findings=[_gp601(close, 300)])
    assert loading_basis_notes(report) == []
    assert loading_basis_notes(Report("capture", traces=[_trace("a.json", 15_000.0, 100_000.0, 5)])) == []

"""The project's own sample trace (examples/sample_trace, the README's first command) shows what it is
meant to show: the DataLoader pathology, recorded after start-up, no warm-up inside it."""

from __future__ import annotations

from pathlib import Path

from gpuprof.analysis import analyze

SAMPLE = Path(__file__).resolve().parents[1] / "examples" / "sample_trace"


def test_sample_is_small_and_recorded_after_warm_up() -> None:
    traces = sorted(SAMPLE.glob("*.pt.trace.json.gz"))
    assert len(traces) == 1 and traces[0].stat().st_size < 1_000_000
    report = analyze(str(SAMPLE))
    codes = {f.code for f in report.findings}
    assert "GP901" not in codes  # no warm-up or outlier steps in the project's own sample
    assert "GP102" in codes  # its pathology: num_workers=0
    t = report.traces[0]
    assert t.num_steps == 5 and min(t.step_ids) > 10  # the schedule skipped the start-up steps

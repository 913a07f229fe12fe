"""A multi-rank run's figures read the same in ``gpuprof history``, ``gpuprof diff``, the trackers and the tab.

Issue 45: history took the plain mean of the traces' GPU utilisations, diff the busy time over the step time
summed over the traces, so one run of two ranks (one with many steps at high utilisation, one with few at low)
read 60% in one and 80% in the other. Both read :class:`gpuprof.saved.RunFigures` now; the expected figure is
computed here from the reports' raw values, independently.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gpuprof.cli import cli

# (rank, steps, mean step µs, busy µs per step, data-loading share)
RANKS = ((0, 10, 100_000.0, 90_000.0, 0.05), (1, 2, 150_000.0, 45_000.0, 0.40))


def _trace(rank: int, n: int, mean: float, busy: float, share: float) -> dict[str, Any]:
    return {"path": f"rank{rank}.pt.trace.json", "rank": rank, "world_size": 2, "num_steps": n,
            "step_ids": list(range(100 - n, 100)),  # both ranks' windows end at step 99
            "step_time_us": mean, "step_time_mean_us": mean, "step_times_us": [mean] * n, "gpu_busy_us": busy,
            "gpu_utilization": busy / mean, "data_loading_share": share, "idle_breakdown_us": {},
            "breakdown_us": {"kernel": busy, "data_loading": share * mean}, "has_gpu_activity": True}


def _report(traces: list[dict[str, Any]]) -> dict[str, Any]:
    return {"schema_version": "1.6", "command": "analyze", "inputs": [], "traces": traces, "findings": [],
            "sections": [], "notes": []}


def _expected_utilisation() -> float:
    """The job's GPUs' busy time over their step time, from the raw per-rank values."""
    return sum(busy * n for _, n, _, busy, _ in RANKS) / sum(mean * n for _, n, mean, _, _ in RANKS)


@pytest.fixture
def job(tmp_path: Path) -> Path:
    """A capture's layout: one report per rank under the run (``job/rank<R>/report.json``), and the
    ``gpuprof analyze`` report of both ranks' traces beside it (``both.json``)."""
    for r in RANKS:
        (tmp_path / "logs" / "job" / f"rank{r[0]}").mkdir(parents=True)
        (tmp_path / "logs" / "job" / f"rank{r[0]}" / "report.json").write_text(json.dumps(_report([_trace(*r)])))
    (tmp_path / "both.json").write_text(json.dumps(_report([_trace(*r) for r in RANKS])))
    return tmp_path


def test_history_and_diff_state_one_utilisation_for_a_multi_rank_run(job: Path) -> None:
    expected = _expected_utilisation()
    plain_mean = sum(busy / mean for _, _, mean, busy, _ in RANKS) / len(RANKS)
    assert abs(expected - plain_mean) > 0.1  # the run where the two definitions disagree
    res = CliRunner().invoke(cli, ["history", str(job / "logs"), "--format", "json"])
    assert res.exit_code == 0, res.output
    (run,) = json.loads(res.output)["runs"]
    assert run["name"] == "job" and len(run["reports"]) == 2
    res = CliRunner().invoke(cli, ["diff", str(job / "both.json"), str(job / "both.json"), "--format", "json"])
    assert res.exit_code == 0, res.output
    diff = {m["name"]: m for m in json.loads(res.output)["metrics"]}
    assert diff["gpu_utilization"]["before"] == pytest.approx(expected)
    assert run["gpu_utilization"] == pytest.approx(diff["gpu_utilization"]["before"])


def test_the_trackers_and_the_tab_state_the_same_figures(job: Path) -> None:
    from gpuprof.saved import RunFigures
    from gpuprof.saved.read import read_saved
    from gpuprof.tbplugin.data import _headline
    from gpuprof.trackers.payload import windows

    both = read_saved(job / "both.json")
    figures = RunFigures.of([both])
    assert figures.gpu_utilization == pytest.approx(_expected_utilisation())
    # data loading: each rank's share of its own step time, weighted by that time
    loading = sum(share * mean * n for _, n, mean, _, share in RANKS) / sum(mean * n for _, n, mean, _, _ in RANKS)
    assert figures.data_loading_share == pytest.approx(loading)
    ranks = RunFigures.of(read_saved(job / "logs" / "job" / f"rank{r}" / "report.json") for r in (0, 1))
    assert ranks == figures  # the per-rank reports and the report of both ranks: one run, one set of figures
    # the trackers: the ranks' traces end at the same step, one window, the run's figures
    (window,) = windows(json.loads((job / "both.json").read_text()))
    assert window.metrics["gpu_utilization"] == pytest.approx(figures.gpu_utilization)
    assert window.metrics["data_loading_share"] == pytest.approx(loading)
    # the tab's cards
    analysed = [{"summary": t, "steps": [{"time_us": t["step_time_mean_us"], "breakdown_us": {}, "idle_us": {}}] * t["num_steps"]}
                for t in json.loads((job / "both.json").read_text())["traces"]]
    assert _headline(analysed)["gpu_utilization"] == pytest.approx(figures.gpu_utilization)


@pytest.mark.slow  # two real traces analysed whole
def test_two_real_ranks_read_one_utilisation_in_history_and_diff(tmp_path: Path) -> None:
    """HTA's sampled ranks 0 and 1 (../shared): each rank's report under one run, and both ranks in one report.
    Their utilisations differ (44.5% and 46.8%, with different step times), so the plain mean of the traces
    (history before issue 45) is off the job's figure in the fifth digit; history and diff now state the same."""
    from gpuprof_testing.realtraces import shared_path

    ranks = (shared_path("hta", "HolisticTraceAnalysis", "tests", "data", "timeline_analysis", "sampled_rank-0.json.gz"),
             shared_path("hta", "HolisticTraceAnalysis", "tests", "data", "trace_filter", "sampled_rank-1.json.gz"))
    runner = CliRunner()
    for r, trace in enumerate(ranks):
        out = tmp_path / "logs" / "job" / f"rank{r}" / "report.json"
        out.parent.mkdir(parents=True)
        assert runner.invoke(cli, ["analyze", str(trace), "--format", "json", "-o", str(out), "--fail-on", "never"]
                             ).exit_code == 0
    both = tmp_path / "both.json"
    assert runner.invoke(cli, ["analyze", *map(str, ranks), "--format", "json", "-o", str(both), "--fail-on", "never"]
                         ).exit_code == 0
    traces = json.loads(both.read_text())["traces"]
    assert sorted(t["rank"] for t in traces) == [0, 1] and all(t["gpu_utilization"] for t in traces)
    expected = (sum(t["gpu_busy_us"] * t["num_steps"] for t in traces)
                / sum(t["step_time_mean_us"] * t["num_steps"] for t in traces))
    (run,) = json.loads(runner.invoke(cli, ["history", str(tmp_path / "logs"), "--format", "json"]).stdout)["runs"]
    diff = json.loads(runner.invoke(cli, ["diff", str(both), str(both), "--format", "json"]).stdout)
    (util,) = [m["before"] for m in diff["metrics"] if m["name"] == "gpu_utilization"]
    assert run["gpu_utilization"] == pytest.approx(expected, rel=1e-9) and util == pytest.approx(expected, rel=1e-9)

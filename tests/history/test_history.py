"""``gpuprof history``: ten synthetic runs with a planted change at run 6 mark run 6, and no noise.

The figures of each run are checked against the reports written, and the change-point test against
its documented definition (medians, pooled MAD, K) on series built here.
"""

from __future__ import annotations

import json
import math
import os
import random
import statistics
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gpuprof.cli import cli
from gpuprof.history.changes import K, change_points, finding_changes
from gpuprof.history.render import sparkline


def run(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args))


def _report(step_us: float, util: float, loading_us: float, codes: list[str], peak: int | None = None,
            traces: int = 1) -> dict[str, Any]:
    sections = []
    if peak is not None:
        sections.append({"kind": "memory", "devices": [{"allocated": {"peak": peak}}, {"allocated": {"peak": peak // 2}}]})
    return {
        "schema_version": "1.2", "inputs": [], "notes": [], "sections": sections,
        "traces": [{"path": f"t{i}.json", "num_steps": 5, "step_time_us": step_us, "step_time_mean_us": step_us,
                    "gpu_busy_us": util * step_us, "gpu_utilization": util, "idle_breakdown_us": {},
                    "breakdown_us": {"data_loading": loading_us, "kernel": step_us - loading_us}}
                   for i in range(traces)],
        "findings": [{"code": c, "name": c, "severity": "warning", "message": "m", "advice": "a"} for c in codes],
    }


def _write(root: Path, name: str, doc: dict[str, Any], t: float) -> Path:
    d = root / name
    d.mkdir(parents=True)
    p = d / "report.json"
    p.write_text(json.dumps(doc))
    os.utime(p, (t, t))
    return p


def ten_runs(tmp_path: Path, seed: int = 7) -> tuple[Path, list[float]]:
    """Runs 1-5: 100 ms steps, 1 % noise; runs 6-10: 130 ms (data loading went up), GP102 appears at run 6."""
    rng = random.Random(seed)
    steps = []
    for i in range(1, 11):
        base = 100_000.0 if i < 6 else 130_000.0
        step = base * (1 + rng.uniform(-0.01, 0.01))
        util = 0.80 * (1 + rng.uniform(-0.01, 0.01))  # noise only
        steps.append(step)
        loading = step - 95_000.0 if i >= 6 else 5_000.0 * (1 + rng.uniform(-0.01, 0.01))
        codes = ["GP201"] + (["GP102"] if i >= 6 else [])
        # names sort against time order (run10 before run2): the order must come from the times
        _write(tmp_path, f"run{i}", _report(step, util, loading, codes, peak=(1 << 30) + rng.randrange(1 << 20)),
               1_700_000_000 + 60 * i)
    return tmp_path, steps


def test_ten_runs_mark_run_6_and_not_the_noise(tmp_path: Path) -> None:
    root, steps = ten_runs(tmp_path)
    res = run("history", str(root), "--format", "json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert [r["name"] for r in doc["runs"]] == [f"run{i}" for i in range(1, 11)]
    marked = {(p["run"], p["metric"]) for p in doc["change_points"]}
    assert marked == {("run6", "step_time_us"), ("run6", "data_loading_share")}
    p = next(p for p in doc["change_points"] if p["metric"] == "step_time_us")
    assert p["before"] == pytest.approx(statistics.median(steps[:5]))
    assert p["after"] == pytest.approx(statistics.median(steps[5:]))
    assert [r["step_time_us"] for r in doc["runs"]] == pytest.approx(steps)
    assert {(c["code"], c["run"], c["change"]) for c in doc["finding_changes"]} == {
        ("GP201", "run1", "appeared"), ("GP102", "run6", "appeared")}
    assert doc["runs"][0]["memory_peak_bytes"] >= 1 << 30  # the higher device's peak


@pytest.mark.parametrize("seed", range(20))
def test_noise_alone_marks_nothing(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    names = [f"r{i}" for i in range(10)]
    values: list[float | None] = [100.0 * (1 + rng.gauss(0, 0.02)) for _ in names]
    assert change_points(names, "step_time_us", values) == []


def test_two_changes_are_both_marked_and_missing_values_skipped() -> None:
    names = [f"r{i}" for i in range(12)]
    values: list[float | None] = [100, 101, 99, 100, None, 150, 151, 149, 150, 80, 81, 79]
    got = change_points(names, "m", values)
    assert [(p.run, p.before, p.after) for p in got] == [("r5", 100, 150), ("r9", 150, 80)]


def test_a_shift_below_k_noise_widths_is_not_marked() -> None:
    # runs alternate +-2: every run-to-run difference is 4, so the noise is 4 * 1.4826 / sqrt(2) ~ 4.19
    a = [100.0 + (2 if i % 2 else -2) for i in range(6)]
    sigma = 4 * 1.4826 / math.sqrt(2)
    names = [str(i) for i in range(12)]
    assert change_points(names, "m", [*a, *[x + K * sigma * 0.8 for x in a]]) == []
    got = change_points(names, "m", [*a, *[x + K * sigma * 1.5 for x in a]])
    assert [(p.run, p.before, p.after) for p in got] == [("6", 100.0, pytest.approx(100.0 + K * sigma * 1.5))]


def test_finding_changes_name_each_transition() -> None:
    got = finding_changes(["a", "b", "c", "d"], [["X"], ["X", "Y"], ["Y"], ["X", "Y"]])
    assert [(c.code, c.run, c.change) for c in got] == [
        ("X", "a", "appeared"), ("Y", "b", "appeared"), ("X", "c", "disappeared"), ("X", "d", "appeared")]


def test_terminal_view_shows_sparklines_and_the_mark(tmp_path: Path) -> None:
    root, _ = ten_runs(tmp_path)
    res = run("history", str(root))
    assert res.exit_code == 0, res.output
    assert "run6: step time" in res.output and "GP102 appeared in run6" in res.output
    line = next(x for x in res.output.splitlines() if x.strip().startswith("step time "))
    bars = line.split()[2]
    assert len(bars) == 10 and bars[:5] == "▁" * 5 and bars[-1] in "▇█" and line.rstrip().endswith(" ms")
    assert sparkline([1.0, None, 2.0]) == "▁ █"


def test_ranks_of_a_run_are_one_run_and_bad_reports_are_noted(tmp_path: Path) -> None:
    _write(tmp_path / "a", "rank0", _report(100.0, 0.5, 10.0, ["GP1"]), 1_700_000_000)
    _write(tmp_path / "a", "rank1", _report(300.0, 0.7, 10.0, ["GP2"]), 1_700_000_001)
    bad = tmp_path / "b"
    bad.mkdir()
    (bad / "report.json").write_text("{not json")
    res = run("history", str(tmp_path), "--format", "json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert [r["name"] for r in doc["runs"]] == ["a"] and doc["runs"][0]["step_time_us"] == 200.0
    # the ranks' GPU busy time over their step time (5 steps each), not the mean of 0.5 and 0.7 (issue 45)
    util = (0.5 * 100.0 * 5 + 0.7 * 300.0 * 5) / (100.0 * 5 + 300.0 * 5)
    assert doc["runs"][0]["findings"] == ["GP1", "GP2"] and doc["runs"][0]["gpu_utilization"] == pytest.approx(util)
    assert any("b/report.json" in n for n in doc["notes"])


def test_no_reports_or_not_a_directory_is_one_line(tmp_path: Path) -> None:
    for path in (tmp_path, tmp_path / "missing"):
        res = run("history", str(path))
        assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1


@pytest.mark.slow
def test_real_v100_runs_mark_the_move_to_loader_workers(tmp_path: Path) -> None:
    """The four V100 samples as four runs (two with num_workers=0, then two with 4): each run's figures are
    its report's, and GP102 (single-process loading) disappears at the third run.

    No change point is expected: with two runs a side, the data-loading share of the two num_workers=0 runs
    differs by 10 points (39.2 % and 29.7 %), so a 29-point fall is under 4 noise widths.
    """
    from gpuprof_testing.realtraces import v100_samples

    docs = []
    for i, trace in enumerate(v100_samples()):
        out = tmp_path / "logs" / f"r{i}" / "report.json"
        out.parent.mkdir(parents=True)
        assert run("analyze", str(trace), "--format", "json", "-o", str(out), "--fail-on", "never").exit_code == 0
        os.utime(out, (1_700_000_000 + i, 1_700_000_000 + i))
        docs.append(json.loads(out.read_text()))
    res = run("history", str(tmp_path / "logs"), "--format", "json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    for r, rep in zip(doc["runs"], docs):
        t = rep["traces"][0]
        assert r["step_time_us"] == t["step_time_us"] and r["gpu_utilization"] == t["gpu_utilization"]
        # the trace's data-loading share (schema 1.4's one definition; overlapping GPU work counts), as the
        # trackers send it
        assert r["data_loading_share"] == pytest.approx(t["data_loading_share"])
        assert r["findings"] == sorted({f["code"] for f in rep["findings"]})
    assert {"code": "GP102", "run": "r2", "change": "disappeared"} in doc["finding_changes"]
    assert doc["runs"][0]["data_loading_share"] > 0.2 > 0.02 > doc["runs"][2]["data_loading_share"]


def test_a_url_prefix_is_read_through_fsspec(tmp_path: Path) -> None:
    """fsspec's in-memory store stands in for object storage: the same runs, checks and change point."""
    fsspec = pytest.importorskip("fsspec")
    fs = fsspec.filesystem("memory")
    root = f"/hist-{os.getpid()}-{tmp_path.name}"
    rng = random.Random(3)
    try:
        for i in range(1, 11):
            step = (100_000.0 if i < 6 else 130_000.0) * (1 + rng.uniform(-0.01, 0.01))
            fs.pipe(f"{root}/r{i:02d}/report.json", json.dumps(_report(step, 0.8, 1000.0, [])).encode())
        fs.pipe(f"{root}/bad/report.json", b"{not json")
        fs.pipe(f"{root}/r01/trace.json", b"{}")  # not a report: not read
        res = run("history", f"memory://{root}", "--format", "json")
        assert res.exit_code == 0, res.output
        doc = json.loads(res.stdout)
        assert sorted(r["name"] for r in doc["runs"]) == [f"r{i:02d}" for i in range(1, 11)]
        # the share of a constant 1 ms of loading falls with the longer steps: a change too
        assert {(p["run"], p["metric"]) for p in doc["change_points"]} == {("r06", "step_time_us"),
                                                                          ("r06", "data_loading_share")}
        assert any("bad/report.json" in n and "not a valid JSON report" in n for n in doc["notes"])
        empty = run("history", f"memory://{root}-none")
        assert empty.exit_code == 2 and len(empty.output.strip().splitlines()) == 1
    finally:
        fs.rm(root, recursive=True)

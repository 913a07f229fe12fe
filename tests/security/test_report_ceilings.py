"""Gates never pass on nonsense: saved-report values beyond physical sense are refused, naming the field.

A step time of ``1e308`` is finite, of the right type and not negative, so it passed the schema check; the
diff's arithmetic then overflowed it to infinity and NaN, and ``gpuprof diff --fail-on-regression 5%``
passed "within the noise" (exit 0) while ``gpuprof history`` printed a 300-digit step time. Now a step
longer than a day (``GPUPROF_MAX_STEP_S``), any time beyond 2^53 µs, an integer beyond 2^53 and a count of
a trace's events above its ``num_events`` are refused by every reader (one line naming the file and the
field, exit 2); ``history`` skips such a run with a note; a gate whose metric is not finite fails (exit 2).
The reports are ``gpuprof analyze --format json`` of the sample trace and of a real trace in ../shared
(skipped cleanly without it).
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gpuprof.cli import cli
from gpuprof.errors import InputError
from gpuprof_testing.realtraces import shared_path

REPO = Path(__file__).resolve().parents[2]
ALEXNET = ("hta", "HolisticTraceAnalysis", "tests", "data", "critical_path", "alexnet",
           "benchmark_result_2869224_1695835535_trace.json.gz")
DAY_US = 86_400e6


def _report_of(trace: Path, out: Path) -> dict[str, Any]:
    res = CliRunner().invoke(cli, ["analyze", str(trace), "--format", "json", "-o", str(out), "--fail-on", "never"])
    assert res.exit_code == 0, res.output
    doc: dict[str, Any] = json.loads(out.read_text())
    assert doc["traces"] and doc["traces"][0]["num_events"] > 0
    return doc


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _report_of(REPO / "examples" / "sample_trace", tmp_path_factory.mktemp("sample") / "r.json")


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _report_of(shared_path(*ALEXNET), tmp_path_factory.mktemp("real") / "r.json")


def _with(doc: dict[str, Any], *changes: tuple[tuple[Any, ...], Any]) -> dict[str, Any]:
    bad = copy.deepcopy(doc)
    for keys, value in changes:
        target: Any = bad
        for k in keys[:-1]:
            target = target[k]
        target[keys[-1]] = value
    return bad


def _write(path: Path, doc: dict[str, Any]) -> Path:
    path.write_text(json.dumps(doc))
    return path


def _refused(tmp_path: Path, good: dict[str, Any], bad: dict[str, Any], field: str, why: str) -> None:
    """Every reader refuses ``bad`` in one line naming the file and ``field``; the gate never passes."""
    g = _write(tmp_path / "good.json", good)
    b = _write(tmp_path / "bad.json", bad)
    runner = CliRunner()
    for args in (["diff", str(g), str(b), "--fail-on-regression", "5%"],
                 ["diff", str(b), str(b), "--fail-on-regression", "5%"],  # the reproduction: same nonsense twice
                 ["diff", str(b), str(g), "--format", "json"],
                 ["analyze", str(b)]):
        res = runner.invoke(cli, args)
        assert res.exit_code == 2, (args, res.output[-600:])
        line = res.output.strip()
        assert "\n" not in line and str(b) in line and field in line and why in line, line
        assert "Traceback" not in line
    from gpuprof.tbplugin.data import read_report

    with pytest.raises(InputError, match="malformed report") as err:
        read_report(b)
    assert field in str(err.value)


STEP = ("traces", 0, "step_time_us")


@pytest.mark.parametrize(("changes", "field", "why"), [
    # the reproduction: 1e308 in every step time
    ([(STEP, 1e308), (("traces", 0, "step_time_mean_us"), 1e308), (("traces", 0, "step_times_us", 0), 1e308)],
     "traces[0].step_time_us", "2^53"),
    ([(STEP, 2 * DAY_US)], "traces[0].step_time_us", "no step lasts longer than 86,400 s"),
    ([(("traces", 0, "step_times_us", 1), 2 * DAY_US)], "traces[0].step_times_us[1]", "GPUPROF_MAX_STEP_S"),
    ([(("traces", 0, "breakdown_us", "other"), 1e15)], "traces[0].breakdown_us.other", "no step lasts"),
    ([(("traces", 0, "top_ops", 0, "total_us"), 1e300)], "traces[0].top_ops[0].total_us", "2^53"),
    ([(("traces", 0, "top_ops", 0, "count"), 10**7)], "traces[0].top_ops[0].count", "more than the 4,248 events"),
    ([(("traces", 0, "num_steps"), 10**6)], "traces[0].num_steps", "events of the trace"),
    ([(("traces", 0, "num_events"), 10**400)], "traces[0].num_events", "2^53"),  # no OverflowError on the way
    ([(("traces", 0, "top_ops", 0, "total_us"), 10**400)], "traces[0].top_ops[0].total_us", "2^53"),  # an int
    ([(("traces", 0, "step_times_us"), [20_000.0] * 9)], "traces[0].step_times_us", "9 step times for 5 steps"),
    ([(("findings", 0, "cost_us_per_step"), 5 * DAY_US)], "findings[0].cost_us_per_step", "no step lasts"),
    ([(("sections",), [{"kind": "capture", "step_time_median_ms": 1e300}])], "sections[0].step_time_median_ms",
     "2^53"),
])
def test_values_beyond_physical_sense_are_refused_by_every_reader(
        sample: dict[str, Any], tmp_path: Path, changes: list[tuple[tuple[Any, ...], Any]], field: str,
        why: str) -> None:
    assert sample["traces"][0]["num_events"] == 4248 and sample["traces"][0]["num_steps"] == 5
    _refused(tmp_path, sample, _with(sample, *changes), field, why)


def test_the_ceiling_on_a_step_is_documented_and_raised_by_its_variable(
        sample: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    two_days = _write(tmp_path / "long.json", _with(sample, (STEP, 2 * DAY_US)))
    monkeypatch.setenv("GPUPROF_MAX_STEP_S", str(3 * 86_400))
    assert CliRunner().invoke(cli, ["analyze", str(two_days), "--fail-on", "never"]).exit_code == 0
    monkeypatch.setenv("GPUPROF_MAX_STEP_S", "soon")  # a typo never lifts the ceiling
    res = CliRunner().invoke(cli, ["analyze", str(two_days)])
    assert res.exit_code == 2 and "GPUPROF_MAX_STEP_S: must be a positive number" in res.output
    for doc in ("limits.md", "report-schema.md"):
        assert "GPUPROF_MAX_STEP_S" in (REPO / "docs" / doc).read_text(encoding="utf-8"), doc


def test_history_skips_a_run_of_nonsense_with_a_note(sample: dict[str, Any], tmp_path: Path) -> None:
    for run, doc in (("good", sample), ("bad", _with(sample, (STEP, 1e308), (("traces", 0, "step_time_mean_us"), 1e308)))):
        (tmp_path / run).mkdir()
        _write(tmp_path / run / "report.json", doc)
    res = CliRunner().invoke(cli, ["history", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "1 runs" in res.output and "  good " in res.output and "  bad " not in res.output
    note = [ln for ln in res.output.splitlines() if "bad/report.json" in ln]
    assert len(note) == 1 and "skipped" in note[0] and "traces[0].step_time_us" in note[0], note
    assert "0000000000" not in res.output  # no 300-digit step time
    as_json = CliRunner().invoke(cli, ["history", str(tmp_path), "--format", "json"])
    assert as_json.exit_code == 0 and [r["name"] for r in json.loads(as_json.output)["runs"]] == ["good"]


def test_the_real_trace_report_is_within_every_ceiling_and_a_day_long_step_is_not(
        real: dict[str, Any], tmp_path: Path) -> None:
    good = _write(tmp_path / "real.json", real)
    assert CliRunner().invoke(cli, ["diff", str(good), str(good), "--fail-on-regression", "5%"]).exit_code == 0
    t = real["traces"][0]
    counts = [k["count"] for k in t["top_kernels"]] + [o["count"] for o in t["top_ops"]]
    assert counts and max(counts) <= t["num_events"]  # the cross-check holds on a real report
    _refused(tmp_path, real, _with(real, (("traces", 0, "step_times_us", 0), DAY_US + 1e6)),
             "traces[0].step_times_us[0]", "no step lasts")


def _diff(before: float | None, after: float | None, noise: float | None, lower_is_better: bool = True
          ) -> dict[str, Any]:
    return {"metrics": [{"name": "m", "before": before, "after": after, "noise": noise, "unit": "us",
                         "lower_is_better": lower_is_better}]}


@pytest.mark.parametrize(("before", "after", "noise", "lower"), [
    (20_000.0, 21_000.0, math.inf, True),  # "within the noise" of an infinite noise: passed before
    (0.5, math.inf, 0.01, False),  # higher is better and the after is infinite: passed before
    (20_000.0, math.nan, 10.0, True),
    (math.inf, math.inf, 0.0, True),
    (5e-324, 1.0, None, True),  # a finite before whose relative change overflows
])
def test_a_gate_whose_metric_is_not_finite_is_not_judged(before: float, after: float, noise: float | None,
                                                         lower: bool) -> None:
    from gpuprof.diff.gate import judge

    verdict = judge(_diff(before, after, noise, lower), "m", 0.05)
    assert verdict["worse_by"] is None and not verdict["regressed"]
    assert "not a finite number" in verdict["reason"]


def test_the_command_line_fails_a_gate_whose_metric_is_not_finite(
        sample: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A metric the readers let through (within every ceiling) but the arithmetic made infinite: exit 2."""
    import gpuprof.diff.compare as compare

    g = _write(tmp_path / "good.json", sample)
    real_diff = compare.diff_reports

    def with_infinite_noise(*a: Any, **k: Any) -> dict[str, Any]:
        d = real_diff(*a, **k)
        for m in d["metrics"]:
            if m["name"] == "step_time":
                m["noise"] = math.inf
                m["after"] = m["before"] * 2  # twice as slow: only an infinite noise band lets this pass
        return d

    monkeypatch.setattr(compare, "diff_reports", with_infinite_noise)
    res = CliRunner().invoke(cli, ["diff", str(g), str(g), "--fail-on-regression", "5%"])
    assert res.exit_code == 2, res.output
    line = res.output.strip()
    assert "\n" not in line and "step_time's noise is inf here, not a finite number" in line, line

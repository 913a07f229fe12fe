"""A real saved report with one value made wrong: every reader refuses it, naming the field (exit 2).

The report is ``gpuprof analyze --format json`` of a real trace in
../shared (skipped cleanly without it). Hypothesis picks a value in it and
makes it NaN, infinite, negative, a share over 1, or of the wrong type; then
``gpuprof diff`` (with a ``--fail-on-regression`` gate: it must not pass),
``gpuprof analyze report.json`` and the TensorBoard tab's reader must each
refuse it with one line naming the file and that value's field. The
unchanged report goes through all of them (the control).
"""

from __future__ import annotations

import copy
import json
import math
import re
from pathlib import Path
from typing import Any, Iterator

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuprof.cli import cli
from gpuprof.errors import InputError
from gpuprof_testing.realtraces import shared_path

ALEXNET = ("hta", "HolisticTraceAnalysis", "tests", "data", "critical_path", "alexnet",
           "benchmark_result_2869224_1695835535_trace.json.gz")

# keys whose values are durations, sizes or counts in a trace summary (docs/report-schema.md): never negative
_SHARES = {"gpu_utilization", "share_of_gpu", "cost_share"}
# open maps and values whose sign or type the schema leaves free
_FREE = (".extra", ".evidence[", ".step_ids", ".devices[", ".timeline.origin_us", ".start_us", ".end_us")
# a timeline's times are relative to its origin: an event that began before the first step is negative
_FREE_TIME = re.compile(r"\.timeline\.(lanes\[\d+\]\.events\[\d+\]\[0\]|critical\[\d+\]\[[12]\])$")
# a timeline's rows after the first of each list: thousands of leaves of one shape, which would crowd out the rest
_REPEATS = re.compile(r"\.timeline\.(.*\.)?(events|critical|markers|steps|names)\[[1-9]\d*\]")


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    trace = shared_path(*ALEXNET)
    out = tmp_path_factory.mktemp("saved") / "good.json"
    res = CliRunner().invoke(cli, ["analyze", str(trace), "--format", "json", "-o", str(out), "--fail-on", "never"])
    assert res.exit_code == 0, res.output
    doc: dict[str, Any] = json.loads(out.read_text())
    assert doc["traces"] and doc["findings"]  # a report with something to get wrong
    return doc


def _leaves(v: Any, path: str = "") -> Iterator[tuple[str, tuple[Any, ...], Any]]:
    """(path as the checker names it, the keys leading there, value) for every number in ``v``."""
    stack: list[tuple[Any, str, tuple[Any, ...]]] = [(v, path, ())]
    while stack:
        x, p, keys = stack.pop()
        if isinstance(x, dict):
            stack.extend((y, f"{p}.{k}" if p else k, keys + (k,)) for k, y in x.items())
        elif isinstance(x, list):
            stack.extend((y, f"{p}[{i}]", keys + (i,)) for i, y in enumerate(x))
        elif isinstance(x, (int, float)) and not isinstance(x, bool) and not _REPEATS.search(p):
            yield p, keys, x


def _set(doc: dict[str, Any], keys: tuple[Any, ...], value: Any) -> dict[str, Any]:
    bad = copy.deepcopy(doc)
    target: Any = bad
    for k in keys[:-1]:
        target = target[k]
    target[keys[-1]] = value
    return bad


def _typed(path: str) -> bool:
    """A value whose type and range the schema fixes (not inside an open map or a free-sign field)."""
    return path.startswith(("traces[", "findings[")) and not any(f in path for f in _FREE) \
        and not path.endswith((".ts", ".line", ".id")) and not _FREE_TIME.search(path)


def _refused_everywhere(tmp_path: Path, good: dict[str, Any], bad: dict[str, Any], field: str) -> None:
    bad_file = tmp_path / "bad.json"
    good_file = tmp_path / "good.json"
    bad_file.write_text(json.dumps(bad, allow_nan=True))  # NaN and Infinity as Python writes them
    good_file.write_text(json.dumps(good))
    runner = CliRunner()
    for args in (["diff", str(good_file), str(bad_file), "--fail-on-regression", "5%"],
                 ["diff", str(bad_file), str(good_file), "--fail-on-regression", "5%", "--format", "json"],
                 ["analyze", str(bad_file)]):
        res = runner.invoke(cli, args)
        assert res.exit_code == 2, (args, field, res.output[-500:])  # never 0 (the gate passed) nor 1
        line = res.output.strip()
        assert "\n" not in line and str(bad_file) in line and field in line, (field, line)
        assert "Traceback" not in line and "internal error" not in line
    from gpuprof.tbplugin.data import read_report

    with pytest.raises(InputError, match="malformed report") as err:
        read_report(bad_file)
    assert field in str(err.value)


def test_the_real_report_itself_is_read_by_every_reader(saved: dict[str, Any], tmp_path: Path) -> None:
    good = tmp_path / "good.json"
    good.write_text(json.dumps(saved))
    runner = CliRunner()
    res = runner.invoke(cli, ["diff", str(good), str(good), "--fail-on-regression", "5%"])
    assert res.exit_code == 0, res.output
    assert runner.invoke(cli, ["analyze", str(good), "--fail-on", "never"]).exit_code == 0
    from gpuprof.tbplugin.data import read_report

    assert read_report(good)["traces"][0]["path"] == saved["traces"][0]["path"]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), bad=st.sampled_from([math.nan, math.inf, -math.inf]))
def test_a_non_finite_number_anywhere_is_refused(saved: dict[str, Any], tmp_path: Path, data: st.DataObject,
                                                  bad: float) -> None:
    path, keys, _ = data.draw(st.sampled_from(sorted(_leaves(saved))), label="value")
    _refused_everywhere(tmp_path, saved, _set(saved, keys, bad), path)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), amount=st.floats(min_value=1e-3, max_value=1e12))
def test_a_negative_duration_size_or_count_is_refused(saved: dict[str, Any], tmp_path: Path, data: st.DataObject,
                                                       amount: float) -> None:
    leaves = sorted((p, k, v) for p, k, v in _leaves(saved) if _typed(p))
    path, keys, value = data.draw(st.sampled_from(leaves), label="value")
    negative: float | int = -max(1, int(amount)) if isinstance(value, int) else -amount
    _refused_everywhere(tmp_path, saved, _set(saved, keys, negative), path)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), over=st.floats(min_value=1.001, max_value=1e9))
def test_a_share_over_one_is_refused(saved: dict[str, Any], tmp_path: Path, data: st.DataObject, over: float) -> None:
    leaves = sorted((p, k, v) for p, k, v in _leaves(saved) if _typed(p) and p.rsplit(".", 1)[-1] in _SHARES)
    assert leaves, "the real report has shares"
    path, keys, _ = data.draw(st.sampled_from(leaves), label="share")
    _refused_everywhere(tmp_path, saved, _set(saved, keys, over), path)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), wrong=st.sampled_from(["12", True, [], {}, "NaN"]))
def test_a_value_of_the_wrong_type_is_refused(saved: dict[str, Any], tmp_path: Path, data: st.DataObject,
                                               wrong: Any) -> None:
    leaves = sorted((p, k, v) for p, k, v in _leaves(saved) if _typed(p))
    path, keys, _ = data.draw(st.sampled_from(leaves), label="value")
    _refused_everywhere(tmp_path, saved, _set(saved, keys, wrong), path)


@pytest.mark.parametrize("field, value", [("traces", [None]), ("findings", [[]]), ("notes", [3]),
                                          ("inputs", [{"a": 1}]), ("failed_rules", [1.5])])
def test_a_list_of_the_wrong_items_is_refused(saved: dict[str, Any], tmp_path: Path, field: str, value: Any) -> None:
    _refused_everywhere(tmp_path, saved, dict(saved, **{field: value}), f"{field}[0]")


@pytest.mark.parametrize("field", ["step_time_us", "step_time_mean_us", "num_steps", "breakdown_us", "path"])
def test_a_missing_figure_is_refused(saved: dict[str, Any], tmp_path: Path, field: str) -> None:
    bad = copy.deepcopy(saved)
    del bad["traces"][0][field]
    _refused_everywhere(tmp_path, saved, bad, f"traces[0].{field} is missing")


def test_a_gate_that_cannot_judge_does_not_pass(saved: dict[str, Any], tmp_path: Path) -> None:
    """Valid reports, but the after-run has no trace: the step time is not measured there, so no verdict."""
    good, empty = tmp_path / "good.json", tmp_path / "empty.json"
    good.write_text(json.dumps(saved))
    empty.write_text(json.dumps(dict(saved, traces=[], findings=[])))
    res = CliRunner().invoke(cli, ["diff", str(good), str(empty), "--fail-on-regression", "5%"])
    assert res.exit_code == 2 and str(empty) in res.output and "step_time is not measured" in res.output
    assert res.output.count("\n") == 1
    # without a gate the same comparison is shown (exit 0): only the gate refuses to judge
    assert CliRunner().invoke(cli, ["diff", str(good), str(empty)]).exit_code == 0


@pytest.mark.parametrize("field", ["name", "severity", "message"])
def test_analyze_names_a_missing_finding_field(saved: dict[str, Any], tmp_path: Path, field: str) -> None:
    bad = copy.deepcopy(saved)
    del bad["findings"][0][field]
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(bad))
    res = CliRunner().invoke(cli, ["analyze", str(path)])
    assert res.exit_code == 2 and res.output.count("\n") == 1, res.output
    assert str(path) in res.output and f"findings[0].{field} is missing" in res.output


@pytest.mark.parametrize("keys, value", [
    (("traces", 0, "critical_path", "length_us"), -1.0),
    (("traces", 0, "critical_path", "parts", 0, "us"), float("nan")),
    (("traces", 0, "critical_path", "parts", 0, "kind"), 3),
    (("findings", 0, "what_if_saving_us"), -5.0),
    (("findings", 0, "what_if_note"), 7),
])
def test_a_bad_critical_path_or_what_if_is_refused(saved: dict[str, Any], tmp_path: Path, keys: tuple[Any, ...],
                                                    value: Any) -> None:
    assert saved["traces"][0]["critical_path"]["parts"]  # the real report has them to get wrong
    field = "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in keys).lstrip(".")
    _refused_everywhere(tmp_path, saved, _set(saved, keys, value), field)


@pytest.mark.parametrize("field, value", [
    ("mfu", "high"), ("mfu.value", -0.1), ("mfu.known_flops_share", 1.5), ("mfu.peak_source", 7),
    ("mfu.flops_by_precision", {"bf16": -1.0}), ("mfu.per_module", [{"name": 3}]),
    ("comm_wait_us", -5.0), ("comm_wait_source", 1), ("gpu_working_utilization", 2.0),
])
def test_the_mfu_and_waiting_fields_are_checked(saved: dict[str, Any], tmp_path: Path, field: str, value: Any) -> None:
    """The figures issue 37 added (traces[].mfu, comm_wait_us, gpu_working_utilization): a wrong one is refused."""
    bad = copy.deepcopy(saved)
    target = bad["traces"][0]
    *parents, last = field.split(".")
    for k in parents:
        if not isinstance(target.get(k), dict):
            target[k] = {}
        target = target[k]
    target[last] = value
    _refused_everywhere(tmp_path, saved, bad, "traces[0]." + field)


@pytest.mark.parametrize("keys, value, field", [
    # values only the live report's types refused before 45.2 (analyze did; diff and the tab read them): one typed
    # reader now refuses them everywhere, naming the field
    (("traces", 0, "devices", 0, "compute_capability"), [8, 0, 1], "traces[0].devices[0].compute_capability"),
    (("job",), {"steps": 4, "phases": [{"start_step": 0, "end_step": 3, "step_time_median_us": 5.0}]},
     "job.phases[0].kind is missing"),
    (("job",), {"steps": 4, "windows": [{"start_step": 0, "steps": "four", "reason": "default"}]},
     "job.windows[0].steps"),
])
def test_what_the_live_report_needs_is_refused_by_every_reader(saved: dict[str, Any], tmp_path: Path,
                                                                keys: tuple[Any, ...], value: Any, field: str) -> None:
    assert saved["traces"][0]["devices"]  # the real report has a device to get wrong
    _refused_everywhere(tmp_path, saved, _set(saved, keys, value), field)

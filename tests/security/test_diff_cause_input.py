"""Hostile ``traces[].cause_per_step`` in a saved report read by ``gpuprof diff`` (docs/diff.md, "Fixed"):
a wrong value is exit 2 naming the field; codes that name no rule, markup in a code, and very long lists are
data, never a crash or a verdict."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gpuprof.cli import cli


def _doc(causes: Any, findings: tuple[str, ...] = ()) -> dict[str, Any]:
    times = [10_000.0 + i for i in range(4)]
    return {"schema_version": "1.6", "inputs": [], "sections": [], "notes": [],
            "traces": [{"path": "t", "num_steps": 4, "step_time_us": 10_001.5, "step_time_mean_us": 10_001.5,
                        "gpu_busy_us": 0.0, "gpu_utilization": None, "breakdown_us": {}, "idle_breakdown_us": {},
                        "step_times_us": times, "cause_per_step": causes}],
            "findings": [{"code": c, "name": c.lower(), "severity": "info", "message": "m", "source": "t"} for c in findings]}


def _diff(tmp_path: Path, before: Any, after: Any) -> Any:
    paths = []
    for name, doc in (("a.json", before), ("b.json", after)):
        (tmp_path / name).write_text(json.dumps(doc))
        paths.append(str(tmp_path / name))
    return CliRunner().invoke(cli, ["diff", *paths, "--format", "json"])


@pytest.mark.parametrize("bad", [
    {"GP102": "1,2,3"}, {"GP102": [1.0, -5.0]}, {"GP102": [1.0, "NaN"]}, {"GP102": [[1.0]]}, [1.0, 2.0], "GP102",
])
def test_a_wrong_cause_value_is_exit_2_naming_the_field(tmp_path: Path, bad: Any) -> None:
    res = _diff(tmp_path, _doc(bad, ("GP102",)), _doc({"GP102": [0.0] * 4}))
    assert res.exit_code == 2, res.output
    assert "cause_per_step" in res.output and len(res.output.strip().splitlines()) == 1


@pytest.mark.slow  # judges 100,000 values a side (about 2 s)
def test_unknown_codes_markup_and_long_lists_are_data(tmp_path: Path) -> None:
    odd = {"<script>alert(1)</script>": [1.0] * 4, "GP999": [2.0] * 4, "GP102": [5_000.0] * 100_000}
    res = _diff(tmp_path, _doc(odd, ("GP102", "<script>alert(1)</script>")), _doc({"GP102": [0.0] * 4}))
    assert res.exit_code == 0, res.output
    removed = {r["code"]: r for r in json.loads(res.output)["findings"]["removed"]}
    assert removed["GP102"]["verdict"] == "fixed"  # 100,000 values a side are still judged
    assert removed["<script>alert(1)</script>"]["cause"] is None  # no rule: no figure, the step decides

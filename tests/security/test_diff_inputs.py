"""Hostile inputs to ``gpuprof diff`` and to ``gpuprof analyze report.json``: one line, exit 2, nothing blocks."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpuprof.cli import cli


def run(*args: str) -> object:
    return CliRunner().invoke(cli, list(args))


def _report(tmp_path: Path, name: str, doc: object) -> str:
    p = tmp_path / name
    p.write_text(json.dumps(doc) if not isinstance(doc, str) else doc)
    return str(p)


GOOD = {"schema_version": "1.2", "inputs": [], "traces": [], "findings": [], "sections": [], "notes": []}


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "report.json"
    os.mkfifo(fifo)
    good = _report(tmp_path, "good.json", GOOD)
    res = run("diff", str(fifo), good)  # would hang forever if anything opened the FIFO for reading
    assert res.exit_code == 2 and str(fifo) in res.output and len(res.output.strip().splitlines()) == 1


@pytest.mark.parametrize("doc,problem", [
    ('{"schema_version": "1.2", "traces": ' + "[" * 100_000 + "]" * 100_000 + "}", "not a valid JSON report"),
    ({"schema_version": 12, "traces": []}, "schema_version 12"),
    ({"schema_version": "2.0", "traces": []}, "schema_version '2.0'"),
    ({"schema_version": "1.2", "traces": {"a": 1}}, "'traces' is not a list"),
])
def test_malformed_reports_are_one_line_exit_2(tmp_path: Path, doc: object, problem: str) -> None:
    bad = _report(tmp_path, "bad.json", doc)
    good = _report(tmp_path, "good.json", GOOD)
    for args in (("diff", bad, good), ("analyze", bad)):
        res = run(*args)
        assert res.exit_code == 2, res.output
        line = res.output.strip()
        assert "\n" not in line and bad in line and problem in line and "Traceback" not in line


def test_wrong_types_inside_a_report_are_one_line_naming_the_field(tmp_path: Path) -> None:
    """A value of the wrong type is refused (exit 2, its field named), never read as 0 by the diff's arithmetic."""
    odd = dict(GOOD, traces=[{"path": 1, "num_steps": "x", "step_times_us": ["a", None, 1e400], "views": {"operators": "x",
           "kernels": [None, {"name": ["list"], "total_us": "5"}]}, "breakdown_us": {"kernel": None}, "rank": "0"}],
               findings=[{"code": "GP102", "cost_us_per_step": "a lot"}, None, {"no": "code"}])
    bad = _report(tmp_path, "odd.json", odd)
    res = run("diff", bad, bad, "--format", "json")
    assert res.exit_code == 2, res.output
    line = res.output.strip()
    assert "\n" not in line and bad in line and "traces[0].step_times_us[2] is NaN or infinite" in line


def test_report_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import gpuprof.saved.read as rf

    monkeypatch.setattr(rf, "MAX_REPORT_BYTES", 100)
    big = _report(tmp_path, "big.json", dict(GOOD, notes=["x" * 200]))
    res = run("analyze", big)
    assert res.exit_code == 2 and "larger than" in res.output

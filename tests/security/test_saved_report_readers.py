"""Every reader of a saved report.json goes through one typed reader (gpuprof.saved): a bad file is one line
naming the file and its problem, exit 2, from ``gpuprof diff``, ``analyze``, ``export`` and ``history`` alike
(history, reading many runs, skips it with a note and fails only when none is left); the capture's run reader
skips it with a note; the trackers send nothing and say why in one line.

Bad files: wrong types, out-of-range values, truncated, not an object, too big, a share over 1 in a map, a
count beyond 2^53. The report is a complete two-rank report made here (fast); the real-trace variants of these
checks are in test_saved_report_values.py and test_report_ceilings.py.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gpuprof.cli import cli

from .test_saved_report_values import _set

TRACE = {"path": "rank0.pt.trace.json", "rank": 0, "world_size": 2, "num_steps": 3, "step_ids": [4, 5, 6],
         "step_time_us": 1000.0, "step_time_mean_us": 1000.0, "step_times_us": [990.0, 1000.0, 1010.0],
         "gpu_busy_us": 600.0, "gpu_utilization": 0.6, "data_loading_share": 0.1, "num_events": 500,
         "breakdown_us": {"kernel": 600.0, "data_loading": 100.0}, "idle_breakdown_us": {"data_loading": 100.0},
         "views": {"operators": [{"name": "aten::mm", "input_shapes": None, "calls": 3, "cpu_total_us": 40.0,
                                 "cpu_self_us": 30.0, "gpu_self_us": 0.0, "gpu_total_us": 0.0}],
                   "kernels": []}}
GOOD = {"schema_version": "1.6", "command": "capture", "inputs": [], "notes": [], "sections": [],
        "traces": [TRACE, dict(copy.deepcopy(TRACE), path="rank1.pt.trace.json", rank=1)],
        "findings": [{"code": "GP101", "name": "gpu-idle", "severity": "warning", "message": "m", "advice": "a",
                      "origin": "trace", "cost_us_per_step": 400.0, "cost_share": 0.4}]}


def _bad(keys: tuple[Any, ...], value: Any) -> dict[str, Any]:
    return _set(GOOD, keys, value)  # a deep copy of GOOD with one value replaced


# (what is wrong, the file's bytes, what the one line names)
CASES = [
    ("a string for a number", _bad(("traces", 0, "gpu_busy_us"), "600"), "traces[0].gpu_busy_us"),
    ("a negative duration in a map", _bad(("traces", 1, "breakdown_us", "kernel"), -5.0),
     "traces[1].breakdown_us.kernel"),
    ("a share over 1", _bad(("traces", 1, "gpu_utilization"), 1.5), "traces[1].gpu_utilization"),
    ("a count beyond 2^53", _bad(("traces", 0, "views", "operators", 0, "calls"), 2**60),
     "traces[0].views.operators[0].calls"),
    ("a count above the trace's events", _bad(("traces", 0, "num_steps"), 10_000), "traces[0].num_steps"),
    ("an unknown severity", _bad(("findings", 0, "severity"), "fatal"), "findings[0].severity"),
    ("a missing figure", {**GOOD, "traces": [{k: v for k, v in TRACE.items() if k != "gpu_busy_us"}]},
     "traces[0].gpu_busy_us is missing"),
    ("NaN", _bad(("traces", 0, "step_times_us", 1), float("nan")), "traces[0].step_times_us[1]"),
    ("truncated", json.dumps(GOOD)[:300], "not a valid JSON report"),
    ("not an object", [GOOD], "not a gpuprof report"),
    ("a list that is an object", _bad(("traces",), {"0": TRACE}), "'traces' is not a list"),
]


def _write(path: Path, content: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content if isinstance(content, str) else json.dumps(content, allow_nan=True))
    return path


def _one_line(res: Any, path: Path, named: str) -> None:
    assert res.exit_code == 2, res.output[-400:]
    line = res.output.strip()
    assert "\n" not in line and str(path) in line and named in line and "Traceback" not in line, line


@pytest.mark.parametrize("content, named", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_every_reader_refuses_a_bad_report_in_one_line(tmp_path: Path, content: Any, named: str) -> None:
    good = _write(tmp_path / "good.json", GOOD)
    bad = _write(tmp_path / "logs" / "job" / "report.json", content)
    runner = CliRunner()
    for args in (["diff", str(good), str(bad)], ["analyze", str(bad)],
                 ["export", str(bad), "-o", str(tmp_path / "out")], ["history", str(tmp_path / "logs")]):
        _one_line(runner.invoke(cli, args), bad, named)
    assert not (tmp_path / "out").exists()  # export wrote nothing
    # history over several runs: the bad one skipped with a note naming it, the good one shown
    _write(tmp_path / "logs" / "fine" / "report.json", GOOD)
    res = runner.invoke(cli, ["history", str(tmp_path / "logs"), "--format", "json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert [r["name"] for r in doc["runs"]] == ["fine"]
    assert any(str(bad) in n and named in n for n in doc["notes"]), doc["notes"]
    # a capture's run directory: the report is a by-product, skipped with a note naming it
    from gpuprof.capturerun import capture_findings

    found = capture_findings(bad.parent)
    assert not found.reports and len(found.notes) == 1 and str(bad) in found.notes[0]


def test_a_report_over_the_size_bound_is_refused_unread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import gpuprof.saved.read as read

    monkeypatch.setattr(read, "MAX_REPORT_BYTES", 1000)
    big = _write(tmp_path / "logs" / "job" / "report.json", dict(GOOD, notes=["x" * 2000]))
    for args in (["analyze", str(big)], ["history", str(tmp_path / "logs")], ["export", str(big), "-o",
                                                                               str(tmp_path / "out")]):
        _one_line(CliRunner().invoke(cli, args), big, "larger than")


def test_a_capture_report_over_the_bound_or_swapped_after_the_listing_is_a_note(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run directory's report is listed as a regular file (lstat), then read: over the bound it is a note; a
    FIFO or a link put in its place after the listing is refused without blocking or following it."""
    import os
    import threading

    import gpuprof.capturerun as capturerun

    rep = _write(tmp_path / "run" / "report.json", dict(GOOD, command="capture", notes=["x" * 2000]))
    monkeypatch.setattr(capturerun, "MAX_REPORT_BYTES", 1000)
    found = capturerun.capture_findings(rep.parent)
    assert not found.reports and found.notes == [f"skipped {rep}: larger than 1,000 bytes, not a capture report"]
    rep.unlink()
    os.mkfifo(rep)
    done: list[str] = []

    def read() -> None:
        try:
            capturerun._read(rep)
        except ValueError as err:
            done.append(str(err))

    t = threading.Thread(target=read, daemon=True)
    t.start()
    t.join(10)
    assert done == ["cannot read it (report.json is not a regular file)"]  # no writer needed, nothing read
    rep.unlink()
    (tmp_path / "secret.json").write_text(json.dumps(dict(GOOD, command="capture")))
    rep.symlink_to(tmp_path / "secret.json")
    with pytest.raises(ValueError, match=r"^cannot read it \(report\.json is a symbolic link \(not followed\)\)$"):
        capturerun._read(rep)


def test_the_trackers_send_nothing_from_a_report_no_measurement_has() -> None:
    from gpuprof.trackers.send import send

    (sent,) = send(_bad(("traces", 0, "step_time_us"), -1.0), ["mlflow"], "run")
    assert not sent.ok and "traces[0].step_time_us" in sent.line and "\n" not in sent.line


def test_the_good_report_reads_everywhere(tmp_path: Path) -> None:
    """The control: the same report unchanged goes through every reader."""
    good = _write(tmp_path / "logs" / "job" / "report.json", GOOD)
    runner = CliRunner()
    for args in (["diff", str(good), str(good)], ["analyze", str(good), "--fail-on", "never"],
                 ["export", str(good), "-o", str(tmp_path / "out")], ["history", str(tmp_path / "logs")]):
        res = runner.invoke(cli, args)
        assert res.exit_code == 0, (args, res.output[-400:])


def test_a_bad_value_among_a_huge_map_is_named_and_the_map_kept() -> None:
    """msgspec names a map's value ``[...]``; the reader finds its key by halving the map (a few conversions
    however many keys a hostile file holds), and leaves the document as it was."""
    from gpuprof.saved import ReportProblem, saved_report

    parts = {**{f"a{i}": 1.0 for i in range(50_000)}, "bad": -1.0, **{f"z{i}": 1.0 for i in range(50_000)}}
    doc = _bad(("traces", 1, "idle_breakdown_us"), dict(parts))
    with pytest.raises(ReportProblem) as err:
        saved_report(doc)
    assert err.value.field == "traces[1].idle_breakdown_us.bad" and "less than 0" in err.value.problem
    assert doc["traces"][1]["idle_breakdown_us"] == parts

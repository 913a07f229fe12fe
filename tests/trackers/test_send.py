"""Choosing trackers and what becomes of a failure: names checked, a missing package named in one line
(exit 2 at the command line), a tracker's error one line with its secrets masked; no tracker package needed."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import gpuprof.trackers as trackers
from gpuprof.capture.config import CaptureConfig
from gpuprof.cli import cli
from gpuprof.trackers import missing_package, parse_targets
from gpuprof.trackers.payload import Publication
from gpuprof.trackers.send import send
from gpuprof_testing import TraceBuilder, simple_training


def test_names_are_checked_and_kept_once_in_order() -> None:
    assert parse_targets(("wandb", "mlflow,WandB", " ")) == ("wandb", "mlflow")
    assert parse_targets("mlflow, wandb") == ("mlflow", "wandb")
    assert parse_targets(None) == ()
    with pytest.raises(ValueError, match="unknown tracker 'neptune'"):
        parse_targets(["wandb", "neptune"])


def test_the_capture_takes_to_as_a_tuple_or_a_comma_list_and_refuses_an_unknown_one() -> None:
    assert CaptureConfig(to="wandb,mlflow").to == ("wandb", "mlflow")
    assert CaptureConfig(to=("mlflow",)).to == ("mlflow",)
    assert CaptureConfig().to == ()
    with pytest.raises(ValueError, match="unknown tracker"):
        CaptureConfig(to=("tensorboardx",))


def _hide(monkeypatch: pytest.MonkeyPatch, package: str) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == package else real(name, *a))


def test_a_missing_package_is_one_line_naming_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    _hide(monkeypatch, "mlflow")
    assert missing_package("mlflow") == ("sending results to MLflow needs the mlflow package: "
                                         "pip install mlflow-skinny")
    (sent,) = send({"schema_version": "1.6", "findings": []}, ["mlflow"], "run")
    assert not sent.ok and sent.line.endswith("pip install mlflow-skinny")


def test_analyze_exits_2_before_any_work_when_the_package_is_missing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _hide(monkeypatch, "wandb")
    trace = _trace(tmp_path / "t.json", 3)
    res = CliRunner().invoke(cli, ["analyze", str(trace), "--to", "wandb", "--format", "json"])
    assert res.exit_code == 2, res.output
    assert res.stdout == ""  # nothing analysed, nothing printed but the one line
    assert "--to wandb: sending results to W&B needs the wandb package: pip install wandb" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr


def test_run_exits_2_before_launching_when_the_package_is_missing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _hide(monkeypatch, "mlflow")
    marker = tmp_path / "ran"
    script = tmp_path / "train.py"
    script.write_text(f"open({str(marker)!r}, 'w').close()\n", encoding="utf-8")
    res = CliRunner().invoke(cli, ["run", "--logdir", str(tmp_path / "logs"), "--to", "mlflow", str(script)])
    assert res.exit_code == 2 and "pip install mlflow-skinny" in res.stderr
    assert not marker.exists() and not (tmp_path / "logs").exists()


def test_an_unknown_tracker_is_a_usage_error(tmp_path: Path) -> None:
    trace = _trace(tmp_path / "t.json", 3)
    res = CliRunner().invoke(cli, ["analyze", str(trace), "--to", "neptune"])
    assert res.exit_code == 2 and "neptune" in res.stderr


def _trace(path: Path, steps: int) -> Path:
    tb = TraceBuilder()
    simple_training(tb, steps=steps)
    return tb.write(path)


class _Failing:
    label = "W&B"

    def __init__(self, error: Exception) -> None:
        self.error = error
        self.seen: list[Publication] = []

    def publish(self, pub: Publication) -> str:
        self.seen.append(pub)
        raise self.error


def test_a_tracker_error_is_one_line_with_the_secrets_masked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WANDB_API_KEY", "k3y-0123456789abcdef")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "https://alice:hunter2pass@mlflow.example/")
    failing = _Failing(RuntimeError("401 for key k3y-0123456789abcdef\nat https://alice:hunter2pass@mlflow.example/ "
                                    "(password hunter2pass)\x1b[2J"))
    monkeypatch.setattr("gpuprof.trackers.send.load_tracker", lambda name: failing)
    (sent,) = send({"schema_version": "1.6", "findings": [{"code": "GP101", "severity": "warning", "message": "m"}]}, ["wandb"], "run")
    assert not sent.ok and failing.seen and failing.seen[0].findings[0].code == "GP101"
    assert sent.line.startswith("results not sent to W&B: RuntimeError: 401 for key ***")
    for secret in ("k3y-0123456789abcdef", "hunter2pass", "\x1b", "\n"):
        assert secret not in sent.line


def test_analyze_keeps_its_exit_code_and_says_one_line_when_a_tracker_fails(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    failing = _Failing(ConnectionError("tracker down"))
    monkeypatch.setattr("gpuprof.trackers.send.load_tracker", lambda name: failing)
    monkeypatch.setattr(trackers, "missing_package", lambda name: None)
    trace = _trace(tmp_path / "t.json", 4)
    plain = CliRunner().invoke(cli, ["analyze", str(trace), "--format", "json"])
    res = CliRunner().invoke(cli, ["analyze", str(trace), "--format", "json", "--to", "wandb"])
    assert res.exit_code == plain.exit_code
    assert json.loads(res.stdout)["findings"] == json.loads(plain.stdout)["findings"]  # the report is whole
    assert res.stderr.strip() == "gpuprof: results not sent to W&B: ConnectionError: tracker down"
    pub = failing.seen[0]
    assert [r.code for r in pub.findings] == [f["code"] for f in json.loads(plain.stdout)["findings"]]
    names = sorted(Path(a.path).name for a in pub.artefacts)
    assert names == sorted(["report.md", "report.json", "report.html", "t.json"])
    assert pub.run_name == "t"


def test_the_run_is_named_after_the_first_input() -> None:
    from gpuprof.cli.trackers import run_name

    assert run_name(["logs/run-7/"]) == "run-7"
    assert run_name(["logs/run-7/report.json"]) == "run-7"
    assert run_name(["x/worker0.123.pt.trace.json.gz", "y"]) == "worker0.123"
    assert run_name(["s3://user:pw12345@bucket/runs/exp1"]) == "exp1"
    assert run_name([]) == "gpuprof" and run_name(["-"]) == "stdin"

"""What gpuprof sends to and says about experiment trackers (--to wandb / --to mlflow, to=): no credential
printed (a tracking URI with a password, an API key), hostile names in findings and files kept as data,
nothing sent off the machine, no file of gpuprof's left behind (docs/trackers.md)."""

from __future__ import annotations

import json
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from click.testing import CliRunner

from gpuprof.cli import cli
from gpuprof.report import SCHEMA_VERSION
from gpuprof.trackers.mlflow import MlflowTracker
from gpuprof.trackers.payload import Publication, Window
from gpuprof.trackers.send import send
from gpuprof.trackers.wandb import artifact_name
from gpuprof_testing import TraceBuilder, simple_training
from gpuprof_testing.trackerruns import (
    offline_env,
    read_mlflow_runs,
    wandb_offline_runs,
)

from .conftest import HTML_HOSTILE, HUGE_NAME, TEXT_HOSTILE

PASSWORD = "s3cr3t-Passw0rd+x/y="


@pytest.fixture(autouse=True)
def _stays_on_this_machine(no_network: list[object]) -> Iterator[None]:
    """Every test here: a connection off the machine is refused, recorded, and fails the test (the ``offline``
    and ``no_network`` fixtures are the trackers' own, in tests/conftest.py)."""
    yield
    assert no_network == [], f"connections off the machine: {no_network}"


def _trace(path: Path) -> Path:
    tb = TraceBuilder()
    simple_training(tb, steps=4)
    return tb.write(path)


@pytest.mark.slow  # imports MLflow (about 2 s of CPU)
def test_a_tracking_uri_with_a_password_is_never_printed(offline: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("mlflow", reason="needs the mlflow package (pip install mlflow-skinny)")
    with socket.socket() as s:  # a local port nothing listens on: the request fails at once, on this machine
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://alice:{PASSWORD}@127.0.0.1:{port}/mlflow")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", "tok-0123456789abcdef")
    trace = _trace(offline / "t.json")
    tmp = offline / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))  # where the report files for the tracker are written
    plain = CliRunner().invoke(cli, ["analyze", str(trace), "--format", "json"])
    res = CliRunner().invoke(cli, ["analyze", str(trace), "--format", "json", "--to", "mlflow"])
    assert res.exit_code == plain.exit_code  # the analysis's own exit code: the report was made and shown
    assert json.loads(res.stdout)["findings"] == json.loads(plain.stdout)["findings"]
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpuprof: results not sent to MLflow: "), res.stderr
    for secret in (PASSWORD, "s3cr3t", "tok-0123456789abcdef"):
        assert secret not in res.stdout + res.stderr
    assert list(tmp.iterdir()) == []  # the report files written for the tracker are gone


def test_the_line_naming_where_results_went_masks_the_tracking_uri() -> None:
    logged: list[tuple[str, float, int]] = []

    class Client:
        def __init__(self, tracking_uri: str | None = None) -> None:  # the URI as the calling thread sees it
            assert tracking_uri == f"https://bob:{PASSWORD}@mlflow.example/?token=t0ken-abcdef"

        def get_experiment_by_name(self, name: str) -> None:
            return None

        def create_experiment(self, name: str) -> str:
            return "1"

        def create_run(self, exp: str, run_name: str, tags: dict[str, str]) -> Any:
            return SimpleNamespace(info=SimpleNamespace(run_id="abc"))

        def log_metric(self, run_id: str, key: str, value: float, step: int) -> None:
            logged.append((key, value, step))

        def log_text(self, run_id: str, text: str, artifact_file: str) -> None:
            pass

        def get_run(self, run_id: str) -> Any:
            return SimpleNamespace(data=SimpleNamespace(tags={}))

        def set_tag(self, run_id: str, key: str, value: str) -> None:
            pass

        def set_terminated(self, run_id: str, status: str) -> None:
            assert status == "FINISHED"

    fake = SimpleNamespace(tracking=SimpleNamespace(MlflowClient=Client), active_run=lambda: None,
                           get_tracking_uri=lambda: f"https://bob:{PASSWORD}@mlflow.example/?token=t0ken-abcdef")
    where = MlflowTracker(fake).publish(Publication("r", windows=[Window(3, {"step_time_ms": 1.0})]))
    assert where == "run abc at https://***@mlflow.example/?token=***"
    assert logged == [("gpuprof/step_time_ms", 1.0, 3)]


def _hostile_doc() -> dict[str, Any]:
    names = HTML_HOSTILE + TEXT_HOSTILE + [HUGE_NAME]
    return {"schema_version": SCHEMA_VERSION, "traces": [], "findings": [
        {"code": name[:40], "name": name[:80], "severity": "warning", "message": name, "advice": name,
         "cost_us_per_step": 10.0, "location": {"file": name, "line": 1}} for name in names]}


@pytest.mark.slow  # starts W&B's service process and imports MLflow
def test_hostile_names_in_findings_and_files_are_kept_as_data(offline: Path) -> None:
    pytest.importorskip("wandb", reason="needs the wandb package (pip install wandb)")
    pytest.importorskip("mlflow", reason="needs the mlflow package (pip install mlflow-skinny)")
    from gpuprof.trackers.payload import Artefact

    doc = _hostile_doc()
    hostile_file = offline / "<img src=x onerror=alert(1)>\x1b[2J.pt.trace.json"
    hostile_file.write_text("{}", encoding="utf-8")
    run_name = "run\x1b]0;pwned\x07 </script><script>alert(1)</script>"
    sent = send(doc, ["wandb", "mlflow"], run_name, [Artefact(str(hostile_file), "trace")])
    assert [s.ok for s in sent] == [True, True], [s.line for s in sent]
    for s in sent:  # what is printed: one line, no control character, bounded
        assert "\x1b" not in s.line and "\x07" not in s.line and "\n" not in s.line and len(s.line) <= 400
    (wb,) = wandb_offline_runs(offline / "wandb")
    (art,) = [a for a in wb.artifacts if a["type"] == "gpuprof-report"]
    assert art["name"] == artifact_name(run_name) and all(c.isalnum() or c in "._-" for c in art["name"])
    assert art["files"] == ["img_src_x_onerror_alert_1_2J.pt.trace.json"]
    (row,) = [h for h in wb.history if "gpuprof/findings_table/path" in h]
    table_file = next((offline / "wandb" / "wandb").glob("offline-run-*")) / "files" / row["gpuprof/findings_table/path"]
    table = json.loads(table_file.read_text(encoding="utf-8"))
    assert [r[6] for r in table["data"]] == [f["message"] for f in doc["findings"]]  # the text itself, as data
    (ml,) = read_mlflow_runs(offline_env(offline)["MLFLOW_TRACKING_URI"])
    assert ml.table is not None and ml.table["message"] == [f["message"] for f in doc["findings"]]
    assert ml.name == run_name
    assert hostile_file.exists()

"""MLflow with a file store in tmp_path: ``gpuprof analyze --to mlflow`` on a real trace, and a run the user
started; read back with MLflow's client and compared with the report. MLflow 3 takes a file store only with
MLFLOW_ALLOW_FILE_STORE=true, and mlflow-skinny has no sqlite store (the ``offline`` fixture, tests/conftest.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpuprof.cli import cli
from gpuprof.trackers.payload import FINDING_COLUMNS, windows
from gpuprof_testing.realtraces import shared_path
from gpuprof_testing.trackerruns import read_mlflow_runs

pytest.importorskip("mlflow", reason="needs the mlflow package (pip install mlflow-skinny)")
pytestmark = pytest.mark.slow  # importing MLflow alone takes about 2 s of CPU

NW0 = ("tbplugin", "samples", "resnet50_num_workers_0", "worker0.1623143566756.pt.trace.json.gz")


def test_analyze_sends_the_findings_table_figures_and_files(offline: Path, no_network: list[object]) -> None:
    path = str(shared_path(*NW0))
    res = CliRunner().invoke(cli, ["analyze", path, "--format", "json", "--to", "mlflow"])
    assert res.exit_code == 1, res.output
    doc = json.loads(res.stdout)
    assert "gpuprof: results sent to MLflow run " in res.stderr
    (run,) = read_mlflow_runs((offline / "mlruns").as_uri())
    assert run.name == "worker0.1623143566756" and run.status == "FINISHED"
    (w,) = windows(doc)
    assert w.step == 21
    assert run.metrics == {f"gpuprof/{k}": [(21, pytest.approx(v))] for k, v in w.metrics.items()}
    assert run.table is not None and list(run.table) == list(FINDING_COLUMNS)
    assert run.table["code"] == [f["code"] for f in doc["findings"]]
    assert run.table["cost_ms_per_step"] == [None if f["cost_us_per_step"] is None
                                             else pytest.approx(f["cost_us_per_step"] / 1000, abs=1e-4)
                                             for f in doc["findings"]]
    assert run.artifacts == sorted(["gpuprof/findings.json", "gpuprof/report.md", "gpuprof/report.json",
                                    "gpuprof/report.html", f"gpuprof/traces/{Path(path).name}"])
    assert no_network == []


def test_a_run_the_user_started_receives_the_results_and_stays_open(offline: Path, no_network: list[object]) -> None:
    import mlflow

    from gpuprof.trackers.send import send

    mlflow.set_tracking_uri((offline / "mlruns").as_uri())
    mlflow.set_experiment("users-experiment")
    with mlflow.start_run(run_name="my-training") as active:
        mlflow.log_metric("loss", 1.5, step=1)
        doc = {"schema_version": "1.6", "traces": [{"path": "t.json", "gpu_busy_us": 0.0, "breakdown_us": {}, "idle_breakdown_us": {}, "step_ids": [3, 4], "num_steps": 2, "step_time_us": 5000.0, "step_time_mean_us": 5000.0,
                           "gpu_utilization": None, "data_loading_share": 0.4}], "findings": []}
        (sent,) = send(doc, ["mlflow"], "ignored")
        assert sent.ok, sent.line
        assert mlflow.active_run().info.run_id == active.info.run_id  # still open
    assert read_mlflow_runs((offline / "mlruns").as_uri()) == []  # no run of gpuprof's own
    (run,) = read_mlflow_runs((offline / "mlruns").as_uri(), "users-experiment")
    assert run.id == active.info.run_id and run.status == "FINISHED"  # ended by the user's `with`
    assert run.metrics["loss"] == [(1, 1.5)]
    assert run.metrics["gpuprof/step_time_ms"] == [(4, 5.0)]
    assert run.metrics["gpuprof/data_loading_share"] == [(4, 0.4)]
    assert "gpuprof/gpu_utilization" not in run.metrics  # unknown: not sent as 0
    assert run.table == {c: [] for c in FINDING_COLUMNS}
    assert no_network == []


def test_mlflow_run_id_names_the_run_to_log_into(offline: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mlflow.tracking import MlflowClient

    from gpuprof.trackers.send import send

    client = MlflowClient((offline / "mlruns").as_uri())
    exp = client.create_experiment("loggers-experiment")
    run_id = client.create_run(exp, run_name="lightning-logger").info.run_id  # a run nobody made active
    monkeypatch.setenv("MLFLOW_RUN_ID", run_id)
    trace = {"path": "t.json", "step_ids": [11], "num_steps": 1, "step_time_us": 1000.0, "step_time_mean_us": 1000.0,
             "gpu_busy_us": 0.0, "gpu_utilization": None, "breakdown_us": {}, "idle_breakdown_us": {}}
    (sent,) = send({"schema_version": "1.6", "traces": [trace], "findings": []}, ["mlflow"], "ignored")
    assert sent.ok and run_id in sent.line
    (run,) = read_mlflow_runs((offline / "mlruns").as_uri(), "loggers-experiment")
    assert run.id == run_id and run.status == "RUNNING"  # left open for its owner
    assert run.metrics["gpuprof/step_time_ms"] == [(11, 1.0)]
    assert read_mlflow_runs((offline / "mlruns").as_uri()) == []


def test_no_pandas_needed_and_mlflow_reads_the_table_back(offline: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from gpuprof.trackers.send import send

    doc = {"schema_version": "1.6", "findings": [{"code": "GP101", "name": "gpu-idle", "severity": "warning", "message": "idle",
                         "cost_us_per_step": 2500.0, "cost_share": 0.25, "location": {"file": "t.py", "line": 3}}]}
    with monkeypatch.context() as m:
        m.setitem(sys.modules, "pandas", None)  # mlflow-skinny does not bring pandas; log_table would need it
        (sent,) = send(doc, ["mlflow"], "no-pandas")
    assert sent.ok, sent.line
    (run,) = read_mlflow_runs((offline / "mlruns").as_uri())
    assert run.table == {"code": ["GP101"], "severity": ["warning"], "title": [run.table["title"][0]],
                         "cost_ms_per_step": [2.5], "cost_share": [0.25], "location": ["t.py:3"], "message": ["idle"]}
    assert json.loads(run.tags["mlflow.loggedArtifacts"]) == [{"path": "gpuprof/findings.json", "type": "table"}]
    pd = pytest.importorskip("pandas")
    from mlflow.tracking import MlflowClient

    client = MlflowClient((offline / "mlruns").as_uri())
    exp = client.get_experiment_by_name("gpuprof").experiment_id
    table = client.load_table(exp, "gpuprof/findings.json", run_ids=[run.id])  # MLflow's own reader
    assert isinstance(table, pd.DataFrame) and list(table["code"]) == ["GP101"] and list(table["message"]) == ["idle"]

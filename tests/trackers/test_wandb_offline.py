"""W&B in offline mode (WANDB_MODE=offline): ``gpuprof analyze --to wandb`` on a real trace, and a run the
user started; the offline run's log is read back (gpuprof_testing.trackerruns) and compared with the
report. Nothing leaves the machine (the ``no_network`` fixture)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpuprof.cli import cli
from gpuprof.trackers.payload import FINDING_COLUMNS, windows
from gpuprof_testing.realtraces import shared_path
from gpuprof_testing.trackerruns import wandb_offline_runs

pytest.importorskip("wandb", reason="needs the wandb package (pip install wandb)")
pytestmark = pytest.mark.slow  # W&B starts its service process (about 1 s of CPU per run)

NW0 = ("tbplugin", "samples", "resnet50_num_workers_0", "worker0.1623143566756.pt.trace.json.gz")


def _table(root: Path, rel: str) -> dict:
    (run_dir,) = sorted((root / "wandb" / "wandb").glob("offline-run-*"))
    return json.loads((run_dir / "files" / rel).read_text(encoding="utf-8"))


def test_analyze_sends_the_findings_table_figures_and_files(offline: Path, no_network: list[object]) -> None:
    path = str(shared_path(*NW0))
    res = CliRunner().invoke(cli, ["analyze", path, "--format", "json", "--to", "wandb"])
    assert res.exit_code == 1, res.output  # the sample's warnings, as without --to
    doc = json.loads(res.stdout)  # W&B printed nothing into the JSON report
    assert "results sent to W&B worker0.1623143566756 (offline run" in res.stderr
    (run,) = wandb_offline_runs(offline / "wandb")
    assert run.name == "worker0.1623143566756" and run.exit_seen  # gpuprof's own run, finished
    (row,) = [h for h in run.history if "gpuprof/step" in h]
    (w,) = windows(doc)
    assert row["gpuprof/step"] == w.step == 21
    for key, value in w.metrics.items():
        assert row[f"gpuprof/{key}"] == pytest.approx(value)
    table = _table(offline, row["gpuprof/findings_table/path"])
    assert table["columns"] == list(FINDING_COLUMNS)
    assert [r[0] for r in table["data"]] == [f["code"] for f in doc["findings"]]
    assert [r[6] for r in table["data"]] == [f["message"] for f in doc["findings"]]
    (art,) = [a for a in run.artifacts if a["type"] == "gpuprof-report"]
    assert art["name"] == "gpuprof-worker0.1623143566756"
    assert sorted(art["files"]) == sorted(["report.md", "report.json", "report.html", Path(path).name])
    assert no_network == []


def test_a_run_the_user_started_receives_the_results_and_stays_open(offline: Path, no_network: list[object]) -> None:
    import wandb

    from gpuprof.trackers.send import send

    run = wandb.init(project="users-project", name="my-training", settings=wandb.Settings(silent=True, console="off"))
    try:
        run.log({"loss": 1.5})
        doc = {"schema_version": "1.6", "traces": [{"path": "t.json", "gpu_busy_us": 0.0, "breakdown_us": {}, "idle_breakdown_us": {}, "step_ids": [5, 6, 7], "num_steps": 3, "step_time_us": 2000.0, "step_time_mean_us": 2100.0,
                           "gpu_utilization": 0.5, "data_loading_share": 0.1}],
               "findings": [{"code": "GP101", "name": "gpu-idle", "severity": "warning", "message": "idle",
                             "cost_us_per_step": 400.0, "location": {"file": "train.py", "line": 9}}]}
        (sent,) = send(doc, ["wandb"], "ignored-when-a-run-is-active")
        assert sent.ok, sent.line
        assert wandb.run is run  # still the user's, still open
        run.log({"loss": 1.2})
    finally:
        run.finish()
    (got,) = wandb_offline_runs(offline / "wandb")  # one run: the user's
    assert got.id == run.id and got.name == "my-training"
    rows = [h for h in got.history if "gpuprof/step" in h]
    assert len(rows) == 1 and rows[0]["gpuprof/step"] == 7 and rows[0]["gpuprof/step_time_ms"] == pytest.approx(2.0)
    assert sum("loss" in h for h in got.history) == 2  # the user's own logging, before and after, untouched
    table = _table(offline, rows[0]["gpuprof/findings_table/path"])
    assert table["data"] == [["GP101", "warning", table["data"][0][2], 0.4, None, "train.py:9", "idle"]]
    assert no_network == []


def test_w_and_b_disabled_is_one_line_saying_so(offline: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuprof.trackers.send import send

    monkeypatch.setenv("WANDB_MODE", "disabled")
    (sent,) = send({"schema_version": "1.6", "findings": []}, ["wandb"], "r")
    assert not sent.ok and sent.line.startswith("results not sent to W&B: RuntimeError: W&B is disabled")
    assert wandb_offline_runs(offline / "wandb") == []

"""``gpuprof.profile(to=...)`` on a tiny CPU training loop: the end-of-run report reaches W&B (offline) and
MLflow (file store), and a tracker that cannot be used is one warning while the loop runs to its end."""

from __future__ import annotations

import importlib.util
import json
import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("wandb", reason="needs the wandb package (pip install wandb)")
pytest.importorskip("mlflow", reason="needs the mlflow package (pip install mlflow-skinny)")

import gpuprof  # noqa: E402
from gpuprof.capture import GpuprofWarning, Schedule  # noqa: E402
from gpuprof_testing.trackerruns import read_mlflow_runs, wandb_offline_runs  # noqa: E402

pytestmark = pytest.mark.slow  # trains a model, starts W&B's service, imports MLflow

STEPS = 8


def _train(logdir: Path, to: tuple[str, ...]) -> gpuprof.CaptureResult:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    done = 0
    with gpuprof.profile(logdir, run="tiny", to=to, schedule=Schedule(wait=1, warmup=1, active=3),
                         watch=False, trigger=False, tensorboard=False) as prof:
        for _ in range(STEPS):
            loss = torch.nn.functional.cross_entropy(model(torch.randn(8, 16)), torch.randint(0, 4, (8,)))
            loss.backward()
            opt.step()
            opt.zero_grad()
            prof.step()
            done += 1
    assert done == STEPS
    assert prof.result is not None
    return prof.result


def test_the_end_of_run_report_reaches_both_trackers(offline: Path, no_network: list[object],
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", GpuprofWarning)  # no part of gpuprof failed
        result = _train(offline / "logs", ("wandb", "mlflow"))
    err = capsys.readouterr().err
    assert "gpuprof: results sent to W&B tiny (offline run" in err and "gpuprof: results sent to MLflow run" in err
    doc = json.loads((offline / "logs" / "tiny" / "report.json").read_text(encoding="utf-8"))
    (trace,) = doc["traces"]
    assert trace["step_ids"] == [2, 3, 4]  # Schedule(wait=1, warmup=1, active=3)
    trace_name = Path(result.traces[0].path).name

    (wb,) = wandb_offline_runs(offline / "wandb")
    assert wb.name == "tiny" and wb.exit_seen
    (row,) = [h for h in wb.history if "gpuprof/step" in h]
    assert row["gpuprof/step"] == 4  # the recorded window's last step
    assert row["gpuprof/step_time_ms"] == pytest.approx(trace["step_time_us"] / 1000)
    assert row["gpuprof/findings"] == len(doc["findings"])
    assert row["gpuprof/findings_table/ncols"] == 7 and row["gpuprof/findings_table/nrows"] == len(doc["findings"])
    (art,) = [a for a in wb.artifacts if a["type"] == "gpuprof-report"]
    assert sorted(art["files"]) == sorted(["report.md", "report.json", "report.html", trace_name])

    (ml,) = read_mlflow_runs((offline / "mlruns").as_uri())
    assert ml.name == "tiny" and ml.status == "FINISHED"
    assert ml.metrics["gpuprof/step_time_ms"] == [(4, pytest.approx(trace["step_time_us"] / 1000))]
    assert ml.table is not None and ml.table["code"] == [f["code"] for f in doc["findings"]]
    assert f"gpuprof/traces/{trace_name}" in ml.artifacts and "gpuprof/report.md" in ml.artifacts
    assert no_network == []


def test_a_missing_tracker_package_is_one_warning_and_training_runs_on(
        offline: Path, no_network: list[object], monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    with pytest.warns(GpuprofWarning) as caught:
        result = _train(offline / "logs", ("wandb", "mlflow"))
    ours = [str(w.message) for w in caught if "W&B" in str(w.message)]
    assert ours == ["gpuprof: results not sent to W&B: sending results to W&B needs the wandb package: "
                    f"pip install wandb (later: gpuprof analyze {offline / 'logs' / 'tiny'} --to wandb). "
                    "Training continues."]
    assert result.steps == STEPS
    assert wandb_offline_runs(offline / "wandb") == []
    (ml,) = read_mlflow_runs((offline / "mlruns").as_uri())  # the other tracker still got the report
    assert ml.name == "tiny"
    assert no_network == []


def test_a_run_that_ended_before_the_capture_still_receives_the_results(offline: Path) -> None:
    """``with mlflow.start_run():`` around the loop, the capture finishing after it (at exit, under
    ``gpuprof run``; here ``finish()``): the run active when the capture started gets the results."""
    import mlflow

    torch.manual_seed(0)
    model = torch.nn.Linear(16, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    @gpuprof.profile_step(offline / "logs", run="late", to=("mlflow",), schedule=Schedule(wait=1, warmup=1, active=2),
                          watch=False, trigger=False, tensorboard=False, print_report=False)
    def step(x: torch.Tensor) -> None:
        model(x).sum().backward()
        opt.step()
        opt.zero_grad()

    mlflow.set_experiment("users-experiment")
    with mlflow.start_run(run_name="users-run") as active:
        for _ in range(6):
            step(torch.randn(8, 16))
    assert mlflow.active_run() is None
    result = step.finish()
    assert result is not None and result.steps == 6
    (run,) = read_mlflow_runs((offline / "mlruns").as_uri(), "users-experiment")
    assert run.id == active.info.run_id and run.status == "FINISHED"  # as its owner left it
    assert [s for s, _ in run.metrics["gpuprof/step_time_ms"]] == [3]
    assert run.table is not None and "gpuprof/report.md" in run.artifacts
    assert read_mlflow_runs((offline / "mlruns").as_uri()) == []  # no run of gpuprof's own

"""MLflow: the findings table, the figures per step window and the files, into an MLflow run.

When the process has an active run (the user's own ``mlflow.start_run``), or ``MLFLOW_RUN_ID`` names one, or
a capture started inside a run that has ended since, everything goes into it and it is left as it is; otherwise gpuprof starts a run of its own in the experiment ``$GPUPROF_MLFLOW_EXPERIMENT``, else
``$MLFLOW_EXPERIMENT_NAME``, else ``gpuprof``, named after gpuprof's run, and ends it. The tracking server
is MLflow's own setting (``MLFLOW_TRACKING_URI``, ``mlflow.set_tracking_uri``). Metrics are logged with the
window's last training step as their ``step``; the table is ``gpuprof/findings.json`` (``mlflow.load_table``
reads it), the files are under ``gpuprof/``.
"""

from __future__ import annotations

import json
import os
from typing import Any

from gpuprof.redact import redact
from gpuprof.trackers.payload import FINDING_COLUMNS, PREFIX, Publication

__all__ = ["MlflowTracker", "make", "DEFAULT_EXPERIMENT", "TABLE_FILE"]

DEFAULT_EXPERIMENT = "gpuprof"
TABLE_FILE = "gpuprof/findings.json"
ARTEFACT_DIR = "gpuprof"


class MlflowTracker:
    label = "MLflow"

    def __init__(self, mlflow: Any) -> None:
        self._mlflow = mlflow

    def publish(self, pub: Publication) -> str:
        mlflow = self._mlflow
        client = mlflow.tracking.MlflowClient()
        active = mlflow.active_run()
        if active is not None:
            run_id, own = active.info.run_id, False
        elif os.environ.get("MLFLOW_RUN_ID"):  # MLflow's own way to name the run to log into
            run_id, own = os.environ["MLFLOW_RUN_ID"], False
        elif pub.run_ids.get("mlflow"):  # the run active when the capture started, ended since by its owner
            run_id, own = pub.run_ids["mlflow"], False
        else:
            name = (os.environ.get("GPUPROF_MLFLOW_EXPERIMENT") or os.environ.get("MLFLOW_EXPERIMENT_NAME")
                    or DEFAULT_EXPERIMENT)
            exp = client.get_experiment_by_name(name)
            exp_id = exp.experiment_id if exp is not None else client.create_experiment(name)
            run_id, own = client.create_run(exp_id, run_name=pub.run_name, tags={"gpuprof": "1"}).info.run_id, True
        status = "FAILED"
        try:
            for w in pub.windows:
                for k, v in w.metrics.items():
                    client.log_metric(run_id, PREFIX + k, v, step=w.step)
            _log_table(client, run_id, pub)
            for a in pub.artefacts:  # traces in a folder of their own: one of them may be called report.json
                client.log_artifact(run_id, a.path, ARTEFACT_DIR + ("/traces" if a.kind == "trace" else ""))
            status = "FINISHED"
        finally:
            if own:
                client.set_terminated(run_id, status)
        return f"run {run_id} at {redact(str(mlflow.get_tracking_uri()))}"


def _log_table(client: Any, run_id: str, pub: Publication) -> None:
    """The findings table as ``mlflow.log_table`` writes one (``{"columns": [...], "data": [[...]]}``, and the
    run's ``mlflow.loggedArtifacts`` tag that shows it as a table), without pandas, which log_table needs
    and mlflow-skinny does not bring."""
    text = json.dumps({"columns": list(FINDING_COLUMNS), "data": [r.cells() for r in pub.findings]},
                      allow_nan=False)
    client.log_text(run_id, text, TABLE_FILE)
    tag = "mlflow.loggedArtifacts"
    raw = client.get_run(run_id).data.tags.get(tag)
    try:
        logged = json.loads(raw) if raw else []
    except ValueError:
        logged = []
    entry = {"path": TABLE_FILE, "type": "table"}
    if isinstance(logged, list) and entry not in logged:
        client.set_tag(run_id, tag, json.dumps([*logged, entry]))


def make() -> MlflowTracker:
    import mlflow
    import mlflow.tracking

    return MlflowTracker(mlflow)

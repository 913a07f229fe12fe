"""MLflow: the findings table, the figures per step window and the files, into an MLflow run.

When the process has an active run (the user's own ``mlflow.start_run``), or ``MLFLOW_RUN_ID`` names one,
everything goes into it and it is left open; otherwise gpuprof starts a run of its own in the experiment ``$GPUPROF_MLFLOW_EXPERIMENT``, else
``$MLFLOW_EXPERIMENT_NAME``, else ``gpuprof``, named after gpuprof's run, and ends it. The tracking server
is MLflow's own setting (``MLFLOW_TRACKING_URI``, ``mlflow.set_tracking_uri``). Metrics are logged with the
window's last training step as their ``step``; the table is ``gpuprof/findings.json`` (``mlflow.load_table``
reads it), the files are under ``gpuprof/``.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

from gpuprof.redact import redact
from gpuprof.trackers.payload import PREFIX, Publication

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
            with warnings.catch_warnings():  # MLflow's pandas deprecation notices are not the user's business
                warnings.simplefilter("ignore", DeprecationWarning)
                warnings.simplefilter("ignore", FutureWarning)
                client.log_table(run_id, pub.table(), TABLE_FILE)
            for a in pub.artefacts:  # traces in a folder of their own: one of them may be called report.json
                client.log_artifact(run_id, a.path, ARTEFACT_DIR + ("/traces" if a.kind == "trace" else ""))
            status = "FINISHED"
        finally:
            if own:
                client.set_terminated(run_id, status)
        return f"run {run_id} at {redact(str(mlflow.get_tracking_uri()))}"


def make() -> MlflowTracker:
    import mlflow
    import mlflow.tracking

    return MlflowTracker(mlflow)

"""MLflow: the findings table, the figures per step window and the files, into an MLflow run.

When the process has an active run (the user's own ``mlflow.start_run``), or ``MLFLOW_RUN_ID`` names one, or
a capture started inside a run that has ended since, everything goes into it and it is left as it is; otherwise gpuprof starts a run of its own in the experiment ``$GPUPROF_MLFLOW_EXPERIMENT``, else
``$MLFLOW_EXPERIMENT_NAME``, else ``gpuprof``, named after gpuprof's run, and ends it. The tracking server
is MLflow's own setting (``MLFLOW_TRACKING_URI``, ``mlflow.set_tracking_uri``). Metrics are logged with the
window's last training step as their ``step``; the table is ``gpuprof/findings.json`` (``mlflow.load_table``
reads it), the files are under ``gpuprof/``.

Bounded like W&B's login: MLflow's HTTP client retries a tracking server that refuses or does not answer for
minutes (seven retries with backoff: 254 s against a closed port, more against one that never answers), and
that would hold ``gpuprof analyze --to mlflow`` or the end of a training run. The calls to the server run on a
worker thread; past :data:`TIMEOUT_S` seconds (``GPUPROF_MLFLOW_TIMEOUT_S``) gpuprof stops waiting, says so in
one line (results not sent) and goes on; the worker makes no further call after that (the one in flight ends
on its own, in the background). The active run and the tracking URI are read on the calling thread (MLflow
keeps the active run per thread).
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any

from gpuprof.redact import redact
from gpuprof.trackers import TrackerTimeout
from gpuprof.trackers.payload import FINDING_COLUMNS, PREFIX, Publication

__all__ = ["MlflowTracker", "make", "DEFAULT_EXPERIMENT", "TABLE_FILE", "TIMEOUT_S", "TIMEOUT_ENV", "TrackerTimeout"]

DEFAULT_EXPERIMENT = "gpuprof"
TABLE_FILE = "gpuprof/findings.json"
ARTEFACT_DIR = "gpuprof"
TIMEOUT_S = 30.0  # as W&B's login timeout (docs/trackers.md)
TIMEOUT_ENV = "GPUPROF_MLFLOW_TIMEOUT_S"


class _Cancelled(Exception):
    """Raised in the worker at its next call once the caller stopped waiting."""


class _Bounded:
    """A client whose every call first checks that the caller still waits (no call after the bound)."""

    def __init__(self, client: Any, cancelled: threading.Event) -> None:
        self._client = client
        self._cancelled = cancelled

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if not callable(attr):
            return attr
        cancelled = self._cancelled

        def call(*a: Any, **k: Any) -> Any:
            if cancelled.is_set():
                raise _Cancelled
            return attr(*a, **k)

        return call


class MlflowTracker:
    label = "MLflow"

    def __init__(self, mlflow: Any) -> None:
        self._mlflow = mlflow

    def publish(self, pub: Publication) -> str:
        from gpuprof.limits import env_seconds

        mlflow = self._mlflow
        timeout = env_seconds(TIMEOUT_ENV, TIMEOUT_S)
        active = mlflow.active_run()  # per thread: read here, not on the worker
        run_id: str | None = None
        if active is not None:
            run_id = active.info.run_id
        elif os.environ.get("MLFLOW_RUN_ID"):  # MLflow's own way to name the run to log into
            run_id = os.environ["MLFLOW_RUN_ID"]
        elif pub.run_ids.get("mlflow"):  # the run active when the capture started, ended since by its owner
            run_id = pub.run_ids["mlflow"]
        uri = mlflow.get_tracking_uri()  # as this thread sees it (the user's set_tracking_uri)
        where = redact(str(uri))
        cancelled = threading.Event()
        done: list[str] = []
        failed: list[BaseException] = []

        def work() -> None:
            try:
                client = _Bounded(mlflow.tracking.MlflowClient(tracking_uri=uri), cancelled)
                done.append(self._send(client, run_id, pub))
            except _Cancelled:
                pass
            except BaseException as err:  # noqa: BLE001 - handed to the caller, which makes it one line
                failed.append(err)

        worker = threading.Thread(target=work, name="gpuprof-mlflow", daemon=True)
        worker.start()
        worker.join(timeout)
        if worker.is_alive():
            cancelled.set()
            raise TrackerTimeout(f"no answer from the MLflow tracking server at {where} within {timeout:g} s "
                                 f"({TIMEOUT_ENV} sets the wait)")
        if failed:
            raise failed[0]
        return f"run {done[0]} at {where}"

    def _send(self, client: Any, run_id: str | None, pub: Publication) -> str:
        """(On the worker.) Log everything into ``run_id``, or into a run of gpuprof's own; the run's id."""
        own = run_id is None
        if run_id is None:
            name = (os.environ.get("GPUPROF_MLFLOW_EXPERIMENT") or os.environ.get("MLFLOW_EXPERIMENT_NAME")
                    or DEFAULT_EXPERIMENT)
            exp = client.get_experiment_by_name(name)
            exp_id = exp.experiment_id if exp is not None else client.create_experiment(name)
            run_id = str(client.create_run(exp_id, run_name=pub.run_name, tags={"gpuprof": "1"}).info.run_id)
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
        return run_id


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

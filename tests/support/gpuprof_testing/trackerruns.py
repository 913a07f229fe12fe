"""Reading back what gpuprof sent to a tracker in its offline mode, for tests (docs/trackers.md).

* W&B offline (``WANDB_MODE=offline``) writes each run to ``<WANDB_DIR>/wandb/offline-run-*/run-<id>.wandb``:
  W&B's append-only log of protobuf records (LevelDB's log format: 32 KiB blocks, each record a 7-byte
  header of CRC, length and type, split across blocks as FIRST/MIDDLE/LAST). :func:`wandb_records` reads
  it without W&B's internal reader (not public, and gone from recent releases) and decodes the records
  with W&B's own protobuf classes; the CRC is not checked (the test wrote the file a moment ago).
* MLflow's file store is read back with MLflow's own client (:func:`read_mlflow_runs`).
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["MlflowRun", "TRACKER_ENV", "WandbRun", "is_local_address", "offline_env", "read_mlflow_runs",
           "read_wandb_run", "reset_trackers", "wandb_offline_runs", "wandb_records"]

# the environment variables that point a tracker at a server or hold its credentials: unset in tests
TRACKER_ENV = ("WANDB_API_KEY", "WANDB_BASE_URL", "WANDB_PROJECT", "WANDB_ENTITY", "WANDB_RUN_ID", "WANDB_RESUME",
               "MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME", "MLFLOW_RUN_ID", "MLFLOW_TRACKING_USERNAME",
               "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN", "GPUPROF_WANDB_PROJECT",
               "GPUPROF_MLFLOW_EXPERIMENT", "GPUPROF_TRACKER_MAX_MB")


def offline_env(root: Path) -> dict[str, str]:
    """Both trackers offline with everything they write under ``root`` (its folders are made).

    W&B: ``WANDB_MODE=offline``, its run, data, cache and config folders under ``root``. MLflow: a ``file:``
    store in ``root/mlruns``; MLflow 3 takes one only with ``MLFLOW_ALLOW_FILE_STORE=true`` (it wants a
    database) and mlflow-skinny has no sqlite store, so the tests opt in to the file store.
    """
    for sub in ("wandb", "data", "cache", "config", "mlruns"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    return {"WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_DIR": str(root / "wandb"),
            "WANDB_DATA_DIR": str(root / "data"), "WANDB_CACHE_DIR": str(root / "cache"),
            "WANDB_CONFIG_DIR": str(root / "config"), "WANDB_DISABLE_GIT": "true", "WANDB_DISABLE_CODE": "true",
            "MLFLOW_TRACKING_URI": (root / "mlruns").as_uri(), "MLFLOW_ALLOW_FILE_STORE": "true"}


def reset_trackers() -> None:
    """Forget the process-wide state the trackers keep, so the next run reads its environment anew: W&B's
    setup singleton (it reads the environment once), MLflow's tracking URI and experiment set with mlflow.set_*."""
    import sys

    wandb = sys.modules.get("wandb")
    if wandb is not None:
        wandb.teardown()
    if "mlflow" in sys.modules:
        import mlflow.tracking._tracking_service.utils as uri_state
        import mlflow.tracking.fluent as fluent

        uri_state._tracking_uri = None  # back to MLFLOW_TRACKING_URI (MLflow has no public way to unset it)
        fluent._active_experiment_id = None


def is_local_address(family: int, address: object) -> bool:
    """A Unix socket or a loopback address: a connection that stays on this machine."""
    import socket

    if family == getattr(socket, "AF_UNIX", None):
        return True
    host = address[0] if isinstance(address, tuple) and address else address
    return isinstance(host, str) and (host in ("::1", "localhost") or host.startswith("127."))


_BLOCK = 32 * 1024
_HEADER = 7  # crc32 (4), length (2), type (1)
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4
_IDENT = b":W&B"


def wandb_records(path: str | Path) -> list[bytes]:
    """The raw records of a ``.wandb`` file, in order (a torn last record is left out)."""
    data = Path(path).read_bytes()
    if data[:4] != _IDENT:
        raise ValueError(f"{path}: not a W&B run log (no {_IDENT!r} header)")
    pos, out, part = 7, [], b""
    while pos + _HEADER <= len(data):
        left = _BLOCK - pos % _BLOCK
        if left < _HEADER:  # a block's tail too short for a header is padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + _HEADER])
        body = data[pos + _HEADER:pos + _HEADER + length]
        pos += _HEADER + length
        if kind == 0 and length == 0:
            continue
        if kind == _FULL:
            out.append(body)
        elif kind == _FIRST:
            part = body
        elif kind == _MIDDLE:
            part += body
        elif kind == _LAST:
            out.append(part + body)
            part = b""
    return out


@dataclass
class WandbRun:
    """What one offline W&B run holds: its id and name, every logged row, and its artifacts' file names."""

    id: str = ""
    name: str = ""
    history: list[dict[str, Any]] = field(default_factory=list)  # one dict per run.log call (JSON values)
    artifacts: list[dict[str, Any]] = field(default_factory=list)  # {"name", "type", "files": [...]}
    exit_seen: bool = False


def read_wandb_run(run_dir: str | Path) -> WandbRun:
    """Read an ``offline-run-*`` folder (its ``run-<id>.wandb`` log)."""
    from wandb.proto import wandb_internal_pb2 as pb

    logs = sorted(Path(run_dir).glob("run-*.wandb"))
    if not logs:
        raise FileNotFoundError(f"{run_dir}: no run-*.wandb file")
    record: Any = getattr(pb, "Record")  # noqa: B009 - generated protobuf classes have no stubs mypy sees
    run = WandbRun()
    for raw in wandb_records(logs[0]):
        rec = record()
        rec.ParseFromString(raw)
        kind = rec.WhichOneof("record_type")
        if kind == "run":  # the first record names the run; later ones (updates) may leave fields empty
            run.id = run.id or rec.run.run_id
            run.name = run.name or rec.run.display_name
        elif kind == "history":
            run.history.append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                                for item in rec.history.item})
        elif kind == "artifact":
            art = rec.artifact
            manifest = [e.path for e in art.manifest.contents]
            run.artifacts.append({"name": art.name, "type": art.type, "files": manifest})
        elif kind == "exit":
            run.exit_seen = True
    return run


def wandb_offline_runs(wandb_dir: str | Path, wait_s: float = 20.0) -> list[WandbRun]:
    """Every offline run under ``WANDB_DIR`` (``<dir>/wandb/offline-run-*``), oldest first.

    W&B's service process writes the log: ``run.finish()`` may return before the last records reach the
    file, so the runs are read again until each holds its exit record (at most ``wait_s`` seconds).
    """
    import time

    deadline = time.monotonic() + wait_s
    while True:
        runs = [read_wandb_run(d) for d in sorted(Path(wandb_dir).glob("wandb/offline-run-*"))]
        if all(r.exit_seen and r.id for r in runs) or time.monotonic() > deadline:
            return runs
        time.sleep(0.1)


@dataclass
class MlflowRun:
    """One MLflow run: metric key -> [(step, value)], its tags, its artifact paths, the findings table."""

    id: str
    name: str
    status: str
    metrics: dict[str, list[tuple[int, float]]]
    tags: dict[str, str]
    artifacts: list[str]
    table: dict[str, list[Any]] | None


def read_mlflow_runs(tracking_uri: str, experiment: str = "gpuprof") -> list[MlflowRun]:
    """Every run of ``experiment`` in the store at ``tracking_uri``, read with MLflow's client."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return []
    out = []
    for r in client.search_runs([exp.experiment_id]):
        rid = r.info.run_id
        metrics = {k: sorted((m.step, m.value) for m in client.get_metric_history(rid, k)) for k in r.data.metrics}
        paths: list[str] = []
        stack = [""]
        while stack:
            for info in client.list_artifacts(rid, stack.pop() or None):
                (stack if info.is_dir else paths).append(info.path)
        table = None
        if "gpuprof/findings.json" in paths:
            local = client.download_artifacts(rid, "gpuprof/findings.json")
            raw = json.loads(Path(local).read_text(encoding="utf-8"))
            table = {c: [row[i] for row in raw["data"]] for i, c in enumerate(raw["columns"])}
        out.append(MlflowRun(id=rid, name=r.info.run_name, status=r.info.status, metrics=metrics,
                             tags=dict(r.data.tags), artifacts=sorted(paths), table=table))
    return out

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

__all__ = ["MlflowRun", "WandbRun", "read_mlflow_runs", "read_wandb_run", "wandb_offline_runs", "wandb_records"]

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
    run = WandbRun()
    for raw in wandb_records(logs[0]):
        rec = pb.Record()
        rec.ParseFromString(raw)
        kind = rec.WhichOneof("record_type")
        if kind == "run":
            run.id, run.name = rec.run.run_id, rec.run.display_name
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


def wandb_offline_runs(wandb_dir: str | Path) -> list[WandbRun]:
    """Every offline run under ``WANDB_DIR`` (``<dir>/wandb/offline-run-*``), oldest first."""
    return [read_wandb_run(d) for d in sorted(Path(wandb_dir).glob("wandb/offline-run-*"))]


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

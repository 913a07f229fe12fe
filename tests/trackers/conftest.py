"""Trackers in their offline modes: W&B with ``WANDB_MODE=offline``, MLflow with a file store, both in tmp_path.

Every test here gets an environment in which nothing can reach a tracker's server: W&B offline with all its
folders in tmp_path and no API key, MLflow's tracking URI a ``file:`` store in tmp_path. MLflow 3 refuses a
file store unless ``MLFLOW_ALLOW_FILE_STORE=true`` (it wants a database), and a ``sqlite:`` URI needs the
full mlflow package (mlflow-skinny has no SQL store), so the tests opt in to the file store.
The ``no_network`` fixture records every socket connection the test process opens that is not a local
one (W&B's client talks to its own service process over a local socket).
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

TRACKER_ENV = ("WANDB_API_KEY", "WANDB_BASE_URL", "WANDB_PROJECT", "WANDB_ENTITY", "WANDB_RUN_ID", "WANDB_RESUME",
               "MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME", "MLFLOW_RUN_ID", "MLFLOW_TRACKING_USERNAME",
               "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN", "GPUPROF_WANDB_PROJECT",
               "GPUPROF_MLFLOW_EXPERIMENT", "GPUPROF_TRACKER_MAX_MB")


def _wandb_teardown() -> None:
    """W&B reads its environment once per process (its setup singleton): torn down, the next run reads it anew."""
    wandb = sys.modules.get("wandb")
    if wandb is not None:
        wandb.teardown()


def _mlflow_reset() -> None:
    """A tracking URI or experiment a test set with mlflow.set_* is process-wide: cleared after each test."""
    if "mlflow" in sys.modules:
        import mlflow.tracking._tracking_service.utils as uri_state

        uri_state._tracking_uri = None  # back to MLFLOW_TRACKING_URI (MLflow has no public way to unset it)
        import mlflow.tracking.fluent as fluent

        fluent._active_experiment_id = None


@pytest.fixture
def offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Both trackers offline, everything they write under ``tmp_path/trackers``; yields that folder."""
    _wandb_teardown()
    root = tmp_path / "trackers"
    for sub in ("wandb", "data", "cache", "config", "mlruns"):
        (root / sub).mkdir(parents=True)
    for name in TRACKER_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_DIR", str(root / "wandb"))
    monkeypatch.setenv("WANDB_DATA_DIR", str(root / "data"))
    monkeypatch.setenv("WANDB_CACHE_DIR", str(root / "cache"))
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(root / "config"))
    monkeypatch.setenv("WANDB_DISABLE_GIT", "true")
    monkeypatch.setenv("WANDB_DISABLE_CODE", "true")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", (root / "mlruns").as_uri())
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    yield root
    _wandb_teardown()
    _mlflow_reset()


def _local(family: int, address: object) -> bool:
    if family == getattr(socket, "AF_UNIX", None):
        return True
    host = address[0] if isinstance(address, tuple) and address else address
    return host in ("127.0.0.1", "::1", "localhost") or (isinstance(host, str) and host.startswith("127."))


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[object]]:
    """Connections to anything but this machine, refused and recorded: the test asserts the list stays empty."""
    outside: list[object] = []
    real = socket.socket.connect

    def connect(self: socket.socket, address: object) -> None:
        if not _local(self.family, address):
            outside.append(address)
            raise OSError("tests: no network")
        real(self, address)  # type: ignore[arg-type]

    monkeypatch.setattr(socket.socket, "connect", connect)
    yield outside


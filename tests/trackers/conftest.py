"""Trackers in their offline modes: W&B with ``WANDB_MODE=offline``, MLflow with a file store, both in tmp_path
(gpuprof.testing.trackerruns.offline_env says why a file store and not sqlite).

The ``no_network`` fixture refuses and records every connection the test process opens to another machine
(W&B's client talks to its own service process over a local socket, which is allowed).
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuprof.testing.trackerruns import TRACKER_ENV, is_local_address, offline_env, reset_trackers


@pytest.fixture
def offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Both trackers offline, everything they write under ``tmp_path/trackers``; yields that folder."""
    reset_trackers()
    for name in TRACKER_ENV:
        monkeypatch.delenv(name, raising=False)
    root = tmp_path / "trackers"
    for name, value in offline_env(root).items():
        monkeypatch.setenv(name, value)
    yield root
    reset_trackers()


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[object]]:
    """Connections to anything but this machine, refused and recorded: the test asserts the list stays empty."""
    outside: list[object] = []
    real = socket.socket.connect

    def connect(self: socket.socket, address: object) -> None:
        if not is_local_address(self.family, address):
            outside.append(address)
            raise OSError("tests: no network")
        real(self, address)  # type: ignore[arg-type]

    monkeypatch.setattr(socket.socket, "connect", connect)
    yield outside

"""``--to mlflow`` is bounded like W&B's login: a tracking server that refuses or never answers costs one line
after ``GPUPROF_MLFLOW_TIMEOUT_S`` seconds, not MLflow's minutes of retries (254 s against a closed port).

Loopback only (the ``no_network`` fixture records anything else): a port nothing listens on, and a server
that accepts connections and never answers. MLflow's own retries are kept long (so that only gpuprof's bound
can end the wait) and its request timeout short (so that its thread, left behind, ends soon after the test).
No test asserts a time; a hang would be MLflow's 254 s, caught by the assertions' absence of an answer.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Iterator

import pytest
from click.testing import CliRunner

from gpuprof.cli import cli

pytest.importorskip("mlflow", reason="needs the mlflow package (pip install mlflow-skinny)")
pytestmark = pytest.mark.slow  # importing MLflow alone takes about 2 s of CPU

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def closed_port() -> int:
    with socket.socket() as s:  # a port the kernel gave and nothing listens on once closed
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A loopback server that accepts connections (the kernel's backlog) and never answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(64)
        yield int(s.getsockname()[1])


def _bounded(monkeypatch: pytest.MonkeyPatch, uri: str) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("GPUPROF_MLFLOW_TIMEOUT_S", "0.5")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "3")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "4")  # 4 + 8 + 16 s of backoff: far past the bound
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "3")
    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)


@pytest.mark.parametrize("server", ["closed_port", "silent_server"])
def test_an_unreachable_tracking_server_is_one_line_after_the_bound(
        offline: Path, no_network: list[object], monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest,
        server: str) -> None:
    from gpuprof.trackers.send import send

    port = request.getfixturevalue(server)
    _bounded(monkeypatch, f"http://127.0.0.1:{port}")
    (sent,) = send({"schema_version": "1.6", "findings": [], "traces": []}, ["mlflow"], "run")
    assert not sent.ok and "\n" not in sent.line
    assert sent.line == (f"results not sent to MLflow: no answer from the MLflow tracking server at "
                         f"http://127.0.0.1:{port} within 0.5 s (GPUPROF_MLFLOW_TIMEOUT_S sets the wait)")
    assert no_network == []


def test_analyze_to_an_unreachable_mlflow_still_reports(offline: Path, no_network: list[object],
                                                        monkeypatch: pytest.MonkeyPatch, closed_port: int) -> None:
    """The reproduction: `gpuprof analyze ... --to mlflow` with nothing at the tracking URI: the report, then
    one line, and the exit code of the findings (1), not of the tracker."""
    _bounded(monkeypatch, f"http://127.0.0.1:{closed_port}")
    res = CliRunner().invoke(cli, ["analyze", str(REPO / "examples" / "sample_trace"), "--format", "json",
                                   "--to", "mlflow"])
    assert res.exit_code == 1, res.output
    assert res.stdout.lstrip().startswith("{")
    lines = [ln for ln in res.stderr.splitlines() if "MLflow" in ln]
    assert lines == [f"gpuprof: results not sent to MLflow: no answer from the MLflow tracking server at "
                     f"http://127.0.0.1:{closed_port} within 0.5 s (GPUPROF_MLFLOW_TIMEOUT_S sets the wait)"]


@pytest.mark.parametrize("value", ["0", "-1", "nan", "soon"])
def test_a_bad_bound_is_one_line_and_nothing_is_sent(offline: Path, no_network: list[object],
                                                     monkeypatch: pytest.MonkeyPatch, closed_port: int,
                                                     value: str) -> None:
    from gpuprof.trackers.send import send

    _bounded(monkeypatch, f"http://127.0.0.1:{closed_port}")
    monkeypatch.setenv("GPUPROF_MLFLOW_TIMEOUT_S", value)
    (sent,) = send({"schema_version": "1.6", "findings": [], "traces": []}, ["mlflow"], "run")
    assert not sent.ok and "GPUPROF_MLFLOW_TIMEOUT_S: must be a positive number of seconds" in sent.line


def test_a_reachable_store_within_the_bound_is_sent(offline: Path, no_network: list[object],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The control: the bound changes nothing for a store that answers (the offline fixture's file store)."""
    from gpuprof.trackers.send import send

    monkeypatch.setenv("GPUPROF_MLFLOW_TIMEOUT_S", "120")
    (sent,) = send({"schema_version": "1.6", "findings": [], "traces": []}, ["mlflow"], "run")
    assert sent.ok, sent.line
    assert sent.line.startswith("results sent to MLflow run ")

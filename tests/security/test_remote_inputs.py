"""Inputs read by URL (gpuprof.remote) keep the promises local files keep: limits, inert names, no secrets shown."""

from __future__ import annotations

import gzip
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest
from click.testing import CliRunner

from gpuprof.cli import cli
from gpuprof_testing import TraceBuilder, simple_training

fsspec = pytest.importorskip("fsspec")


@pytest.fixture
def mem() -> Iterator[tuple[Any, str]]:
    fs = fsspec.filesystem("memory")
    root = f"/sec-{uuid.uuid4().hex[:8]}"
    yield fs, root
    if fs.exists(root):
        fs.rm(root, recursive=True)


def test_gzip_bomb_by_url_is_refused_like_a_local_one(mem: tuple[Any, str]) -> None:
    fs, root = mem
    bomb = gzip.compress(b'{"traceEvents": [' + b" " * (80 << 20) + b"]}", compresslevel=9)
    assert len(bomb) < 200_000
    fs.pipe(f"{root}/bomb.json.gz", bomb)
    res = CliRunner().invoke(cli, ["analyze", f"memory://{root}/bomb.json.gz"])
    assert res.exit_code == 2 and "gzip bomb" in res.output and "GPUPROF_MAX_GZIP_RATIO" in res.output


def test_hostile_object_names_stay_inert_on_the_terminal(mem: tuple[Any, str], tmp_path: Path) -> None:
    fs, root = mem
    tb = TraceBuilder()
    simple_training(tb, steps=3)
    data = tb.write(tmp_path / "t.json").read_bytes()
    name = "\x1b]0;owned\x07\x1b[2Jrank0.pt.trace.json"
    fs.pipe(f"{root}/run/{name}", data)
    res = CliRunner().invoke(cli, ["analyze", f"memory://{root}/run"], env={"COLUMNS": "120"})
    assert res.exit_code in (0, 1), res.output
    assert "\x1b" not in res.output and "\x07" not in res.output
    res = CliRunner().invoke(cli, ["analyze", f"memory://{root}/run/{name}x"])  # an error naming it: inert too
    assert res.exit_code == 2 and "\x1b" not in res.output


def test_a_url_never_prints_its_credentials_even_when_the_read_fails() -> None:
    res = CliRunner().invoke(cli, ["analyze", "memory://admin:s3cret@nowhere/x.json"])
    assert res.exit_code == 2 and "s3cret" not in res.output and res.output.count("\n") == 1


@pytest.fixture
def closed_port() -> int:
    import socket

    with socket.socket() as s:  # a loopback port the kernel gave, nothing listening on it once closed
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def http_status() -> Iterator[str]:
    """A loopback HTTP server answering ``/<status>/...`` with that status and nothing else."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def _answer(self, body: bool) -> None:
            status = int(self.path.strip("/").split("/", 1)[0])
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_HEAD(self) -> None:  # noqa: N802 - http.server's names
            self._answer(False)

        def do_GET(self) -> None:  # noqa: N802
            self._answer(True)

        def log_message(self, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


@pytest.mark.parametrize("args", [["analyze", "{u}/x.json"], ["analyze", "{u}/run/*.json"], ["memory", "{u}/s.pickle"],
                                  ["diff", "{u}/a.json", "{u}/b.json"], ["history", "{u}/logs/"]])
def test_a_refused_connection_says_connection_refused_not_no_such_file(
        closed_port: int, no_network: list[object], args: list[str]) -> None:
    """fsspec's HTTP store turns every failure into FileNotFoundError; the cause it chains says the truth."""
    u = f"http://127.0.0.1:{closed_port}"
    res = CliRunner().invoke(cli, [a.format(u=u) for a in args])
    assert res.exit_code == 2, res.output
    line = res.output.strip()
    assert line == f"gpuprof: error: {args[1].format(u=u)}: connection refused", line
    assert no_network == []


@pytest.mark.parametrize(("status", "problem"), [(404, "no such file or directory"), (403, "the server refused access (HTTP 403)"),
                                                 (500, "the server answered HTTP 500")])
def test_a_server_that_answers_is_named_by_its_answer(http_status: str, no_network: list[object], status: int,
                                                      problem: str) -> None:
    url = f"{http_status}/{status}/x.json"
    res = CliRunner().invoke(cli, ["analyze", url])
    assert res.exit_code == 2, res.output
    assert res.output.strip() == f"gpuprof: error: {url}: {problem}", res.output
    assert no_network == []

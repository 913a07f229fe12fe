"""``--dask ADDRESS`` from a stranger: a malformed address, a port answering garbage, a port that never answers.

Each is one line naming the address, exit 2, and returns within the
documented timeout (``GPUPROF_DASK_TIMEOUT_S``, 2 s here; no test asserts a
time: a hang is caught by the subprocess guard). Every server is a local
socket on 127.0.0.1 run by the test.
"""

from __future__ import annotations

import asyncio
import os
import resource
import socket
import struct
import subprocess
import sys
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import pytest
from click.testing import CliRunner

from gpuprof.cli import cli

pytest.importorskip("distributed")

SAMPLE = str(Path(__file__).resolve().parents[2] / "examples" / "sample_trace")
REPO = Path(__file__).resolve().parents[2]


def _garbage(conn: socket.socket) -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello" * 20)


def _http_like(conn: socket.socket) -> None:
    """A web server (the dashboard's port given by mistake): it waits for a request, then says 400."""
    conn.settimeout(2)
    try:
        conn.recv(4096)
        conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
    except OSError:
        pass


def _huge_frame(conn: socket.socket) -> None:
    """A frame length of 1 TiB: a reader that believed it would allocate it."""
    conn.sendall(struct.pack("<Q", 1 << 40) + b"\x00" * 64)


def _silent(conn: socket.socket) -> None:
    """Accepts and never answers (the connection is kept open until the test ends)."""


def _hang_up(conn: socket.socket) -> None:
    conn.close()


@contextmanager
def _server(behaviour: Callable[[socket.socket], None]) -> Iterator[str]:
    """A TCP server on 127.0.0.1 that does ``behaviour`` with each connection; yields its tcp:// address."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    sock.settimeout(0.1)
    stop = threading.Event()
    conns: list[socket.socket] = []

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except OSError:  # the accept timeout included: look at stop again
                continue
            conns.append(conn)
            try:
                behaviour(conn)
            except OSError:
                pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"tcp://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(5)
        for c in conns:
            c.close()
        sock.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(autouse=True)
def _short_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUPROF_DASK_TIMEOUT_S", "2")


def _analyze(address: str) -> tuple[int, str]:
    res = CliRunner().invoke(cli, ["analyze", SAMPLE, "--dask", address])
    return res.exit_code, res.output


def _one_line(code: int, out: str, address: str, what: str) -> None:
    assert code == 2, out
    assert out.count("\n") == 1 and out.startswith("gpuprof: error: "), out
    assert address in out and what in out, out
    assert "Traceback" not in out and "internal error" not in out and "out of memory" not in out


@pytest.mark.parametrize("address, what", [
    ("tcp://127.0.0.1:notaport", "not a Dask scheduler address"),
    ("tcp://[::1", "not a Dask scheduler address"),
    ("nonsense://host:1", "unknown address scheme"),
    ("127.0.0.1:99999", "port 99999 is not between 1 and 65535"),
    ("tcp://127.0.0.1:0", "port 0 is not between"),
    ("tcp://:8786", "no host"),
    ("tcp://127.0.0.1", "missing port"),
    ("tcp://127.0.0.1:8786\x1b[2J", "control characters"),
])
def test_a_malformed_address_is_one_line_before_any_connection(address: str, what: str) -> None:
    code, out = _analyze(address)
    _one_line(code, out.replace("\x1b", ""), address.split("\x1b")[0], what)
    assert "\x1b" not in out  # the address is shown with its control characters made visible


def test_an_empty_address_is_one_line() -> None:
    code, out = _analyze("")
    assert code == 2 and out.count("\n") == 1 and "--dask: an empty scheduler address" in out


@pytest.mark.parametrize("behaviour", [_garbage, _http_like, _huge_frame, _hang_up],
                         ids=["garbage", "http", "huge-frame", "hang-up"])
@pytest.mark.slow  # a real trace analysed whole / a bounded hostile wait: the slow pass
def test_a_port_that_is_not_a_dask_scheduler_is_one_line(behaviour: Callable[[socket.socket], None]) -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with _server(behaviour) as address:
        code, out = _analyze(address)
    _one_line(code, out, address, "cannot reach the Dask scheduler")
    # the 1 TiB frame length was never allocated (ru_maxrss is in KiB on Linux): memory stays bounded
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 256 * 1024


@pytest.mark.slow  # a real trace analysed whole / a bounded hostile wait: the slow pass
def test_a_port_that_accepts_and_never_answers_is_one_line_naming_the_timeout() -> None:
    with _server(_silent) as address:
        code, out = _analyze(address)
    _one_line(code, out, address, "no answer within 2 s")
    assert "GPUPROF_DASK_TIMEOUT_S" in out


@pytest.mark.slow  # a real trace analysed whole / a bounded hostile wait: the slow pass
def test_a_closed_port_is_one_line() -> None:
    address = f"tcp://127.0.0.1:{_free_port()}"
    code, out = _analyze(address)
    _one_line(code, out, address, "cannot reach the Dask scheduler")


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "soon"])
def test_a_bad_timeout_setting_is_one_line(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUPROF_DASK_TIMEOUT_S", value)
    code, out = _analyze("tcp://127.0.0.1:8786")
    assert code == 2 and out.count("\n") == 1 and "GPUPROF_DASK_TIMEOUT_S: must be a positive number" in out


@contextmanager
def _dask_server(identity_type: str) -> Iterator[str]:
    """A real Dask protocol server (distributed.core.Server) that answers ``identity`` and nothing else."""
    from distributed.core import Server

    ready: list[str] = []
    stop: list[Callable[[], None]] = []

    async def main() -> None:
        server = Server({"identity": lambda **kw: {"type": identity_type, "id": "test"}})
        await server.listen("tcp://127.0.0.1:0")
        done = asyncio.Event()
        loop = asyncio.get_running_loop()
        stop.append(lambda: loop.call_soon_threadsafe(done.set))
        ready.append(server.address)
        await done.wait()
        server.stop()

    thread = threading.Thread(target=lambda: asyncio.run(main()), daemon=True)
    thread.start()
    for _ in range(200):
        if ready:
            break
        threading.Event().wait(0.05)
    assert ready, "the test's Dask server did not start"
    try:
        yield ready[0]
    finally:
        stop[0]()
        thread.join(10)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["garbage", "silent", "malformed", "worker", "half-scheduler"])
def test_in_a_real_process_nothing_follows_the_one_line(kind: str) -> None:
    """The line is the whole output and the process ends: no 60 s hang and traceback from a half-made Client.

    ``half-scheduler`` speaks Dask and says it is a scheduler but refuses
    the client's registration: the probe passes, ``distributed.Client``
    fails, and its half-made object must not hang the exit.
    """
    servers = {"garbage": lambda: _server(_garbage), "silent": lambda: _server(_silent),
               "worker": lambda: _dask_server("Worker"), "half-scheduler": lambda: _dask_server("Scheduler")}
    env = {**os.environ, "GPUPROF_DASK_TIMEOUT_S": "2", "PYTHONPATH": str(REPO)}

    def run(address: str) -> subprocess.CompletedProcess[str]:
        # the timeout is a hang guard only (generous for a loaded machine), not a measured time
        return subprocess.run([sys.executable, "-m", "gpuprof", "analyze", SAMPLE, "--dask", address],
                              capture_output=True, text=True, timeout=90, env=env, cwd=REPO)

    if kind == "malformed":
        proc = run("tcp://127.0.0.1:notaport")
    else:
        with servers[kind]() as address:
            proc = run(address)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpuprof: error: "), proc.stderr
    assert "cannot reach the Dask scheduler" in lines[0] or "not a Dask scheduler address" in lines[0]
    if kind == "worker":
        assert "is a Dask Worker, not a scheduler" in lines[0]
    assert proc.stdout == ""


def test_the_probe_works_inside_a_running_event_loop() -> None:
    """A notebook calls analyze(dask=...) from inside its event loop: the probe runs on a loop of its own."""
    from gpuprof.cluster import connect
    from gpuprof.errors import InputError

    async def in_a_notebook() -> str:
        with _server(_garbage) as address:
            try:
                connect(address)
            except InputError as err:
                return str(err)
        return "connected"

    text = asyncio.run(in_a_notebook())
    assert "cannot reach the Dask scheduler" in text and "does not speak Dask's protocol" in text

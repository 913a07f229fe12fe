"""``gpuprof mcp`` as a process: hostile bytes never end it, a huge request costs bounded memory, and a
server that is stopped (its input closed, SIGTERM, SIGKILL) leaves no process or file behind."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from gpuprof_testing.tracegen import TraceBuilder, simple_training

from ..cli.mcp_clients import INITIALIZE, StdioServer, call, request


def _peak_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "root"
    simple_training(TraceBuilder(), steps=3).write(r / "run" / "t.pt.trace.json")
    return r


@pytest.mark.slow  # sends 256 MiB through a pipe
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the peak memory from /proc")
def test_a_huge_request_is_skipped_in_bounded_memory_and_the_server_answers_on(root: Path) -> None:
    server = StdioServer(root)
    try:
        assert server.ask(request(1, "ping"))["result"] == {}
        before = _peak_rss_kib(server.proc.pid)
        huge = b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"analyze","arguments":{"paths":"' \
            + b"a" * (256 << 20) + b'"}}}\n'  # 256 MiB in one line
        server.send(huge)
        answer = server.recv()
        assert answer["id"] is None and answer["error"]["code"] == -32600
        assert "GPUPROF_MCP_MAX_REQUEST_BYTES" in answer["error"]["message"]
        assert server.ask(request(3, "ping"))["result"] == {}
        grown = _peak_rss_kib(server.proc.pid) - before
        assert grown < 16 * 1024, f"the server's peak memory grew by {grown} KiB for one refused request"
        assert server.close() == 0
    finally:
        server.kill()


def test_malformed_messages_never_end_the_server(root: Path) -> None:
    server = StdioServer(root)
    hostile = [b"\xff\xfe\x00garbage", b"{", b"[" * 200_000, b'{"jsonrpc":"2.0","id":1e999,"method":"ping"}',
               b'{"jsonrpc":"2.0","id":' + b"9" * 5000 + b',"method":"ping"}', b"null", b'"text"',
               b'{"jsonrpc":"1.0","id":1,"method":"ping"}', b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":7}',
               b'{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"analyze","arguments":[1]}}',
               b'{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"analyze","arguments":{"paths":"\\u0000"}}}',
               b'{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"analyze","arguments":{"paths":'
               + b"[" + b",".join([b'"x"'] * 5000) + b"]}}}"]
    try:
        for line in hostile:
            answer = server.ask(line + b"\n")
            assert "error" in answer or answer["result"]["isError"] is True, answer
        assert server.ask(INITIALIZE)["result"]["serverInfo"]["name"] == "gpuprof"
        ok = server.ask(call(6, "analyze", {"paths": "run"}))
        assert ok["result"]["isError"] is False and ok["result"]["structuredContent"]["traces"][0]["num_steps"] == 3
        assert server.close() == 0  # the end of its input ends it, cleanly
    finally:
        server.kill()


@pytest.mark.slow  # three servers, each stopped in the middle of a 1,500-step analysis
def test_a_stopped_server_leaves_nothing_behind(root: Path, tmp_path: Path) -> None:
    """SIGTERM in the middle of an export: no half-written table, no temporary folder; SIGKILL in the middle of
    an analysis: no process of its group lives on and nothing is written."""
    big = simple_training(TraceBuilder(), steps=1500).write(root / "big" / "t.pt.trace.json")
    assert big.stat().st_size > 1 << 20
    temp = tmp_path / "tmp"
    temp.mkdir()
    listing = sorted(p.relative_to(root) for p in root.rglob("*"))
    for sig, tool, args in ((signal.SIGTERM, "export", {"source": "big"}),
                            (signal.SIGTERM, "export", {"source": "big", "output": "tables"}),
                            (signal.SIGKILL, "analyze", {"paths": "big"})):
        server = StdioServer(root, env={"TMPDIR": str(temp)})
        try:
            assert server.ask(INITIALIZE)["id"] == 0
            server.send(call(1, tool, args))
            time.sleep(1.0)  # the analysis of 1,500 steps is under way
            answered = server.proc.poll() is None and _ready(server)
            os.kill(server.proc.pid, sig)
            code = server.proc.wait(timeout=60)
            assert code == (143 if sig == signal.SIGTERM else -9)
            # on a loaded host the request may have completed between the check above and the signal: then its
            # answer is in the pipe, and an export's temporary folder is its result (named in the answer), kept
            answered = answered or _answered_after(server)
            deadline = time.monotonic() + 10
            while _group_alive(server.proc.pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert not _group_alive(server.proc.pid), "a process of the server's group outlived it"
        finally:
            server.kill()
        if not answered:  # stopped mid-request: nothing of the request is left
            assert list(temp.iterdir()) == []
            now = sorted(p.relative_to(root) for p in root.rglob("*"))
            extra = [p for p in now if p not in listing]
            assert all(p.parts[0] == "tables" and not p.name.startswith(".") for p in extra), extra
            for p in extra:  # a table written whole before the signal is complete (atomic), never partial
                if p.suffix == ".csv":
                    assert (root / p).read_text().endswith("\n")


def _answered_after(server: StdioServer) -> bool:
    """The stopped server wrote the answer to request 1 before the signal took it."""
    assert server.proc.stdout is not None
    rest = server.proc.stdout.read() or b""
    return any(b'"id":1' in line.replace(b" ", b"") for line in rest.splitlines())


def _ready(server: StdioServer) -> bool:
    import select

    assert server.proc.stdout is not None
    return bool(select.select([server.proc.stdout.fileno()], [], [], 0)[0])


def test_ctrl_c_ends_an_idle_server_with_130(root: Path) -> None:
    server = StdioServer(root)
    try:
        assert server.ask(request(1, "ping"))["result"] == {}
        os.kill(server.proc.pid, signal.SIGINT)
        assert server.proc.wait(timeout=30) == 130
    finally:
        server.kill()


STRAY = r'''
import os, subprocess, sys
from gpuprof.mcp.wire import Server, serve

class Noisy:
    def describe(self):
        return []

    def instructions(self):
        return ""

    def call(self, name, arguments, structured, progress=None):
        print("a stray print")
        sys.stdout.flush()
        os.write(1, b"a stray write to fd 1\\n")
        os.write(2, b"a stray write to fd 2\\n")
        subprocess.run(["echo", "a child process's output"])
        return {"content": [{"type": "text", "text": "done"}], "isError": False}

serve(Server(Noisy()))
'''


@pytest.mark.parametrize("stderr_closed", [False, True])
def test_standard_output_carries_the_protocol_alone(stderr_closed: bool) -> None:
    """A tool (a library, a child process) that prints cannot corrupt a message, also with standard error closed."""
    import json
    import subprocess
    import sys

    from ..cli.mcp_clients import REPO

    proc = subprocess.run([sys.executable, "-c", STRAY], input=INITIALIZE + call(1, "x", {}) + call(2, "x", {}),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE if not stderr_closed else None,
                          preexec_fn=(lambda: os.close(2)) if stderr_closed else None,
                          env=dict(os.environ, PYTHONPATH=str(REPO)), cwd=REPO, timeout=120)
    assert proc.returncode == 0
    answers = [json.loads(line) for line in proc.stdout.splitlines()]  # every line is a message
    assert [a["id"] for a in answers] == [0, 1, 2]
    if not stderr_closed:
        assert b"a stray print" in proc.stderr and b"a child process's output" in proc.stderr



NAN = r'''
from gpuprof.mcp.wire import Server, serve

class Tools:
    def describe(self):
        return []

    def instructions(self):
        return ""

    def call(self, name, arguments, structured, progress=None):
        return {"content": [], "isError": False, "value": float("nan") if name == "nan" else 1.0}

serve(Server(Tools()))
'''


def test_an_answer_json_cannot_hold_fails_that_request_only() -> None:
    import json
    import subprocess
    import sys

    from ..cli.mcp_clients import REPO

    proc = subprocess.run([sys.executable, "-c", NAN], input=call(1, "nan", {}) + call(2, "ok", {}),
                          capture_output=True, env=dict(os.environ, PYTHONPATH=str(REPO)), cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode()
    first, second = (json.loads(line) for line in proc.stdout.splitlines())
    assert first["id"] == 1 and first["error"]["code"] == -32603 and "not JSON" in first["error"]["message"]
    assert second["id"] == 2 and second["result"]["value"] == 1.0

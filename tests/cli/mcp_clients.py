"""Two clients of ``gpuprof mcp`` for the tests: the MCP SDK's own client in-process, and a raw stdio one.

* :func:`sdk_call`: the ``mcp`` SDK's ``ClientSession`` (the client agents' hosts are built on), connected
  over its in-memory streams to a :class:`gpuprof.mcp.wire.Server`: each message the SDK sends is
  serialised as on the wire, handed to ``Server.handle_line`` and the answer parsed back by the SDK, so
  the SDK checks the server's side of the protocol (handshake, schemas, results) in-process.
* :class:`StdioServer`: ``python -m gpuprof mcp`` as a child process, spoken to in raw lines, for what only
  a real process shows (bytes that are not JSON, huge lines, signals, what is left behind).
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator, Awaitable, Callable

REPO = Path(__file__).resolve().parents[2]


def server_for(*roots: str | Path) -> Any:
    from gpuprof.mcp.roots import Roots
    from gpuprof.mcp.tools import Toolbox
    from gpuprof.mcp.wire import Server

    return Server(Toolbox(Roots.of([str(r) for r in roots])), version="test")


@asynccontextmanager
async def sdk_session(server: Any) -> AsyncIterator[Any]:
    import anyio
    from mcp.client.session import ClientSession
    from mcp.shared.memory import create_client_server_memory_streams
    from mcp.shared.message import SessionMessage

    from mcp import types

    async with create_client_server_memory_streams() as ((c_read, c_write), (s_read, s_write)):
        def notify(obj: dict[str, Any]) -> None:  # from the worker thread running the tool: progress notifications
            message = types.jsonrpc_message_adapter.validate_json(json.dumps(obj), by_name=False)
            anyio.from_thread.run(s_write.send, SessionMessage(message))

        server.notify = notify

        async def pump() -> None:
            async for item in s_read:
                if isinstance(item, Exception):
                    continue
                line = item.message.model_dump_json(by_alias=True, exclude_unset=True).encode()
                answer = await anyio.to_thread.run_sync(server.handle_line, line)
                if answer is not None:
                    message = types.jsonrpc_message_adapter.validate_json(json.dumps(answer), by_name=False)
                    await s_write.send(SessionMessage(message))

        async with anyio.create_task_group() as tg:
            tg.start_soon(pump)
            async with ClientSession(c_read, c_write) as session:
                await session.initialize()
                yield session
            tg.cancel_scope.cancel()


def sdk_call(server: Any, work: Callable[[Any], Awaitable[Any]]) -> Any:
    """``await work(session)`` with an initialised SDK session on ``server``; its value (skips without the SDK)."""
    import pytest

    pytest.importorskip("mcp", reason="the MCP SDK (the tests' client: gpuprof[test]) is not installed")
    import anyio

    async def main() -> Any:
        async with sdk_session(server) as session:
            return await work(session)

    return anyio.run(main)


def request(ident: int, method: str, params: dict[str, Any] | None = None) -> bytes:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "id": ident, "method": method}
    if params is not None:
        msg["params"] = params
    return json.dumps(msg).encode() + b"\n"


def call(ident: int, tool: str, arguments: dict[str, Any]) -> bytes:
    return request(ident, "tools/call", {"name": tool, "arguments": arguments})


INITIALIZE = request(0, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                       "clientInfo": {"name": "tests", "version": "0"}})


class StdioServer:
    """``gpuprof mcp --root ...`` in a child process (its own session: killed with its group at the end)."""

    def __init__(self, *roots: str | Path, env: dict[str, str] | None = None) -> None:
        args = [sys.executable, "-m", "gpuprof", "mcp"] + [a for r in roots for a in ("--root", str(r))]
        full_env = dict(os.environ, PYTHONPATH=str(REPO), **(env or {}))
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env=full_env, cwd=REPO, start_new_session=True)
        self._buf = b""

    def send(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def recv(self, timeout: float = 60.0) -> dict[str, Any]:
        """The next answer; AssertionError when none comes within ``timeout`` (a blocked server)."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        end = time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = end - time.monotonic()
            ready, _, _ = select.select([fd], [], [], max(left, 0))
            assert ready, f"no answer from the server within {timeout} s"
            chunk = os.read(fd, 1 << 20)
            assert chunk, "the server closed its output: " + self.stderr()
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        answer = json.loads(line)
        assert isinstance(answer, dict)
        return answer

    def ask(self, data: bytes, timeout: float = 60.0) -> dict[str, Any]:
        self.send(data)
        return self.recv(timeout)

    def stderr(self) -> str:
        if self.proc.poll() is None:
            return ""
        assert self.proc.stderr is not None
        return self.proc.stderr.read().decode(errors="replace")

    def close(self) -> int:
        """Close its input (the client leaves) and wait: its exit code."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            return self.proc.wait(timeout=30)
        finally:
            self.kill()

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, 9)
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=30)
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None and not stream.closed:
                stream.close()

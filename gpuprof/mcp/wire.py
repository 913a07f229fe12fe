"""The Model Context Protocol's stdio transport, the subset a tool server needs, with no dependency.

Messages are JSON-RPC 2.0 objects, one per line of UTF-8 on standard input and output (the MCP stdio
transport). The server answers ``initialize``, ``ping``, ``tools/list`` and ``tools/call``, takes the
``notifications/*`` it is sent (``notifications/cancelled`` drops a request not yet started), and
answers every other method with JSON-RPC's "method not found".

Why not the ``mcp`` SDK: the protocol subset is small and stable, and without the SDK the server needs
nothing beyond gpuprof's base install (no async framework, no pydantic), starts fast, and keeps what it
reads bounded: the SDK's stdio transport reads a line of any length, here one message is at most
:data:`MAX_REQUEST_BYTES` and a longer one is skipped unread with an error answer. The tests drive this
server with the SDK's own client (``tests/cli/test_mcp_server.py``), so both sides of the protocol are
checked against it.

Robustness: whatever a message holds (bad JSON, a wrong type, a huge line, a tool that fails), the
answer is an error object and the server reads on; only the end of its input (the client has gone) or
a signal ends it. Standard output carries the protocol alone: the descriptor is kept for the answers
and fd 1 is pointed at standard error, so a stray print (ours, a library's, a worker process's) can
never corrupt a message.
"""

from __future__ import annotations

import json
import os
import queue
import threading
from dataclasses import dataclass, field
from typing import Callable, Iterator, Protocol, TypeGuard

from gpuprof.limits import Limit
from gpuprof.redact import scrub

__all__ = ["MAX_REQUEST_BYTES", "PROTOCOL_VERSIONS", "Progress", "ProgressSink", "Tools", "ProtocolError", "Server",
           "serve", "read_lines", "check_stop", "request_stop"]

# A request names a few paths and options: a few hundred bytes. 1 MiB leaves room for any real one.
MAX_REQUEST_BYTES = Limit("GPUPROF_MCP_MAX_REQUEST_BYTES", 1024 * 1024, "the largest MCP request (bytes of one message)")
# The revisions of the initialize handshake this server speaks, oldest first; a client asking another gets the newest.
PROTOCOL_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
_STRUCTURED_SINCE = "2025-06-18"  # tool results carry structuredContent from this revision on
_MAX_CANCELLED = 10_000  # request ids remembered as cancelled

PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL_ERROR = -32700, -32600, -32601, -32602, -32603

JsonObj = dict[str, object]

# Set when the server is told to stop (SIGTERM, SIGINT: gpuprof.cli.mcp), with the exit code. The signal's exception
# unwinds the request in progress, but a library's cleanup on the way may replace it with an error of its own (one
# did: the trace reader's BufferError, gpuprof.trace.chunks.as_json_list, fixed since); the flag makes the server
# leave all the same, with no answer sent.
_stop_code: list[int] = []


def request_stop(code: int) -> None:
    _stop_code[:] = [code]


def check_stop() -> None:
    """Leave now when the server was told to stop: between a tool's work and its answer."""
    if _stop_code:
        raise SystemExit(_stop_code[0])


# Told how far a tool has come: (progress so far, total or None, a short message); see Progress.
ProgressSink = Callable[[float, "float | None", str], None]


class Tools(Protocol):
    """What the server serves (gpuprof.mcp.tools.Toolbox): the tool list and a call of one."""

    def describe(self) -> list[JsonObj]: ...

    def call(self, name: str, arguments: JsonObj, structured: bool, progress: ProgressSink | None) -> JsonObj: ...

    def instructions(self) -> str: ...


class ProtocolError(Exception):
    """A request the protocol itself refuses (unknown tool, malformed params): a JSON-RPC error answer."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class TooLong:
    """A line longer than the limit (skipped unread); its first bytes, to find its id when they hold it."""

    def __init__(self, head: bytes) -> None:
        self.head = head


def read_lines(read: Callable[[int], bytes], limit: int) -> Iterator[bytes | TooLong]:
    """Lines from ``read`` (``os.read`` of a descriptor), each at most ``limit`` bytes held: a longer one is
    consumed to its end unheld and given as :class:`TooLong`. Ends at the end of input."""
    buf = b""
    skipping: bytes | None = None  # the head of a line being skipped
    while True:
        chunk = read(65536)
        if not chunk:
            if buf.strip() and skipping is None:
                yield buf
            elif skipping is not None:
                yield TooLong(skipping)
            return
        buf += chunk
        while True:
            nl = buf.find(b"\n")
            if nl < 0:
                if len(buf) > limit:
                    skipping = skipping if skipping is not None else buf[:256]
                    buf = b""
                break
            line, buf = buf[:nl], buf[nl + 1:]
            if skipping is not None:
                yield TooLong(skipping)
                skipping = None
            elif len(line) > limit:
                yield TooLong(line[:256])
            elif line.strip():
                yield line


def _error(ident: object, code: int, message: str) -> JsonObj:
    return {"jsonrpc": "2.0", "id": ident, "error": {"code": code, "message": scrub(message)}}


def _valid_id(ident: object) -> TypeGuard[str | int]:
    return isinstance(ident, (str, int)) and not isinstance(ident, bool)


class Progress:
    """``notifications/progress`` for a request that asked for them (``_meta.progressToken``): sent at most every
    ``every_s`` seconds, each further than the last (the protocol wants progress to increase), final ones kept."""

    def __init__(self, notify: Callable[[JsonObj], None], token: str | int, every_s: float = 0.25) -> None:
        self.notify, self.token, self.every_s = notify, token, every_s
        self.last_value = -1.0
        # -inf, not 0: time.monotonic() may start near 0 (it counts from boot on Linux), and the first
        # notification must never be held back
        self.last_sent = float("-inf")

    def __call__(self, progress: float, total: float | None, message: str) -> None:
        import time

        now = time.monotonic()
        final = total is not None and progress >= total
        if progress <= self.last_value or (now - self.last_sent < self.every_s and not final):
            return
        self.last_value, self.last_sent = progress, now
        params: JsonObj = {"progressToken": self.token, "progress": progress, "message": message}
        if total is not None:
            params["total"] = total
        self.notify({"jsonrpc": "2.0", "method": "notifications/progress", "params": params})


@dataclass
class Server:
    """One client's session: the negotiated revision, and the requests cancelled before they ran."""

    tools: Tools
    name: str = "gpuprof"
    version: str = ""
    protocol: str = PROTOCOL_VERSIONS[-1]
    cancelled: set[object] = field(default_factory=set)
    notify: Callable[[JsonObj], None] | None = None  # sends a notification (serve sets it); None: none are sent

    def handle_line(self, line: bytes | TooLong) -> JsonObj | None:
        """The answer to one line of input (None for a notification); never raises."""
        if isinstance(line, TooLong):
            return _error(None, INVALID_REQUEST, MAX_REQUEST_BYTES.exceeded("request too large"))
        try:
            msg = json.loads(line)
        except (ValueError, RecursionError) as err:  # RecursionError: JSON nested thousands deep
            return _error(None, PARSE_ERROR, f"parse error: not JSON ({type(err).__name__})")
        return self.handle(msg)

    def handle(self, msg: object) -> JsonObj | None:
        if isinstance(msg, list):
            return _error(None, INVALID_REQUEST, "JSON-RPC batches are not supported: send one message per line")
        if not isinstance(msg, dict) or msg.get("jsonrpc") != "2.0":
            return _error(None, INVALID_REQUEST, "invalid request: a JSON-RPC 2.0 object is expected")
        method, ident, is_request = msg.get("method"), msg.get("id"), "id" in msg
        if not isinstance(method, str):
            # a response to a request of ours (we send none) or garbage: answered only when it is a request
            return _error(ident if _valid_id(ident) else None, INVALID_REQUEST, "invalid request: no method") \
                if is_request and "result" not in msg and "error" not in msg else None
        if is_request and not _valid_id(ident):
            return _error(None, INVALID_REQUEST, "invalid request: id must be a string or an integer")
        params = msg.get("params", {})
        if not is_request:
            self.notified(method, params)
            return None
        if ident in self.cancelled:
            self.cancelled.discard(ident)
            return None  # cancelled before it started: no answer, as the protocol asks
        if len(self.cancelled) > _MAX_CANCELLED:  # cancellations of requests answered already: never needed
            self.cancelled.clear()
        try:
            if not isinstance(params, dict):
                raise ProtocolError(INVALID_PARAMS, "params must be an object")
            return {"jsonrpc": "2.0", "id": ident, "result": self.dispatch(method, params)}
        except ProtocolError as err:
            return _error(ident, err.code, str(err))
        except Exception as err:  # noqa: BLE001 - the server reads on; the tools turn their own errors into results
            return _error(ident, INTERNAL_ERROR, f"internal error: {type(err).__name__}: {err}")

    def notified(self, method: str, params: object) -> None:
        if method == "notifications/cancelled" and isinstance(params, dict) and _valid_id(params.get("requestId")):
            self.cancelled.add(params["requestId"])
        # notifications/initialized and the rest need nothing from a server without state to update

    def dispatch(self, method: str, params: JsonObj) -> JsonObj:
        if method == "initialize":
            asked = params.get("protocolVersion")
            self.protocol = asked if isinstance(asked, str) and asked in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[-1]
            return {"protocolVersion": self.protocol, "capabilities": {"tools": {"listChanged": False}},
                    "serverInfo": {"name": self.name, "version": self.version},
                    "instructions": self.tools.instructions()}
        if method == "ping":
            return {}
        if method == "tools/list":
            return {"tools": self.tools.describe()}
        if method == "tools/call":
            name, arguments = params.get("name"), params.get("arguments", {})
            if not isinstance(name, str):
                raise ProtocolError(INVALID_PARAMS, "tools/call needs the tool's name")
            if arguments is None:
                arguments = {}
            if not isinstance(arguments, dict):
                raise ProtocolError(INVALID_PARAMS, "tools/call arguments must be an object")
            meta = params.get("_meta")
            token = meta.get("progressToken") if isinstance(meta, dict) else None
            progress = Progress(self.notify, token) if self.notify is not None and _valid_id(token) else None
            return self.tools.call(name, arguments, self.structured, progress)
        raise ProtocolError(METHOD_NOT_FOUND, f"method not found: {method[:100]}")

    @property
    def structured(self) -> bool:
        return PROTOCOL_VERSIONS.index(self.protocol) >= PROTOCOL_VERSIONS.index(_STRUCTURED_SINCE)


def _encode(obj: JsonObj) -> bytes:
    # ASCII: no raw newline or U+2028 can end up inside a message; allow_nan False: JSON, not Python's NaN
    return json.dumps(obj, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode("ascii") + b"\n"


def serve(server: Server, in_fd: int = 0, out_fd: int = 1) -> None:
    """Answer ``in_fd``'s messages on ``out_fd`` until the input ends (module docstring).

    A reader thread takes each line as it comes: a ``ping`` is answered at once and a cancellation is noted
    even while a tool runs; requests run one at a time, in order, in this thread.
    """
    try:
        os.fstat(2)
    except OSError:  # started with standard error closed: it becomes /dev/null, or the dup below would take fd 2
        null = os.open(os.devnull, os.O_WRONLY)
        if null != 2:
            os.dup2(null, 2)
            os.close(null)
    out = os.dup(out_fd)  # the protocol's channel; fd 1 itself now leads to standard error
    os.dup2(2, out_fd)
    lock = threading.Lock()
    limit = MAX_REQUEST_BYTES.value()

    def send(obj: JsonObj | None) -> None:
        if obj is None:
            return
        try:
            data = _encode(obj)
        except (ValueError, TypeError) as err:  # a value JSON cannot hold (NaN): that request fails, not the server
            data = _encode(_error(obj.get("id"), INTERNAL_ERROR, f"internal error: the answer is not JSON ({err})"))
        with lock:
            view = memoryview(data)
            while view:
                view = view[os.write(out, view):]

    server.notify = send
    inbox: queue.Queue[bytes | TooLong | None] = queue.Queue()

    def reader() -> None:
        try:
            for line in read_lines(lambda n: os.read(in_fd, n), limit):
                if isinstance(line, bytes) and (b'"ping"' in line or b'"notifications/cancelled"' in line):
                    answer = _quick(server, line)
                    if answer is not _NOT_QUICK:
                        send(answer if isinstance(answer, dict) else None)
                        continue
                inbox.put(line)
        except OSError:
            pass  # the input failed like an end: the client is gone
        finally:
            inbox.put(None)

    threading.Thread(target=reader, name="gpuprof-mcp-reader", daemon=True).start()
    try:
        while (line := inbox.get()) is not None:
            try:
                answer = server.handle_line(line)
                check_stop()
                send(answer)
            except BrokenPipeError:
                return  # the client closed its end: nobody to answer
    finally:
        os.close(out)


_NOT_QUICK = object()


def _quick(server: Server, line: bytes) -> object:
    """A ping's answer or a cancellation noted, from the reader thread; ``_NOT_QUICK`` for anything else."""
    try:
        msg = json.loads(line)
    except (ValueError, RecursionError):
        return _NOT_QUICK
    if isinstance(msg, dict) and msg.get("method") in ("ping", "notifications/cancelled"):
        return server.handle(msg)
    return _NOT_QUICK

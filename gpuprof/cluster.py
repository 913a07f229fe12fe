"""Analysing the ranks of a big job on a Dask cluster (``gpuprof analyze DIR --dask tcp://host:8786``).

Each trace is analysed on a worker that reads it itself, from storage the
worker can reach (a URL through fsspec, see :mod:`gpuprof.remote`, or a path
on a file system the workers share). Only what the per-rank analysis
returns travels back: the trace's summary, its findings and the ~1 KB rank
summary the cross-rank merge needs; the merge itself runs here, on the
client, with the same code as a local run, so the report is the same.

Failure policy: a task that raises is retried once (``retries=1``); a
worker that dies is the scheduler's business (Dask reschedules its tasks
up to ``distributed.scheduler.allowed-failures`` times, then gives up with
``KilledWorker``). A rank that still fails is a :class:`RankFailure`: the
report names it and goes on with the others, never hangs on it. An
unreadable trace is not retried: it is an :class:`~gpuprof.errors.InputError`
that the worker returns as a value, as in a local run.

dask.distributed is optional (gpuprof's ``dask`` extra); without it,
``--dask`` is a one-line error naming the package.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence, Union

from gpuprof.errors import InputError, describe_error
from gpuprof.limits import env_seconds
from gpuprof.remote import TraceFile

if TYPE_CHECKING:
    from distributed import Client

__all__ = ["RankFailure", "Scheduler", "run_on_dask", "connect"]

# What ``--dask`` / ``analyze(dask=...)`` takes: a scheduler address or a Client the caller made.
Scheduler = Union[str, "Client"]
# Seconds a scheduler has to answer (connection, handshake and a first request, all together) before
# ``--dask`` says it cannot be reached; GPUPROF_DASK_TIMEOUT_S overrides (docs/distributed.md).
CONNECT_TIMEOUT_S = 30.0
TIMEOUT_ENV = "GPUPROF_DASK_TIMEOUT_S"
# Address schemes whose location is host:port (the others, inproc:// and ucx://, are left to distributed).
_HOST_PORT_SCHEMES = ("tcp", "tls", "ws", "wss")


@dataclass(frozen=True)
class RankFailure:
    """A trace whose analysis failed on the cluster after its retry; ``reason`` is one line."""

    path: str
    reason: str


def connect_timeout() -> float:
    """Seconds a scheduler has to answer: ``GPUPROF_DASK_TIMEOUT_S`` or :data:`CONNECT_TIMEOUT_S`."""
    return env_seconds(TIMEOUT_ENV, CONNECT_TIMEOUT_S)


def connect(scheduler: Scheduler) -> tuple[Any, bool]:
    """A client for ``scheduler`` and whether this call made it (and so must close it).

    An address is checked in three bounded steps, each failure one
    :class:`~gpuprof.errors.InputError` naming it: its form (scheme, host,
    port), then a probe (connect, Dask handshake, an ``identity`` request)
    that as a whole gets :func:`connect_timeout` seconds, then the
    ``distributed.Client`` itself with what is left of them. The probe is why
    a port that answers something else (an HTTP server, the dashboard) or
    that accepts and never answers is one line within the timeout: left to
    ``Client``, the first became a MemoryError (garbage read as a frame
    length) and the second a hang of minutes, and a Client whose constructor
    failed hangs a further 2x the timeout in its ``__del__``.
    """
    try:
        import distributed
    except ImportError:
        raise InputError(str(scheduler), "--dask needs the dask.distributed package "
                         "(pip install \"dask[distributed]\"; it comes with gpuprof's 'dask' extra)") from None
    # distributed is only partly typed (and absent where the extra is not installed): used through Any
    dist: Any = distributed
    if isinstance(scheduler, dist.Client):
        return scheduler, False
    if not isinstance(scheduler, str):
        raise InputError(repr(scheduler), "--dask takes a scheduler address (tcp://host:port) or a distributed.Client")
    address = scheduler.strip()
    timeout = connect_timeout()
    deadline = time.monotonic() + timeout
    _check_address(address)
    _probe(address, timeout)
    left = max(1.0, deadline - time.monotonic())
    try:
        return dist.Client(address, timeout=left, set_as_default=False), True
    except Exception as err:  # noqa: BLE001 - whatever the constructor raised, the address is what the user must fix
        _disarm_client(err, dist.Client)
        why = (f"it did not take this client within {timeout:g} s; {TIMEOUT_ENV} sets the wait"
               if isinstance(err, (TimeoutError, asyncio.TimeoutError)) else describe_error(err))
        raise InputError(address, f"cannot reach the Dask scheduler ({why})") from None


def _check_address(address: str) -> None:
    """A one-line error for an address that cannot name a scheduler (before any connection is tried)."""
    from distributed.comm.addressing import parse_address, parse_host_port
    from distributed.comm.registry import get_backend

    try:
        if not address:
            raise InputError("--dask", "an empty scheduler address (expected tcp://host:port)")
        if any(c.isspace() or not c.isprintable() for c in address):
            raise ValueError("spaces or control characters in the address")
        scheme, location = parse_address(address)
        get_backend(scheme)  # ValueError naming the known schemes
        if scheme in _HOST_PORT_SCHEMES:
            host, port = parse_host_port(location)
            if not host:
                raise ValueError("no host in the address")
            if not 0 < port < 65536:
                raise ValueError(f"port {port} is not between 1 and 65535")
    except (ValueError, TypeError) as err:
        raise InputError(address, f"not a Dask scheduler address ({err}; expected tcp://host:port)") from None


def _probe(address: str, timeout: float) -> None:
    """Connect, shake hands and ask ``identity``, all within ``timeout`` s; a one-line error otherwise.

    Runs in a thread of its own with its own event loop (the caller may be
    inside one, a notebook's): the thread is a daemon, so a name look-up
    stuck past the timeout is left behind, never waited for. The reply is
    read undeserialised (no pickle from whatever answered).
    """
    outcome: list[BaseException | dict[str, Any]] = []

    def run() -> None:
        try:
            outcome.append(asyncio.run(asyncio.wait_for(_identity(address, timeout), timeout)))
        except BaseException as err:  # noqa: BLE001 - handed to the caller's thread, which decides
            outcome.append(err)

    thread = threading.Thread(target=run, name="gpuprof-dask-probe", daemon=True)
    thread.start()
    thread.join(timeout + 1.0)  # the loop's own wait_for ends it first; this bounds a stuck resolver
    result = outcome[0] if outcome else None
    if result is None or isinstance(result, (asyncio.TimeoutError, TimeoutError)) or (
            isinstance(result, OSError) and "Timed out" in str(result)):
        raise InputError(address, f"cannot reach the Dask scheduler (no answer within {timeout:g} s; "
                         f"{TIMEOUT_ENV} sets the wait)")
    if isinstance(result, MemoryError):  # a length prefix read from bytes that are not Dask's protocol
        raise InputError(address, "cannot reach the Dask scheduler (what answered does not speak Dask's protocol)")
    if isinstance(result, (OSError, EOFError)):
        raise InputError(address, f"cannot reach the Dask scheduler ({describe_error(result)})")
    if isinstance(result, BaseException):
        raise InputError(address, "cannot reach the Dask scheduler (what answered does not speak Dask's protocol: "
                         f"{describe_error(result, 120)})")
    kind = result.get("type")
    if kind != "Scheduler":
        raise InputError(address, f"cannot reach the Dask scheduler (the address is a Dask {_one_word(kind)}, "
                         "not a scheduler)")


async def _identity(address: str, timeout: float) -> dict[str, Any]:
    import distributed.comm.core

    comm_connect: Any = distributed.comm.core.connect  # untyped in distributed
    comm = await comm_connect(address, timeout=timeout, deserialize=False)
    try:
        await comm.write({"op": "identity", "reply": True})
        reply = await comm.read()
    finally:
        comm.abort()
    if not isinstance(reply, dict):
        raise ValueError(f"an identity reply of type {type(reply).__name__}")
    return reply


def _one_word(value: object) -> str:
    text = str(value)
    return text if text.isidentifier() and len(text) <= 40 else "server"


def _disarm_client(err: BaseException, client_type: Any) -> None:
    """Mark closed the half-made Client of a failed constructor, so its ``__del__`` does not wait 2x the timeout.

    The object is only reachable through the traceback's frames (``self`` of
    its ``__init__``); marked closed, its ``close()`` returns at once.
    """
    tb = err.__traceback__
    while tb is not None:
        obj: Any = tb.tb_frame.f_locals.get("self")
        if isinstance(obj, client_type):
            obj.status = "closed"
            with contextlib.suppress(Exception):
                obj._loop_runner.stop()
            return
        tb = tb.tb_next


def run_on_dask(
    scheduler: Scheduler,
    files: Sequence[TraceFile],
    task: Callable[..., Any],
    args: tuple[Any, ...],
    on_done: Callable[[int, int], None] | None = None,
) -> list[Any]:
    """``task(file, *args)`` for each file on the cluster; results in file order, a failed rank as a :class:`RankFailure`.

    ``on_done(done, total)`` is called as each rank completes (progress).
    """
    client, own = connect(scheduler)  # first: it turns a missing package into a one-line error
    import distributed

    as_completed: Any = distributed.as_completed
    try:
        # pure=False: two runs over the same file are two analyses (the file may have changed).
        futures = [client.submit(task, f, *args, retries=1, pure=False, key=f"gpuprof-rank-{i}-{_token()}")
                   for i, f in enumerate(files)]
        index = {fu.key: i for i, fu in enumerate(futures)}
        results: list[Any] = [None] * len(files)
        done = 0
        for fu in as_completed(futures, loop=client.loop):
            i = index[fu.key]
            try:
                results[i] = fu.result()
            except Exception as err:  # noqa: BLE001 - any worker-side failure (KilledWorker, a bug) is this rank's, said in the report
                results[i] = RankFailure(str(files[i]), describe_error(err))
            fu.release()  # the result is here: the cluster may drop it
            done += 1
            if on_done is not None:
                on_done(done, len(files))
        return results
    finally:
        if own:
            client.close()


def _token() -> str:
    import uuid

    return uuid.uuid4().hex[:12]


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

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence, Union

from gpuprof.errors import InputError, describe_error
from gpuprof.remote import TraceFile

if TYPE_CHECKING:
    from distributed import Client

__all__ = ["RankFailure", "Scheduler", "run_on_dask", "connect"]

# What ``--dask`` / ``analyze(dask=...)`` takes: a scheduler address or a Client the caller made.
Scheduler = Union[str, "Client"]
# Seconds to wait for a scheduler to answer before saying it cannot be reached.
CONNECT_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class RankFailure:
    """A trace whose analysis failed on the cluster after its retry; ``reason`` is one line."""

    path: str
    reason: str


def connect(scheduler: Scheduler) -> tuple[Any, bool]:
    """A client for ``scheduler`` and whether this call made it (and so must close it)."""
    try:
        import distributed
    except ImportError:
        raise InputError(str(scheduler), "--dask needs the dask.distributed package "
                         "(pip install \"dask[distributed]\"; it comes with gpuprof's 'dask' extra)") from None
    # distributed is only partly typed (and absent where the extra is not installed): used through Any
    dist: Any = distributed
    if isinstance(scheduler, dist.Client):
        return scheduler, False
    try:
        return dist.Client(scheduler, timeout=CONNECT_TIMEOUT_S, set_as_default=False), True
    except (OSError, TimeoutError, ValueError) as err:
        raise InputError(str(scheduler), f"cannot reach the Dask scheduler ({describe_error(err)})") from None


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


"""A helper process that decodes chunks of a big trace alongside the loader.

Decoding JSON and normalising events is CPU-bound Python, and msgspec holds
the GIL, so threads cannot share it; a second process can. For big inputs
(``PARALLEL_MIN_BYTES`` of JSON text or more) the loader in
:mod:`gpuprof.trace.load` starts one helper (a ``python``
running :func:`run`) and, chunk by chunk, either hands a chunk to it or
decodes it itself, whichever is free. The helper sends back the normalised
events of each chunk (pickled); the loader appends every chunk's events in
file order, so the result is the same :class:`~gpuprof.trace.model.Trace` a
single process builds, event for event (``tests/trace/test_parallel_load.py``
checks this on real traces).

The fast path is optimistic. A chunk ends at the last ``}, {`` in the text,
which is nearly always a real event boundary; the single-process reader
tries earlier boundaries when it is not and gives exact error messages for
bad input. So anything unexpected here (a chunk that does not decode, a
helper that dies or cannot start, a full disk) raises :class:`Fallback`, and
``load_trace`` reads the file again in one process. The loader never fails
because of the helper.

Chunks and results travel as files in a private temporary directory (in
``/dev/shm`` where it exists, so in memory); the pipes carry one short line
per file. Pushing megabytes through a 64 KiB pipe would make each side wait
on the other's GIL hundreds of times per chunk.

The directory is named ``gpuprof-load-<pid>-*`` and holds ``owner.lock``,
which the loader keeps ``flock``-ed while it runs. It is removed when the
load ends, and on SIGTERM/SIGINT during the load; after a SIGKILL (or the OOM
killer) the next load removes it: a lock that can be taken proves the owner
is gone, even if its pid was reused.
"""

from __future__ import annotations

import fcntl
import os
import pickle
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections import deque
from pathlib import Path
from typing import Any, Callable

__all__ = ["Fallback", "Helper", "remove_stale"]

MAX_AHEAD = 64  # chunks decoded or queued but not yet appended (their events are kept anyway; this only caps a stalled helper)
MAX_IN_HELPER = 4  # chunks handed to the helper and not yet back
HELPER_COST = 1.5  # time for the helper to return a chunk / time to decode one here (measured: 1.5-1.9)
_WAIT_S = 120.0  # a helper silent for this long is given up on


class Fallback(Exception):
    """The parallel fast path cannot go on: load the file again in one process."""


_PREFIX = "gpuprof-load-"
_LOCK = "owner.lock"


def _scratch_base() -> str | None:
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None


def _scratch_dir() -> tuple[str, int]:
    """A new scratch directory and the fd of the lock its owner (this process) holds in it.

    The name carries the pid (for people); the lock is the proof: a later
    run that can take it knows the owner is gone, whatever reused its pid.
    """
    base = _scratch_base()
    remove_stale(base)
    path = tempfile.mkdtemp(prefix=f"{_PREFIX}{os.getpid()}-", dir=base)
    try:
        fd = os.open(os.path.join(path, _LOCK), os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        shutil.rmtree(path, ignore_errors=True)
        raise
    return path, fd


def remove_stale(base: str | None = None) -> list[str]:
    """Remove scratch directories left by loads that were killed (SIGKILL, the OOM killer).

    A directory whose lock can be taken has no living owner. Returns the
    directories removed.
    """
    base = base if base is not None else (_scratch_base() or tempfile.gettempdir())
    removed: list[str] = []
    try:
        names = [n for n in os.listdir(base) if n.startswith(_PREFIX)]
    except OSError:
        return removed
    for name in names:
        path = os.path.join(base, name)
        try:
            fd = os.open(os.path.join(path, _LOCK), os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            continue  # being created right now, or not ours: leave it
        except OSError:
            continue  # another user's, or unreadable: not ours to judge
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue  # its owner is alive
        try:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
        finally:
            os.close(fd)
    return removed


class _CleanOnSignal:
    """While a load runs: on SIGTERM/SIGINT remove the scratch, then let the signal do what it did before.

    Installed only in the main thread (Python runs handlers there), and the
    previous handlers come back on exit. The signal is re-delivered with the
    previous handler in place, so the exit status is the usual one.
    """

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self, cleanup: Callable[[], None]) -> None:
        self._cleanup = cleanup
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> "_CleanOnSignal":
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                try:
                    self._previous[sig] = signal.signal(sig, self._handle)
                except (ValueError, OSError):
                    pass  # not settable here (an embedded interpreter): the stale sweep covers it
        return self

    def __exit__(self, *exc: object) -> None:
        self._restore()

    def _restore(self) -> None:
        for sig, prev in self._previous.items():
            signal.signal(sig, prev if prev is not None else signal.SIG_DFL)
        self._previous.clear()

    def _handle(self, sig: int, frame: Any) -> None:
        self._cleanup()
        prev = self._previous.get(sig)
        self._restore()
        if callable(prev):
            prev(sig, frame)  # e.g. Python's SIGINT handler: KeyboardInterrupt, as without us
        elif prev == signal.SIG_IGN:
            return
        else:
            os.kill(os.getpid(), sig)  # default action: die of the signal, as without us


class Helper:
    """The loader's side of one helper process."""

    def __init__(self, proc: subprocess.Popen[bytes], scratch: str, lock_fd: int) -> None:
        self.proc = proc
        self.scratch = scratch
        self._lock_fd = lock_fd
        self._signals = _CleanOnSignal(self._remove_scratch)
        self._signals.__enter__()
        self._fd = proc.stdout.fileno()  # type: ignore[union-attr]
        self._lines: deque[str] = deque()
        self._partial = b""
        self._ready = False
        self._order: deque[tuple[str, Any]] = deque()  # ("helper", None) or ("local", payload), in file order
        self._in_helper = 0
        self._seq = 0

    @classmethod
    def start(cls, wait: bool = False) -> "Helper | None":
        """Start a helper process; None where none can run (then the loader reads alone).

        ``wait``: return only once the helper is ready (tests use it so that
        even small inputs go through the helper)."""
        if not sys.executable or os.name != "posix":
            return None
        # The helper must import this very gpuprof (a checkout may shadow an
        # installed one): its directory goes first on the helper's sys.path,
        # unless it is there already (an installed package's site-packages).
        root = str(Path(__file__).resolve().parents[2])
        boot = (
            "import sys\n"
            f"root = {root!r}\n"
            "if root not in sys.path: sys.path.insert(0, root)\n"
            "from gpuprof.trace.loadhelper import run; run()\n"
        )
        try:
            scratch, lock_fd = _scratch_dir()
        except OSError:
            return None
        try:
            proc = subprocess.Popen(
                [sys.executable, "-c", boot],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
        except OSError:
            shutil.rmtree(scratch, ignore_errors=True)
            os.close(lock_fd)
            return None
        helper = cls(proc, scratch, lock_fd)
        if wait:
            try:
                helper._poll(_WAIT_S)
            except Fallback:
                pass  # a helper that died says so again at its first use
        return helper

    # -- short messages from the helper: one line each
    def _poll(self, timeout: float) -> bool:
        """Read what the helper has said; True when at least one line is waiting."""
        if self._lines:
            return True
        try:
            ready, _, _ = select.select([self._fd], [], [], timeout)
        except (OSError, ValueError):
            raise Fallback("the helper process stopped") from None
        if not ready:
            return False
        data = os.read(self._fd, 65536)
        if not data:
            raise Fallback("the helper process stopped")
        *lines, self._partial = (self._partial + data).split(b"\n")
        self._lines.extend(line.decode() for line in lines)
        return bool(self._lines)

    def _send(self, line: str) -> None:
        try:
            self.proc.stdin.write(line.encode() + b"\n")  # type: ignore[union-attr]
            self.proc.stdin.flush()  # type: ignore[union-attr]
        except (OSError, ValueError):
            raise Fallback("the helper process stopped") from None

    # -- the loader's calls
    def ready(self, chunks_left: float = float("inf")) -> bool:
        """True when the helper should take the next chunk.

        ``chunks_left``: about how many chunks follow this one. The helper
        takes a chunk only while this process has enough of them left to
        work on until the helper's queue is done (a helper chunk costs about
        ``HELPER_COST`` times a local one: the helper also pickles), so that
        neither waits for the other at the end.
        """
        if not self._ready:
            if not self._poll(0):
                return False
            if self._lines.popleft() != "ready":
                raise Fallback("the helper process did not start")
            self._ready = True
        return self._in_helper < MAX_IN_HELPER and chunks_left >= HELPER_COST * (self._in_helper + 1)

    def submit(self, chunk: memoryview) -> None:
        """Hand a chunk of events (the text of one JSON list) to the helper."""
        path = os.path.join(self.scratch, f"chunk{self._seq}")
        try:
            with open(path, "wb") as f:
                f.write(chunk)
        except OSError:
            raise Fallback("cannot write the helper's chunk") from None
        self._send(path)
        self._order.append(("helper", None))
        self._seq += 1
        self._in_helper += 1

    def add_local(self, builder: Any, events: list[Any]) -> None:
        """Events of the next chunk, decoded by the loader itself."""
        if not self._order:
            builder.ingest(events)  # nothing earlier outstanding: straight in
            return
        part = builder.part()
        part.ingest(events)
        self._order.append(("local", part.payload()))
        if len(self._order) >= MAX_AHEAD:
            self.collect(builder, until=MAX_AHEAD - 1)

    def collect(self, builder: Any, until: int | None = None) -> None:
        """Append finished chunks in file order; wait while more than ``until`` are outstanding."""
        while self._order:
            kind, payload = self._order[0]
            if kind == "helper":
                block = until is not None and len(self._order) > until
                if not self._poll(_WAIT_S if block else 0):
                    if block:
                        raise Fallback("the helper process stopped answering")
                    return
                line = self._lines.popleft()
                if not line.startswith("ok "):
                    raise Fallback(f"the helper process could not decode a chunk ({line})")
                result = line[3:]
                try:
                    with open(result, "rb") as f:
                        payload = pickle.load(f)
                    os.unlink(result)
                except (OSError, pickle.UnpicklingError, EOFError):
                    raise Fallback("cannot read the helper's result") from None
                self._in_helper -= 1
            self._order.popleft()
            builder.merge(payload)

    def finish(self, builder: Any) -> None:
        """Wait for every outstanding chunk and append it."""
        self.collect(builder, until=0)

    def close(self) -> None:
        try:
            self.proc.stdin.close()  # type: ignore[union-attr]  # the helper exits at end of input
        except OSError:
            pass  # it is gone already; _reap below collects its exit status
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._signals.__exit__()
        self._remove_scratch()
        # The helper exits on end of input; freeing its memory takes it tens of
        # milliseconds, so reap it in the background rather than wait here.
        threading.Thread(target=_reap, args=(self.proc,), name="gpuprof-load-reap", daemon=True).start()


    def _remove_scratch(self) -> None:
        shutil.rmtree(self.scratch, ignore_errors=True)
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1


def _reap(proc: subprocess.Popen[bytes]) -> None:
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# ------------------------------------------------------------------ the helper process


def main() -> int:
    from gpuprof.trace.load import _EVENTS_DECODER, _Builder

    def say(line: str) -> None:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    say("ready")
    root = _Builder("")
    for line in sys.stdin:  # one chunk file per line, until the loader closes the pipe
        chunk = line.rstrip("\n")
        result = chunk + ".out"
        try:
            with open(chunk, "rb") as f:
                data = f.read()
            os.unlink(chunk)
            events = _EVENTS_DECODER.decode(data)
            del data
            part = root.part()  # string tables shared across chunks, so pickles reuse names
            part.ingest(events)
            del events
            with open(result, "wb") as f:
                pickle.dump(part.payload(), f, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as err:  # noqa: BLE001 - told to the loader, which then reads the file alone
            say(f"error {type(err).__name__}: {str(err)[:200]!r}")
            continue
        say(f"ok {result}")
    return 0


def run() -> None:
    """Entry point of the helper process (started by :meth:`Helper.start`)."""
    import gc

    gc.disable()  # as in the loader: millions of small objects, no cycles worth collecting
    try:
        sys.exit(main())
    except (BrokenPipeError, KeyboardInterrupt):
        sys.exit(1)

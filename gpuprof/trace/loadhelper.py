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
"""

from __future__ import annotations

import os
import pickle
import select
import shutil
import subprocess
import sys
import tempfile
import threading
from collections import deque
from pathlib import Path
from typing import Any

__all__ = ["Fallback", "Helper"]

MAX_AHEAD = 64  # chunks decoded or queued but not yet appended (their events are kept anyway; this only caps a stalled helper)
MAX_IN_HELPER = 4  # chunks handed to the helper and not yet back
HELPER_COST = 1.5  # time for the helper to return a chunk / time to decode one here (measured: 1.5-1.9)
_WAIT_S = 120.0  # a helper silent for this long is given up on


class Fallback(Exception):
    """The parallel fast path cannot go on: load the file again in one process."""


def _scratch_dir() -> str:
    shm = "/dev/shm"
    base = shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None
    return tempfile.mkdtemp(prefix="gpuprof-load-", dir=base)


class Helper:
    """The loader's side of one helper process."""

    def __init__(self, proc: subprocess.Popen[bytes], scratch: str) -> None:
        self.proc = proc
        self.scratch = scratch
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
            scratch = _scratch_dir()
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
            return None
        helper = cls(proc, scratch)
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
        shutil.rmtree(self.scratch, ignore_errors=True)
        # The helper exits on end of input; freeing its memory takes it tens of
        # milliseconds, so reap it in the background rather than wait here.
        threading.Thread(target=_reap, args=(self.proc,), name="gpuprof-load-reap", daemon=True).start()


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

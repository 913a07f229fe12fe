"""The run's TensorBoard event file and its per-step scalars, written by one long-lived thread.

Encoding a step's scalars (protobuf, ~25 µs a step) is kept off the training
thread: every ``flush_every`` steps the session hands a range of steps to
:meth:`ScalarWriter.submit`, which queues it for the writer thread (started
at the first range, a daemon, joined by :meth:`close`). The rows are read
from lists the training thread only appends to, so the writer reads rows
that are complete. A failure on the writer thread is kept and handed back
by the next :meth:`submit` or :meth:`close`, on the training thread, where it
becomes the usual one warning.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from gpuprof.capture.guard import Guard

if TYPE_CHECKING:  # pragma: no cover - annotations only
    from pathlib import Path

    from gpuprof.capture.memory import MemorySampler
    from gpuprof.report import JobSamples

__all__ = ["EventWriter", "ScalarWriter", "StepRows", "step_rows"]

Row = Callable[[int], Mapping[str, float]]  # step index -> its scalars


class EventWriter(Protocol):
    """What gpuprof needs of :class:`gpuprof.render.tensorboard.TensorBoardWriter`."""

    @property
    def path(self) -> str: ...

    def add_step(self, step: int, values: Mapping[str, float]) -> None: ...

    def add_text(self, markdown: str, step: int = 0, tag: str = ...) -> None: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...


class StepRows:
    """The per-step scalars of steps ``[0, len(step_s))``, read from the session's growing lists."""

    def __init__(self, step_s: Sequence[float], fetch_s: Sequence[float], loaders_seen: bool,
                 memory: MemorySampler | None, samples: Callable[[], JobSamples] | None = None) -> None:
        self.step_s = step_s
        self.fetch_s = fetch_s
        self.loaders_seen = loaders_seen
        self.memory = memory
        self._rss: dict[int, int] | None = None
        self.samples = samples
        self._sampled: dict[int, dict[str, float]] | None = None

    def __call__(self, i: int) -> dict[str, float]:
        from gpuprof.trace.dataloading import data_loading_share

        st = self.step_s[i]
        vals: dict[str, float] = {"step_time_ms": st * 1000.0}
        share = data_loading_share(self.fetch_s[i], st) if self.loaders_seen else None
        if share is not None:
            vals["data_loading_share"] = share
        mem = self.memory
        if mem is not None:
            if mem.cuda and i < len(mem.allocated):
                vals["memory_allocated_mib"] = mem.allocated[i] / 2**20
                vals["memory_reserved_mib"] = mem.reserved[i] / 2**20
                vals["memory_peak_mib"] = mem.peak[i] / 2**20
            elif not mem.cuda:
                if self._rss is None:  # once per range, on the writer thread
                    self._rss = mem.rss_by_step()
                if i in self._rss:
                    vals["host_rss_mib"] = self._rss[i] / 2**20
        if self.samples is not None:
            if self._sampled is None:  # once per range, on the writer thread
                self._sampled = sampled_by_step(self.samples())
            vals.update(self._sampled.get(i, {}))
        return vals


# the watch's samples as TensorBoard scalars (docs/run.md): report.json's job.samples column -> scalar tag
SAMPLE_TAGS = {"process_cpu_pct": "cpu_process_pct", "workers_cpu_pct": "cpu_workers_pct",
               "workers_demand_pct": "cpu_workers_demand_pct",
               "gpu_util_pct": "nvml_gpu_util_pct", "gpu_memory_used_mib": "nvml_memory_used_mib",
               "gpu_sm_clock_mhz": "nvml_sm_clock_mhz", "gpu_power_w": "nvml_power_w"}


def sampled_by_step(s: JobSamples) -> dict[int, dict[str, float]]:
    """The sampler's figures by the step that was running when each was read (the last sample of a step wins)."""
    out: dict[int, dict[str, float]] = {}
    for column, tag in SAMPLE_TAGS.items():
        values = getattr(s, column)
        for step, v in zip(s.step, values or ()):
            if v is not None:
                out.setdefault(step, {})[tag] = float(v)
    return out


def step_rows(step_s: Sequence[float], fetch_s: Sequence[float], loaders_seen: bool,
              memory: MemorySampler | None, samples: Callable[[], JobSamples] | None = None) -> StepRows:
    return StepRows(step_s, fetch_s, loaders_seen, memory, samples)


_STOP = None
PART = "TensorBoard writer"  # the guard's name for it


class ScalarWriter:
    """The run's one TensorBoard event file; per-step scalars go through one background thread."""

    def __init__(self, writer: EventWriter) -> None:
        self.writer = writer
        self.flushed = 0  # steps handed over so far
        self._queue: queue.Queue[tuple[int, int, Row] | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._error: Exception | None = None
        self.closed = False

    @classmethod
    def open(cls, out_dir: Path, worker: str) -> ScalarWriter:
        """The event file ``<out_dir>/events.out.tfevents.*.<worker>``."""
        from gpuprof.render.tensorboard import TensorBoardWriter

        return cls(TensorBoardWriter(out_dir, filename_suffix=f".{worker}"))

    @property
    def path(self) -> str:
        return self.writer.path

    def flush(self, guard: Guard, end: int, rows: Row) -> None:
        """On the training thread: queue steps up to ``end``; an earlier range's failure is one warning."""
        if not guard.ok(PART):
            self.skip(end)
            return
        err = self.submit(end, rows)
        if err is not None:
            guard.fail(PART, "no further TensorBoard scalars", err)

    def finish(self, guard: Guard) -> None:
        """At the end of the capture: the thread joined, the file closed, a failure said once."""
        err = self.join()
        if err is not None:
            guard.fail(PART, "no further TensorBoard scalars", err)
        guard.run(PART, "none", self.close)

    def submit(self, end: int, rows: Row) -> Exception | None:
        """Queue steps ``[flushed, end)`` for the writer thread; returns a failure of an earlier range."""
        start, self.flushed = self.flushed, end
        err, self._error = self._error, None
        if err is not None or start >= end:
            return err
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="gpuprof-tensorboard", daemon=True)
            self._thread.start()
        self._queue.put((start, end, rows))
        return None

    def skip(self, end: int) -> None:
        """Steps up to ``end`` are not written (the writer failed)."""
        self.flushed = end

    def join(self) -> Exception | None:
        """Write every queued range and end the thread (joined); returns a failure, if any."""
        t, self._thread = self._thread, None
        if t is not None:
            self._queue.put(_STOP)
            t.join()
        err, self._error = self._error, None
        return err

    def close(self) -> None:
        """Close the event file (after :meth:`join`; idempotent)."""
        if not self.closed:
            self.closed = True
            self.writer.close()

    def _run(self) -> None:
        while True:
            job = self._queue.get()
            if job is _STOP:
                return
            start, end, rows = job
            try:
                for i in range(start, end):
                    self.writer.add_step(i, rows(i))
                self.writer.flush()
            except Exception as err:  # noqa: BLE001 - handed to the training thread at the next submit/close
                if self._error is None:
                    self._error = err


"""TensorBoard output of a capture: per-step scalars and the findings as text.

Written with ``torch.utils.tensorboard.SummaryWriter`` (so only the capture
side imports it: it needs torch and the ``tensorboard`` package), read by
``tensorboard --logdir LOGDIR`` offline, in the Scalars and Text tabs.

Scalars (tag: meaning), one point per training step:

* ``gpuprof/step_time_ms``: wall time between two ``step()`` calls.
* ``gpuprof/data_loading_share``: time waiting in ``DataLoader.__next__`` / step time
  (written once a torch DataLoader has been seen).
* ``gpuprof/gpu_utilization``: GPU busy time / step time, recorded steps only
  (from the trace; see ``gpuprof.trace.metrics``).
* ``gpuprof/memory_allocated_mib``, ``gpuprof/memory_reserved_mib``,
  ``gpuprof/memory_peak_mib``: CUDA caching allocator (peak since process start).
* ``gpuprof/host_rss_mib``: resident memory of the process (without CUDA; sampled at most every 50 ms, so
  fast steps have a point every few steps).

All scalars of one step go into one event (one ``Summary`` with several
values), written by gpuprof itself to its own event file
(``events.out.tfevents.*.scalars*``, the TFRecord layout TensorBoard reads):
about 9 µs a step, where ``SummaryWriter`` (a queue, a writer thread and a
slower CRC) took 27. The findings text goes through ``SummaryWriter``.
"""

from __future__ import annotations

import itertools
import os
import socket
import struct
import time
from typing import Any, BinaryIO, Mapping

from gpuprof.render.safe import visible

__all__ = ["TAGS", "TEXT_TAG", "TensorBoardWriter"]

TAGS = {
    "step_time_ms": "gpuprof/step_time_ms",
    "data_loading_share": "gpuprof/data_loading_share",
    "gpu_utilization": "gpuprof/gpu_utilization",
    "memory_allocated_mib": "gpuprof/memory_allocated_mib",
    "memory_reserved_mib": "gpuprof/memory_reserved_mib",
    "memory_peak_mib": "gpuprof/memory_peak_mib",
    "host_rss_mib": "gpuprof/host_rss_mib",
}
TEXT_TAG = "gpuprof/findings"


def _crc32c_table() -> list[int]:
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC_TABLE = _crc32c_table()
_FILE_IDS = itertools.count()


def masked_crc32c(data: bytes) -> int:
    """CRC-32C of ``data``, masked as TFRecord files store it."""
    crc = 0xFFFFFFFF
    table = _CRC_TABLE
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


class _ScalarFile:
    """An event file of scalar summaries, written directly (TFRecord framing)."""

    def __init__(self, log_dir: str, suffix: str) -> None:
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary

        self._Event, self._Summary = Event, Summary
        name = f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}.{next(_FILE_IDS)}.scalars{suffix}"
        self._f: BinaryIO = open(os.path.join(log_dir, name), "ab")
        self._record(Event(wall_time=time.time(), file_version="brain.Event:2").SerializeToString())

    def add(self, step: int, values: Mapping[str, float]) -> None:
        vals = [self._Summary.Value(tag=TAGS[k], simple_value=float(v)) for k, v in values.items()]
        if vals:
            ev = self._Event(wall_time=time.time(), step=step, summary=self._Summary(value=vals))
            self._record(ev.SerializeToString())

    def _record(self, data: bytes) -> None:
        head = struct.pack("<Q", len(data))
        self._f.write(head + struct.pack("<I", masked_crc32c(head)) + data + struct.pack("<I", masked_crc32c(data)))

    def flush(self) -> None:
        self._f.flush()

    def close(self) -> None:
        self._f.close()


class TensorBoardWriter:
    """A thin layer over ``SummaryWriter`` for gpuprof's scalars and findings text."""

    def __init__(self, log_dir: str | os.PathLike[str], filename_suffix: str = "") -> None:
        from torch.utils.tensorboard import SummaryWriter  # needs the tensorboard package

        self._writer = SummaryWriter(log_dir=os.fspath(log_dir), filename_suffix=filename_suffix)
        self._scalars = _ScalarFile(str(self._writer.log_dir), filename_suffix)

    @property
    def log_dir(self) -> str:
        return str(self._writer.log_dir)

    def add_step(self, step: int, values: Mapping[str, float]) -> None:
        """Write the named scalars (keys of :data:`TAGS`) of one step as one event."""
        self._scalars.add(step, values)

    def add_text(self, markdown: str, step: int = 0, tag: str = TEXT_TAG) -> None:
        """Write ``markdown`` to the Text tab; any control character left in it is made visible.

        The markdown is built from trace names by escaping renderers already;
        this last pass keeps the event file free of them whatever the caller passes.
        """
        text = "\n".join(visible(line) for line in markdown.split("\n"))
        self._writer.add_text(tag, text, global_step=step)

    def flush(self) -> None:
        self._scalars.flush()
        self._writer.flush()

    def close(self) -> None:
        try:
            self._scalars.close()
        finally:
            self._writer.close()

    def __enter__(self) -> "TensorBoardWriter":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

"""TensorBoard output of a capture: per-step scalars and the findings as text.

Read by ``tensorboard --logdir LOGDIR`` offline, in the Scalars and Text
tabs (the gpuprof TensorBoard plugin reads the same file).

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
values). Everything (scalars and the findings text) goes into one event
file per writer, ``events.out.tfevents.<time>.<host>.<pid>.<n><suffix>``,
written by gpuprof itself in the TFRecord layout TensorBoard reads: about
9 µs a step, where torch's ``SummaryWriter`` (a queue, a writer thread and a
slower CRC) took 27, and no second writer or second file per run. Writing
needs only the ``tensorboard`` package (its protobufs), not torch.
"""

from __future__ import annotations

import itertools
import os
import socket
import struct
import threading
import time
from typing import Any, BinaryIO, Mapping

from gpuprof.render.safe import visible

__all__ = ["TAGS", "TEXT_TAG", "TensorBoardWriter", "text_summary"]

# metric -> its tag; the cpu_* and nvml_* ones are the watch's samples (about once a second, docs/run.md)
TAGS = {k: "gpuprof/" + k for k in (
    "step_time_ms", "data_loading_share", "gpu_utilization", "memory_allocated_mib", "memory_reserved_mib",
    "memory_peak_mib", "host_rss_mib", "cpu_process_pct", "cpu_workers_pct", "cpu_workers_demand_pct",
    "nvml_gpu_util_pct", "nvml_memory_used_mib", "nvml_sm_clock_mhz", "nvml_power_w")}
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


class _EventFile:
    """One event file, written directly (TFRecord framing); safe to write from several threads."""

    def __init__(self, log_dir: str, suffix: str) -> None:
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary

        self._Event, self._Summary = Event, Summary
        name = f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}.{next(_FILE_IDS)}{suffix}"
        self.path = os.path.join(log_dir, name)
        # scalars come from the training thread's flusher, the findings text from the report thread
        self._lock = threading.Lock()
        # a new file, made here: a name planted in a shared logdir (a symlink, a FIFO, a device node) is an
        # error (FileExistsError), never written through and never waited on
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        self._f: BinaryIO = os.fdopen(os.open(self.path, flags, 0o666), "ab")
        self._record(Event(wall_time=time.time(), file_version="brain.Event:2").SerializeToString())

    def add(self, step: int, values: Mapping[str, float]) -> None:
        vals = [self._Summary.Value(tag=TAGS[k], simple_value=float(v)) for k, v in values.items()]
        if vals:
            ev = self._Event(wall_time=time.time(), step=step, summary=self._Summary(value=vals))
            self._record(ev.SerializeToString())

    def add_summary(self, step: int, summary: Any) -> None:
        self._record(self._Event(wall_time=time.time(), step=step, summary=summary).SerializeToString())

    def _record(self, data: bytes) -> None:
        head = struct.pack("<Q", len(data))
        rec = head + struct.pack("<I", masked_crc32c(head)) + data + struct.pack("<I", masked_crc32c(data))
        with self._lock:
            self._f.write(rec)

    def flush(self) -> None:
        with self._lock:
            self._f.flush()

    def close(self) -> None:
        with self._lock:
            self._f.close()


def text_summary(tag: str, text: str) -> Any:
    """The ``Summary`` of one text, as ``tensorboard.plugins.text.summary_v2.text_pb`` makes it (the same bytes:
    tests/render/test_tensorboard_writer.py), from the protobuf messages alone: ``text_pb`` goes through
    ``tensor_util``, whose import loads TensorBoard's TensorFlow stub (and boto3 where it is installed): about
    0.3 s of CPU in every training process, for one string."""
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.compat.proto.tensor_pb2 import TensorProto
    from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto
    from tensorboard.compat.proto.types_pb2 import DT_STRING
    from tensorboard.plugins.text.metadata import create_summary_metadata

    tensor = TensorProto(dtype=DT_STRING, tensor_shape=TensorShapeProto(), string_val=[text.encode("utf-8")])
    summary = Summary()
    summary.value.add(tag=tag, metadata=create_summary_metadata(display_name=None, description=None), tensor=tensor)
    return summary


class TensorBoardWriter:
    """gpuprof's per-step scalars and findings text, in one event file under ``log_dir``."""

    def __init__(self, log_dir: str | os.PathLike[str], filename_suffix: str = "") -> None:
        self._log_dir = os.fspath(log_dir)
        os.makedirs(self._log_dir, exist_ok=True)
        self._file = _EventFile(self._log_dir, filename_suffix)

    @property
    def log_dir(self) -> str:
        return self._log_dir

    @property
    def path(self) -> str:
        """The one event file this writer writes."""
        return self._file.path

    def add_step(self, step: int, values: Mapping[str, float]) -> None:
        """Write the named scalars (keys of :data:`TAGS`) of one step as one event."""
        self._file.add(step, values)

    def add_text(self, markdown: str, step: int = 0, tag: str = TEXT_TAG) -> None:
        """Write ``markdown`` to the Text tab; any control character left in it is made visible.

        The markdown is built from trace names by escaping renderers already;
        this last pass keeps the event file free of them whatever the caller passes.
        The tag is ``<tag>/text_summary``, as ``SummaryWriter.add_text`` names it.
        """
        text = "\n".join(visible(line) for line in markdown.split("\n"))
        self._file.add_summary(step, text_summary(f"{tag}/text_summary", text))

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> "TensorBoardWriter":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

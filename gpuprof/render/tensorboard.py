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
written by gpuprof itself in the TFRecord layout TensorBoard reads, no second
writer or second file per run. The few protobuf messages it writes (``Event``,
``Summary`` and its values, the text plugin's tensor) are encoded here, byte for
byte as the ``tensorboard`` package's protobufs encode them
(tests/render/test_tensorboard_writer.py): importing those (protobuf and its
descriptors) cost 17-22 ms of CPU in every training process and building a
step's messages 4 µs. Writing needs no torch; without the ``tensorboard``
package (looked up, not imported) no file is written.
"""

from __future__ import annotations

import itertools
import math
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


def _crc32c_tables() -> list[list[int]]:
    """CRC-32C's byte table and the three more of slicing by 4 (each: one more zero byte after the first)."""
    t0 = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        t0.append(c)
    tables = [t0]
    for _ in range(3):
        prev = tables[-1]
        tables.append([(prev[i] >> 8) ^ t0[prev[i] & 0xFF] for i in range(256)])
    return tables


_CRC_T0, _CRC_T1, _CRC_T2, _CRC_T3 = _crc32c_tables()
_FILE_IDS = itertools.count()


def masked_crc32c(data: bytes) -> int:
    """CRC-32C of ``data``, masked as TFRecord files store it (4 bytes a turn: a quarter less CPU than 1)."""
    crc = 0xFFFFFFFF
    t0, t1, t2, t3 = _CRC_T0, _CRC_T1, _CRC_T2, _CRC_T3
    n = len(data) & ~3
    for (word,) in struct.iter_unpack("<I", data[:n]):
        x = crc ^ word
        crc = t3[x & 0xFF] ^ t2[(x >> 8) & 0xFF] ^ t1[(x >> 16) & 0xFF] ^ t0[x >> 24]
    for b in data[n:]:
        crc = t0[(crc ^ b) & 0xFF] ^ (crc >> 8)
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


# ----------------------------------------------------------------------- the protobuf messages, encoded by hand
# Field numbers of tensorboard/compat/proto: Event {double wall_time = 1; int64 step = 2; string file_version = 3;
# Summary summary = 5}, Summary {repeated Value value = 1}, Value {string tag = 1; float simple_value = 2;
# TensorProto tensor = 8; SummaryMetadata metadata = 9}, TensorProto {DataType dtype = 1; TensorShapeProto
# tensor_shape = 2; repeated bytes string_val = 8}, SummaryMetadata {PluginData plugin_data = 1},
# PluginData {string plugin_name = 1; bytes content = 2}. Fields in number order, proto3 defaults left out
# (a oneof member and a message field set are written even when empty), as protobuf serializes them.

def _varint(n: int) -> bytes:
    if n < 0:
        n += 1 << 64  # int64: two's complement, ten bytes
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (string, bytes, message)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _float32(v: float) -> bytes:
    """A ``float`` field's four bytes: the double rounded to single precision (out of its range: infinity, as
    protobuf's C conversion gives, where ``struct`` refuses)."""
    try:
        return struct.pack("<f", v)
    except OverflowError:
        return struct.pack("<f", math.copysign(math.inf, v))


def _event(wall_time: float, step: int = 0, *, file_version: str | None = None, summary: bytes | None = None) -> bytes:
    """An ``Event`` message's bytes (``summary``: a ``Summary`` message's bytes)."""
    out = b"\x09" + struct.pack("<d", wall_time) if wall_time != 0.0 else b""
    if step:
        out += b"\x10" + _varint(step)
    if file_version is not None:
        out += _field(3, file_version.encode("utf-8"))
    if summary is not None:
        out += _field(5, summary)
    return out


# a scalar's Summary.Value field up to its float: the value's key and length, its tag (1), simple_value's key (2)
_SCALAR_HEAD = {k: _field(1, _field(1, tag.encode("utf-8")) + b"\x15" + bytes(4))[:-4] for k, tag in TAGS.items()}
# the text plugin's SummaryMetadata (create_summary_metadata(None, None): plugin "text", version 0: no content)
_TEXT_METADATA = _field(1, _field(1, b"text"))
_DT_STRING = 7  # tensorboard.compat.proto.types_pb2.DT_STRING


class _EventFile:
    """One event file, written directly (TFRecord framing); safe to write from several threads."""

    def __init__(self, log_dir: str, suffix: str) -> None:
        name = f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}.{next(_FILE_IDS)}{suffix}"
        self.path = os.path.join(log_dir, name)
        # scalars come from the training thread's flusher, the findings text from the report thread
        self._lock = threading.Lock()
        # a new file, made here: a name planted in a shared logdir (a symlink, a FIFO, a device node) is an
        # error (FileExistsError), never written through and never waited on
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        self._f: BinaryIO = os.fdopen(os.open(self.path, flags, 0o666), "ab")
        self._heads: dict[int, bytes] = {}  # a record's length and its CRC, by length (a few lengths repeat)
        self._record(_event(time.time(), file_version="brain.Event:2"))

    def add(self, step: int, values: Mapping[str, float]) -> None:
        vals = b"".join(_SCALAR_HEAD[k] + _float32(float(v)) for k, v in values.items())
        if vals:
            self._record(_event(time.time(), step, summary=vals))

    def add_summary(self, step: int, summary: bytes) -> None:
        """An event holding ``summary`` (a ``Summary`` message's bytes, :func:`text_summary`)."""
        self._record(_event(time.time(), step, summary=summary))

    def _record(self, data: bytes) -> None:
        head = self._heads.get(len(data))
        if head is None:
            length = struct.pack("<Q", len(data))
            head = self._heads[len(data)] = length + struct.pack("<I", masked_crc32c(length))
        rec = head + data + struct.pack("<I", masked_crc32c(data))
        with self._lock:
            self._f.write(rec)

    def flush(self) -> None:
        with self._lock:
            self._f.flush()

    def close(self) -> None:
        with self._lock:
            self._f.close()


def text_summary(tag: str, text: str) -> bytes:
    """The ``Summary`` message of one text, the bytes ``tensorboard.plugins.text.summary_v2.text_pb`` makes
    (tests/render/test_tensorboard_writer.py), encoded here: ``text_pb`` goes through ``tensor_util``, whose import
    loads TensorBoard's TensorFlow stub (and boto3 where it is installed), about 0.3 s of CPU in every training
    process, for one string."""
    tensor = _varint(1 << 3) + _varint(_DT_STRING) + _field(2, b"") + _field(8, text.encode("utf-8"))
    return _field(1, _field(1, tag.encode("utf-8")) + _field(8, tensor) + _field(9, _TEXT_METADATA))


def _need_tensorboard() -> None:
    """ModuleNotFoundError, as importing it raised when the writer used its protobufs, without the ``tensorboard``
    package: its files are for TensorBoard, and a capture without it says once what to install (looked up, not
    imported)."""
    import importlib.util

    if importlib.util.find_spec("tensorboard") is None:
        raise ModuleNotFoundError("No module named 'tensorboard'", name="tensorboard")


class TensorBoardWriter:
    """gpuprof's per-step scalars and findings text, in one event file under ``log_dir``."""

    def __init__(self, log_dir: str | os.PathLike[str], filename_suffix: str = "") -> None:
        _need_tensorboard()
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

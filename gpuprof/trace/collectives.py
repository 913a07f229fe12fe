"""What a communication event is: its collective type, message size and bus-bandwidth factor.

Backends name their work differently; the three gpuprof reads:

- **NCCL / RCCL** (GPU): kernels ``ncclKernel_AllReduce_RING_LL_Sum_float``,
  ``ncclDevKernel_AllGather_RING_LL``; host annotations ``nccl:all_reduce``;
  and, on recent torch, ``record_param_comms`` operators whose args carry
  ``Collective name``, ``In msg nelems``, ``dtype`` and ``Group size``.
- **gloo** (CPU): ``gloo:all_reduce`` annotations on gloo's worker threads,
  spanning the whole collective, waiting included, with ``Input Dims`` and
  ``Input type`` giving the message.

**Bus bandwidth** follows nccl-tests' definition: algorithm bandwidth
(bytes / time) times a factor that makes it comparable with the link speed:
``2(n-1)/n`` for all-reduce, ``(n-1)/n`` for all-gather, reduce-scatter and
all-to-all, 1 for broadcast, reduce and send/recv (n = ranks in the group).
"""

from __future__ import annotations

import functools
import re
from typing import Any

import msgspec

from gpuprof.trace.model import CommArgs

__all__ = ["COLLECTIVE_TYPES", "is_comm_event_name", "comm_args", "collective_type", "bus_factor", "dtype_bytes",
           "message_bytes"]

# in the order reports list them
COLLECTIVE_TYPES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send_recv",
                    "reduce", "barrier", "other")

_PREFIXES = ("nccl:", "gloo:", "rccl:", "ucc:", "mpi:", "ncclkernel", "nccldevkernel", "rcclkernel")

# canonical words -> type; matched against a name with "_" and spaces removed, lower case
_TYPE_WORDS = (
    ("allreduce", "all_reduce"),
    ("allgather", "all_gather"),
    ("reducescatter", "reduce_scatter"),
    ("alltoall", "all_to_all"),
    ("broadcast", "broadcast"),
    ("sendrecv", "send_recv"),
    ("send", "send_recv"),
    ("recv", "send_recv"),
    ("barrier", "barrier"),
    ("reduce", "reduce"),
)

_DTYPE_BYTES = {
    "float": 4, "float32": 4, "c10::float": 4, "int": 4, "int32": 4, "uint32": 4,
    "double": 8, "float64": 8, "long": 8, "int64": 8, "long int": 8, "uint64": 8,
    "half": 2, "float16": 2, "c10::half": 2, "bfloat16": 2, "c10::bfloat16": 2, "short": 2, "int16": 2,
    "char": 1, "int8": 1, "uint8": 1, "unsigned char": 1, "signed char": 1, "bool": 1, "byte": 1,
    "float8_e4m3fn": 1, "float8_e5m2": 1, "c10::float8_e4m3fn": 1, "c10::float8_e5m2": 1,
}


@functools.lru_cache(maxsize=4096)
def is_comm_event_name(name: str) -> bool:
    """True for the events whose args describe a collective (see the module docstring)."""
    if name == "record_param_comms":
        return True
    return name[:16].lower().startswith(_PREFIXES)


def _int(x: Any) -> int:
    if type(x) is int:
        return x
    try:
        return int(float(x))
    except (TypeError, ValueError, OverflowError):
        return -1


def comm_args(a: Any) -> CommArgs:
    """The collective fields of a raw event's args (``gpuprof.trace.raw.RawArgs``); unknown ones stay empty."""
    nelems = _int(a.in_msg_nelems) if a.in_msg_nelems is not None else -1
    dtype = a.comm_dtype if isinstance(a.comm_dtype, str) else ""
    if nelems < 0 and a.input_dims:
        nelems = _nelems_from_dims(_decode_dims(a.input_dims))
    if not dtype and a.input_type:
        types = _decode_dims(a.input_type)  # undecoded JSON, as Input Dims
        if isinstance(types, list) and types and isinstance(types[0], str):
            dtype = types[0]
    pg = a.pg_name if isinstance(a.pg_name, (str, int)) else ""
    return CommArgs(
        collective=a.collective_name if isinstance(a.collective_name, str) else "",
        nelems=nelems,
        dtype=dtype,
        group_size=_int(a.group_size) if a.group_size is not None else -1,
        pg=str(pg)[:64],
    )


def _decode_dims(raw: Any) -> Any:
    """``Input Dims`` (or ``Input type``) as the loader kept it (undecoded JSON, msgspec.Raw) -> its value; None if unreadable."""
    if not isinstance(raw, msgspec.Raw):
        return raw
    if not raw:
        return None
    try:
        return msgspec.json.decode(raw)
    except (msgspec.DecodeError, RecursionError, UnicodeDecodeError):  # a stranger's odd value (1e400, deep nesting, not UTF-8): no message size, nothing else lost
        return None


def _nelems_from_dims(dims: Any) -> int:
    """Elements of the first input: ``[[19618307]]`` -> 19618307; a tensor list sums its tensors."""
    if not isinstance(dims, list) or not dims:
        return -1
    first = dims[0]
    if not isinstance(first, list) or not first:
        return -1
    shapes = first if isinstance(first[0], list) else [first]  # TensorList: a list of shapes
    total = 0
    for shape in shapes:
        if not isinstance(shape, list) or len(shape) > 64 or not all(type(d) is int and d >= 0 for d in shape):
            return -1
        n = 1
        for d in shape:
            n *= d
        total += n
    return total


_KERNEL_RE = re.compile(r"^(?:nccl|rccl)(?:Dev)?Kernel_([A-Za-z]+)", re.IGNORECASE)


@functools.lru_cache(maxsize=4096)
def collective_type(name: str, collective: str = "") -> str:
    """The canonical type (one of :data:`COLLECTIVE_TYPES`) of a communication event."""
    text = collective
    if not text:
        m = _KERNEL_RE.match(name)
        if m:
            text = m.group(1)
        elif ":" in name:
            text = name.split(":", 1)[1]
        else:
            text = name
    key = text.lower().replace("_", "").replace(" ", "")
    for word, kind in _TYPE_WORDS:
        if word in key:
            return kind
    return "other"


def bus_factor(kind: str, group_size: int) -> float:
    """nccl-tests' bus-bandwidth factor for a collective over ``group_size`` ranks."""
    n = max(group_size, 1)
    if kind == "all_reduce":
        return 2 * (n - 1) / n
    if kind in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    return 1.0


def dtype_bytes(dtype: str) -> int:
    """Bytes per element of a dtype as traces write it (``Float``, ``c10::BFloat16``); 0 if unknown."""
    return _DTYPE_BYTES.get(dtype.strip().lower(), 0)


def message_bytes(args: CommArgs) -> int:
    """The message size in bytes, or -1 when the trace does not say."""
    size = dtype_bytes(args.dtype)
    if args.nelems < 0 or size == 0:
        return -1
    return args.nelems * size

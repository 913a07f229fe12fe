"""Kineto's vocabulary, normalised once.

PyTorch has written its profiler traces with several dialects since 2020:
2021 category names (``Operator``, ``Runtime``, ``Kernel``, ``Memcpy``,
``Memset``), today's (``cpu_op``, ``cuda_runtime``, ``kernel``,
``gpu_memcpy``, ...), ROCm runtime names (``hipMemcpyAsync``) under the CUDA
categories, and memcpy kinds spelled inside event names
(``Memcpy HtoD (Pageable -> Device)``). Everything downstream of the loader
speaks only the vocabulary defined here.
"""

from __future__ import annotations

import enum
import re
from typing import Callable

__all__ = ["Kind", "CATEGORY_KIND", "CopyKind", "parse_copy_name", "RuntimeClass", "classify_runtime", "STEP_RE",
           "step_number", "is_dataloader_name", "is_single_process_dataloader", "is_optimizer_name", "SYNC_OPS",
           "LOGGING_FRAME_PREFIXES", "SHAPE_KEY_OPS", "logging_call_of"]


class Kind(enum.IntEnum):
    """What an event is, independent of the dialect that wrote it."""

    CPU_OP = 1  # an operator (aten::*, or a user record_function in 2021 traces)
    USER_ANNOTATION = 2  # record_function ranges: ProfilerStep#N, DataLoader, Optimizer.step
    PYTHON_FUNCTION = 3  # with_stack=True Python frames
    RUNTIME = 4  # CUDA/HIP runtime or driver API call on a host thread
    KERNEL = 5  # GPU kernel
    MEMCPY = 6  # GPU copy
    MEMSET = 7  # GPU memset
    GPU_SYNC = 8  # cuda_sync: the GPU-side view of a synchronisation
    GPU_ANNOTATION = 9  # gpu_user_annotation: record_function ranges mirrored on a stream
    MEMORY = 10  # [memory] instant event (profile_memory=True)
    OTHER = 0


# Trace categories of every dialect -> Kind ("X" events; [memory] instants are Kind.MEMORY).
CATEGORY_KIND: dict[str, Kind] = {
    "cpu_op": Kind.CPU_OP,
    "operator": Kind.CPU_OP,
    "Operator": Kind.CPU_OP,
    "user_annotation": Kind.USER_ANNOTATION,
    "python_function": Kind.PYTHON_FUNCTION,
    "python": Kind.PYTHON_FUNCTION,
    "cuda_runtime": Kind.RUNTIME,
    "cuda_driver": Kind.RUNTIME,
    "Runtime": Kind.RUNTIME,
    "runtime": Kind.RUNTIME,
    "hip_runtime": Kind.RUNTIME,
    "kernel": Kind.KERNEL,
    "Kernel": Kind.KERNEL,
    "gpu_memcpy": Kind.MEMCPY,
    "Memcpy": Kind.MEMCPY,
    "gpu_memset": Kind.MEMSET,
    "Memset": Kind.MEMSET,
    "cuda_sync": Kind.GPU_SYNC,
    "gpu_user_annotation": Kind.GPU_ANNOTATION,
}


# --- copies -------------------------------------------------------------------


class CopyKind:
    """Direction and host-memory kind of a GPU copy, parsed from its event name."""

    __slots__ = ("direction", "src", "dst")

    def __init__(self, direction: str, src: str, dst: str) -> None:
        self.direction = direction  # HtoD, DtoH, DtoD, HtoH, PtoP, other
        self.src = src  # Pageable, Pinned, Device, Host, Unknown (as in the trace)
        self.dst = dst

    @property
    def host_memory(self) -> str:
        """``pageable``, ``pinned``, ``device`` (device-to-device) or ``unknown``."""
        side = self.src if self.direction == "HtoD" else self.dst if self.direction == "DtoH" else None
        if side is None:
            return "device" if self.direction in ("DtoD", "PtoP") else "unknown"
        side = side.lower()
        if side == "pageable":
            return "pageable"
        if side == "pinned":
            return "pinned"
        return "unknown"  # ROCm writes "Host": the kind is not recorded

    def __repr__(self) -> str:
        return f"CopyKind({self.direction}, {self.src}->{self.dst})"


_COPY_RE = re.compile(r"Memcpy\s+(\w+)\s*(?:\((\w+)\s*->\s*(\w+)\))?")
_DIRECTIONS = {"HtoD", "DtoH", "DtoD", "HtoH", "PtoP", "DtoA", "AtoD", "AtoH", "HtoA", "AtoA"}
_COPY_CACHE: dict[str, CopyKind] = {}


def parse_copy_name(name: str) -> CopyKind:
    """``Memcpy HtoD (Pageable -> Device)`` -> CopyKind("HtoD", "Pageable", "Device")."""
    hit = _COPY_CACHE.get(name)
    if hit is not None:
        return hit
    m = _COPY_RE.search(name)
    if m and m.group(1) in _DIRECTIONS:
        direction = m.group(1)
        src = m.group(2) or "Unknown"
        dst = m.group(3) or "Unknown"
    else:
        direction, src, dst = copy_direction_of(name), "Unknown", "Unknown"
    ck = CopyKind(direction, src, dst)
    if len(_COPY_CACHE) < 4096:
        _COPY_CACHE[name] = ck
    return ck


# --- runtime calls --------------------------------------------------------------


# roctracer's copy names (``CopyHostToDevice``) and the direction words of copy APIs (``hipMemcpyHtoD``,
# ``cuMemcpyDtoH_v2``, ``cudaMemcpyToSymbol``: host to device)
_WORD_DIRECTIONS = (("hosttodevice", "HtoD"), ("devicetohost", "DtoH"), ("devicetodevice", "DtoD"),
                    ("htod", "HtoD"), ("dtoh", "DtoH"), ("dtod", "DtoD"), ("tosymbol", "HtoD"),
                    ("fromsymbol", "DtoH"), ("peer", "PtoP"))


def copy_direction_of(name: str) -> str:
    """The copy direction a GPU copy's or a copy API's name states (``HtoD``...), else ``other``."""
    low = name.lower()
    for word, direction in _WORD_DIRECTIONS:
        if word in low:
            return direction
    return "other"


def is_synchronous_copy(name: str) -> bool:
    """A copy API that returns only when its copy is done (``cudaMemcpy``, ``hipMemcpy``,
    ``hipMemcpyWithStream``, ``cuMemcpyHtoD_v2``), not an ``*Async`` one: the host waits in it, first for the
    work queued before the copy on its stream, then for the copy."""
    return classify_runtime(name) is RuntimeClass.MEMCPY and "async" not in name.lower()


class RuntimeClass(enum.Enum):
    """What a CUDA/HIP runtime call does, as far as the host thread is concerned."""

    LAUNCH = "launch"  # kernel launch (cudaLaunchKernel, cuLaunchKernel, hipExtModuleLaunchKernel, graph launch)
    MEMCPY = "memcpy"  # cudaMemcpy*, hipMemcpy*
    MEMSET = "memset"
    SYNC = "sync"  # cudaDeviceSynchronize, cudaStreamSynchronize, cudaEventSynchronize, cudaStreamWaitEvent? no
    MALLOC = "malloc"  # cudaMalloc, cudaMallocHost, hipMalloc
    FREE = "free"  # cudaFree, cudaFreeHost, hipFree
    EVENT = "event"  # cudaEventRecord, cudaStreamWaitEvent, cudaEventQuery (non-blocking)
    OTHER = "other"


_RUNTIME_CACHE: dict[str, RuntimeClass] = {}


def classify_runtime(name: str) -> RuntimeClass:
    """Classify a runtime/driver call name (CUDA or HIP)."""
    hit = _RUNTIME_CACHE.get(name)
    if hit is not None:
        return hit
    n = name
    for prefix in ("cuda", "hip", "cu"):
        if n.startswith(prefix):
            n = n[len(prefix):]
            break
    low = n.lower()
    if "synchronize" in low:
        rc = RuntimeClass.SYNC
    elif "launch" in low or low.startswith("graphlaunch") or low.startswith("modulelaunch"):
        rc = RuntimeClass.LAUNCH
    elif low.startswith("memcpy"):
        rc = RuntimeClass.MEMCPY
    elif low.startswith("memset"):
        rc = RuntimeClass.MEMSET
    elif low.startswith("malloc") or low.startswith("memalloc") or low.startswith("hostalloc") or low.startswith("extmalloc"):
        rc = RuntimeClass.MALLOC
    elif low.startswith("free") or low.startswith("memfree") or low.startswith("hostfree"):
        rc = RuntimeClass.FREE
    elif low.startswith("event") or low.startswith("streamwaitevent") or low.startswith("streamquery"):
        rc = RuntimeClass.EVENT
    else:
        rc = RuntimeClass.OTHER
    if len(_RUNTIME_CACHE) < 4096:
        _RUNTIME_CACHE[name] = rc
    return rc


# --- annotations ------------------------------------------------------------------

STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")


def step_number(name: str) -> int | None:
    """``ProfilerStep#12`` -> 12, anything else -> None."""
    if not name.startswith("ProfilerStep#"):
        return None
    m = STEP_RE.match(name)
    return int(m.group(1)) if m else None


def is_dataloader_name(name: str) -> bool:
    """The DataLoader fetching a batch: ``enumerate(DataLoader)#_...Iter.__next__``.

    Python frames of ``torch/utils/data/dataloader.py(...): __next__`` count too,
    for traces whose only trace of the DataLoader is the Python stack.
    """
    return name.startswith("enumerate(DataLoader)") or (
        name.endswith("__next__") and "torch/utils/data/dataloader.py" in name
    )


def is_single_process_dataloader(name: str) -> bool:
    """True when the batch was fetched in the training process (``num_workers=0``)."""
    return "_SingleProcessDataLoaderIter" in name


def is_optimizer_name(name: str) -> bool:
    return name.startswith("Optimizer.step#") or name.startswith("Optimizer.zero_grad#")


# Operators whose input shapes (``Input Dims``, record_shapes=True; the loader keeps every operator's) tell
# steps with static shapes (CUDA-graph candidates) from steps whose shapes change: the matmuls,
# convolutions and attention that a model's batch and sequence sizes flow through.
SHAPE_KEY_OPS = frozenset({
    "aten::linear", "aten::matmul", "aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm",
    "aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::convolution",
    "aten::scaled_dot_product_attention",
})

# Operators that force the host to wait for the GPU, and what the user wrote.
SYNC_OPS: dict[str, str] = {
    "aten::item": ".item()",
    "aten::_local_scalar_dense": ".item()",
    "aten::is_nonzero": "bool(tensor) / if tensor:",
    "aten::nonzero": "torch.nonzero / boolean-mask indexing",
    "aten::nonzero_static": "torch.nonzero_static",
    "aten::masked_select": "boolean-mask indexing",
    "aten::unique": "torch.unique",
    "aten::_unique2": "torch.unique",
    "aten::tolist": ".tolist()",
    "aten::repeat_interleave": "repeat_interleave without output_size",
    "aten::equal": "torch.equal",
    "aten::allclose": "torch.allclose",
    "aten::_assert_async": "assert on a tensor",
}


# --- Python frames (with_stack=True) of logging calls ---------------------------------------
#
# The profiler's Python tracer names a frame ``path(LINE): function`` with the
# path relative to its sys.path entry, so stdlib and site-packages frames read
# ``logging/__init__.py(1479): info`` whatever the install prefix.

LOGGING_FRAME_PREFIXES = (
    "<built-in function print>",
    "logging/__init__.py(",
    "torch/utils/tensorboard/writer.py(",
    "wandb/sdk/wandb_run.py(",
    "mlflow/tracking/fluent.py(",
)
_LOGGING_FRAMES: tuple[tuple[re.Pattern[str], Callable[[re.Match[str]], str]], ...] = (
    (re.compile(r"^<built-in function print>$"), lambda m: "print(...)"),
    (re.compile(r"^logging/__init__\.py\(\d+\): (debug|info|warning|warn|error|exception|critical|log)$"),
     lambda m: f"logger.{m.group(1)}(...)"),
    (re.compile(r"^torch/utils/tensorboard/writer\.py\(\d+\): (add_\w+)$"), lambda m: f"SummaryWriter.{m.group(1)}(...)"),
    (re.compile(r"^wandb/sdk/wandb_run\.py\(\d+\): (log)$"), lambda m: "wandb.log(...)"),
    (re.compile(r"^mlflow/tracking/fluent\.py\(\d+\): (log_metrics?)$"), lambda m: f"mlflow.{m.group(1)}(...)"),
)


def logging_call_of(frame: str) -> str | None:
    """What the user called to log, for the Python frame of that call; None for any other frame.

    ``<built-in function print>`` -> ``print(...)``; ``logging/__init__.py(1479): info``
    -> ``logger.info(...)``; ``torch/utils/tensorboard/writer.py(347): add_scalar``
    -> ``SummaryWriter.add_scalar(...)``; also ``wandb.log`` and ``mlflow.log_metric(s)``.
    Frames inside those libraries (``logging/__init__.py(1610): _log``) are not calls.
    """
    if not frame.startswith(LOGGING_FRAME_PREFIXES):
        return None
    for rx, what in _LOGGING_FRAMES:
        m = rx.match(frame)
        if m:
            return what(m)
    return None

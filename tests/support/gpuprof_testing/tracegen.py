"""Write realistic synthetic Kineto (PyTorch profiler) Chrome traces.

Rule tests need small traces that show exactly one pathology (a bad trace)
or its absence (a good one). :class:`TraceBuilder` writes them with the same
events, categories, argument names and links as real PyTorch profiler
output, so the loader and the rules see nothing they would not see in a real
trace. It is modelled on the real files in ``shared/traces`` (PyTorch 1.8 to
2.6, Kineto 2021 to 2026).

The builder simulates time:

* a **host clock** per thread: every host event starts at the current clock,
  and host calls advance it (``launch_us`` per runtime call plus ``gap_us`` of
  Python overhead after it);
* a **GPU clock** per ``(device, stream)``: GPU work starts no earlier than
  the end of the runtime call that launched it and no earlier than the end of
  the previous work on its stream (a stream runs one thing at a time);
* synchronising calls (``cudaStreamSynchronize``, ``cudaDeviceSynchronize``,
  ``.item()``, blocking pageable copies, ``cudaFree``) make the host wait for
  the GPU, as the CUDA runtime does.

Example::

    tb = TraceBuilder(device="NVIDIA A100-SXM4-80GB", cc=(8, 0), total_memory=80 << 30)
    for _ in range(5):
        with tb.step():                                   # ProfilerStep#N
            tb.dataloader(ms=20, single_process=True)
            tb.copy_h2d(nbytes=19267584, pageable=True, blocking=True)
            with tb.op("aten::conv2d", input_types=["float", "float"]):
                tb.kernel("volta_sgemm_128x64_nn", us=900)
            tb.cpu(ms=5)
            tb.sync_item(line=("train.py", 42))
            tb.optimizer(ms=3)
            tb.memory(alloc=1 << 20)
    tb.write(tmp_path / "worker0.pt.trace.json.gz")

Two dialects are written:

* ``"modern"`` (default; PyTorch >= 1.10): ``cpu_op``, ``user_annotation``,
  ``python_function``, ``cuda_runtime``, ``kernel``, ``gpu_memcpy``,
  ``gpu_memset``, ``cuda_sync``, ``cpu_instant_event`` ``[memory]`` events,
  ``ac2g`` flows, int tids, float µs timestamps, ``baseTimeNanoseconds``,
  ``distributedInfo``.
* ``"2021"`` (PyTorch 1.8/1.9, the tb_plugin samples): categories
  ``Operator`` (also for ``ProfilerStep#N``, DataLoader and optimizer ranges),
  ``Runtime``, ``Kernel``, ``Memcpy``, ``Memset``; string tids (``"25738"``,
  ``"stream 7"``); ``external id`` (lower case) on runtime and GPU events;
  Python stacks as a ``Call stack`` string on operators; integer timestamps;
  ``[memory]`` events with only ``Bytes``; ``async``/``launch`` flows; no
  ``cuda_sync`` events.

Times given to the builder are in microseconds (``us=``) or milliseconds
(``ms=``); the trace holds microseconds, as Kineto writes them.
"""

from __future__ import annotations

import collections
import contextlib
import gzip
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence, Union

__all__ = [
    "TraceBuilder",
    "KERNELS",
    "gemm_kernel",
    "nccl_kernel",
    "simple_training",
    "write_ranks",
    "DEFAULT_STREAM",
    "NCCL_STREAM",
]

DEFAULT_STREAM = 7  # the legacy default stream as Kineto reports it
NCCL_STREAM = 20  # where ProcessGroupNCCL's collectives usually run
_CONTEXT_SYNC_STREAM = 4294967295  # Kineto's stream id for cudaDeviceSynchronize

# Kernel names as cuBLAS/cuDNN/PyTorch name them in real traces.
KERNELS: dict[str, str] = {
    "sgemm_volta": "volta_sgemm_128x64_nn",
    "sgemm_ampere": "ampere_sgemm_128x64_nn",
    "hgemm_volta": "volta_fp16_s884gemm_fp16_128x128_ldg8_f2f_nn",
    "hgemm_ampere": "ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_nn",
    "bf16gemm_ampere": "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_32x5_nn",
    "hgemm_sm90": "sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
    "bf16gemm_sm90": "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
    "elementwise": "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)",
    "relu": "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, at::native::detail::ClampLimits)::{lambda()#1}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}, at::detail::Array<char*, 2> >(int, at::native::(anonymous namespace)::launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, at::native::detail::ClampLimits)::{lambda()#1}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}, at::detail::Array<char*, 2>)",
    "reduce": "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4> >(at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4>)",
    "fill": "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)",
    "optimizer": "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<3>, at::native::(anonymous namespace)::BinaryOpListAlphaFunctor<float, 3, 2, 0>, std::plus<float>, float>(at::native::(anonymous namespace)::TensorListMetadata<3>, at::native::(anonymous namespace)::BinaryOpListAlphaFunctor<float, 3, 2, 0>, std::plus<float>, float)",
    "conv_volta": "void cudnn::cnn::wgrad_alg0_engine<float, 128, 6, 7, 3, 3, 5, false, 512>(int, int, int, float const*, int, float*, float const*, kernel_grad_params, unsigned long long, int, float, int, int, int, int)",
}

# CUPTI callback ids, as written in the "cbid" arg (cosmetic, but real).
_CBID = {
    "cudaLaunchKernel": 211,
    "cudaMemcpyAsync": 41,
    "cudaMemcpy": 31,
    "cudaMemsetAsync": 51,
    "cudaStreamSynchronize": 131,
    "cudaDeviceSynchronize": 165,
    "cudaMalloc": 20,
    "cudaFree": 22,
    "cudaEventRecord": 135,
    "cudaStreamWaitEvent": 147,
    "cudaEventSynchronize": 137,
    "cudaEventQuery": 136,
}

_DTYPE_INPUT = {"float": "float", "float32": "float", "half": "c10::Half", "float16": "c10::Half",
                "bfloat16": "c10::BFloat16", "double": "double"}

# Host-side bandwidth of copies by (direction, host memory), bytes per µs (= MB/s).
_COPY_BW = {
    ("HtoD", "Pageable"): 10_000.0,
    ("HtoD", "Pinned"): 24_000.0,
    ("DtoH", "Pageable"): 8_000.0,
    ("DtoH", "Pinned"): 24_000.0,
    ("DtoD", "Device"): 800_000.0,
    ("PtoP", "Device"): 100_000.0,
}

_NCCL_RF = {"AllReduce": "all_reduce", "AllGather": "all_gather", "ReduceScatter": "reduce_scatter",
            "Broadcast": "broadcast", "Reduce": "reduce", "SendRecv": "send", "AllToAll": "all_to_all"}
_NCCL_C10D = {"AllReduce": "c10d::allreduce_", "AllGather": "c10d::allgather_",
              "ReduceScatter": "c10d::reduce_scatter_", "Broadcast": "c10d::broadcast_",
              "Reduce": "c10d::reduce_", "SendRecv": "c10d::send", "AllToAll": "c10d::alltoall_"}

Frame = Union[tuple[str], tuple[str, int], tuple[str, int, str]]


def gemm_kernel(dtype: str, cc: tuple[int, int] | None) -> str:
    """The cuBLAS GEMM kernel a GPU of compute capability ``cc`` runs for ``dtype``.

    FP32 on any GPU is a ``*_sgemm_*`` kernel (no Tensor Cores); FP16/BF16 use
    the Tensor-Core kernels of the GPU's generation (``s884`` Volta,
    ``s16816`` Ampere, ``sm90_xmma`` Hopper)."""
    major = cc[0] if cc else 7
    d = dtype.lower()
    if d in ("half", "float16", "fp16"):
        return KERNELS["hgemm_sm90"] if major >= 9 else KERNELS["hgemm_ampere"] if major >= 8 else KERNELS["hgemm_volta"]
    if d in ("bfloat16", "bf16"):
        return KERNELS["bf16gemm_sm90"] if major >= 9 else KERNELS["bf16gemm_ampere"]
    return KERNELS["sgemm_ampere"] if major >= 8 else KERNELS["sgemm_volta"]


def nccl_kernel(op: str = "AllReduce", dtype: str = "float", modern: bool = False) -> str:
    """An NCCL collective kernel name: ``ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)``
    (NCCL 2.x before 2.19) or, with ``modern``, ``ncclDevKernel_AllReduce_Sum_f32_RING_LL(...)``."""
    if modern:
        short = {"float": "f32", "half": "f16", "bfloat16": "bf16"}.get(dtype, dtype)
        return f"ncclDevKernel_{op}_Sum_{short}_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
    return f"ncclKernel_{op}_RING_LL_Sum_{dtype}(ncclWorkElem)"


def _us(us: float | None, ms: float | None, default: float = 0.0) -> float:
    if us is not None and ms is not None:
        raise ValueError("give us= or ms=, not both")
    if ms is not None:
        return float(ms) * 1000.0
    if us is not None:
        return float(us)
    return default


@dataclass
class _Range:
    """An open host range (operator or annotation) and the GPU span it caused."""

    event: dict[str, Any]
    ext: int
    start: float
    min_us: float = 0.0
    gpu_first: float | None = None
    gpu_last: float | None = None
    gpu_device: int = 0
    gpu_stream: int = DEFAULT_STREAM


@dataclass
class _Thread:
    tid: int
    now: float
    stack: list[_Range] = field(default_factory=list)
    py_stack: list[tuple[str, int]] = field(default_factory=list)  # (frame name, python id)


class TraceBuilder:
    """Build one synthetic trace file (one rank, one host process).

    Parameters:
        device: GPU name for ``deviceProperties``; ``None`` makes a CPU-only
            trace (``deviceProperties: []``, and GPU calls raise ValueError).
        cc: compute capability; total_memory: bytes; num_sms: SM count.
        num_devices: how many GPUs ``deviceProperties`` lists (all the same model).
        dialect: ``"modern"`` or ``"2021"`` (see the module docstring).
        device_properties: write ``deviceProperties`` at all (2021-era and some
            sampled traces have none, although they hold GPU events).
        pid/tid: host process and main-thread ids.
        start_us: timestamp of the first event (µs).
        launch_us: host duration of one launch call (cudaLaunchKernel etc.).
        gap_us: host time between runtime calls (Python/dispatcher overhead).
            ``launch_us + gap_us`` is the launch rate limit of the host: kernels
            shorter than that leave the GPU idle (a launch-bound trace).
        first_step: number of the first ``ProfilerStep#N``.
        rank/world_size/backend: write ``distributedInfo`` when rank is given.
        with_stack/profile_memory/record_shapes: trace header flags
            (``with_stack`` defaults to whether Python frames were written).
        gpu_annotations: mirror user annotations that launched GPU work as
            ``gpu_user_annotation`` events on the GPU (as newer Kineto does).
        hip: write ROCm runtime names (``hipLaunchKernel``...) instead of CUDA ones.
        max_queue: GPU operations a stream may have pending (launched, not
            finished) before the next launch call blocks the host, as CUDA's
            launch queue does (about 1024). Smaller values keep the host at
            most that far ahead of the GPU.
    """

    def __init__(
        self,
        device: str | None = "NVIDIA A100-SXM4-80GB",
        cc: tuple[int, int] | None = (8, 0),
        total_memory: int | None = 80 << 30,
        *,
        num_sms: int = 108,
        num_devices: int = 1,
        dialect: str = "modern",
        device_properties: bool = True,
        pid: int = 4242,
        tid: int | None = None,
        process_name: str = "python3",
        start_us: float = 5_000_000_000.0,
        launch_us: float = 5.0,
        gap_us: float = 2.0,
        first_step: int = 0,
        rank: int | None = None,
        world_size: int | None = None,
        backend: str = "nccl",
        with_stack: bool | None = None,
        profile_memory: bool = False,
        record_shapes: bool = True,
        gpu_annotations: bool = False,
        hip: bool = False,
        base_time_ns: int = 1_700_000_000_000_000_000,
        max_queue: int = 1024,
        stream_gaps_us: Sequence[float] = (),
    ) -> None:
        if dialect not in ("modern", "2021"):
            raise ValueError(f"dialect must be 'modern' or '2021', not {dialect!r}")
        self.device = device
        self.cc = cc
        self.total_memory = total_memory
        self.num_sms = num_sms
        self.num_devices = num_devices if device else 0
        self.dialect = dialect
        self.device_properties = device_properties
        self.pid = pid
        self.main_tid = pid if tid is None else tid
        self.process_name = process_name
        self.start_us = float(start_us)
        self.launch_us = float(launch_us)
        self.gap_us = float(gap_us)
        self.rank = rank
        self.world_size = world_size
        self.backend = backend
        self.with_stack = with_stack
        self.profile_memory = profile_memory
        self.record_shapes = record_shapes
        self.gpu_annotations = gpu_annotations
        self.hip = hip
        self.base_time_ns = base_time_ns
        self.events: list[dict[str, Any]] = []
        self.next_step = first_step
        self._threads: dict[int, _Thread] = {self.main_tid: _Thread(self.main_tid, self.start_us)}
        self._cur = self._threads[self.main_tid]
        self._stream_free: dict[tuple[int, int], float] = {}
        self._pending: dict[tuple[int, int], collections.deque[float]] = {}
        self.max_queue = max_queue
        # queued GPU work starts this long after the previous work of its stream ends (cycled; real GPUs: 1-9 µs)
        self.stream_gaps_us = tuple(float(x) for x in stream_gaps_us)
        self._gap_i = 0
        self._default_stream = DEFAULT_STREAM
        self._default_device = 0
        self._ext = 0
        self._corr = 0
        self._py_id = 0
        self._seq_nr = -1  # autograd sequence numbers (ops made with autograd=True), from 0 as PyTorch counts
        self._ev_idx = 0
        self._py_used = False
        self._mem_alloc: dict[int, int] = {}
        self._mem_reserved: dict[int, int] = {}
        self._mem_addr = 0x7F0000000000

    # ------------------------------------------------------------------ clocks

    @property
    def modern(self) -> bool:
        return self.dialect == "modern"

    @property
    def now(self) -> float:
        """The current thread's host clock (µs)."""
        return self._cur.now

    @now.setter
    def now(self, value: float) -> None:
        self._cur.now = float(value)

    @property
    def tid(self) -> int:
        return self._cur.tid

    def gpu_free_at(self, stream: int | None = None, device: int | None = None) -> float:
        """When the stream finishes the work queued so far (µs); ``start_us`` if idle."""
        key = (self._dev(device), self._stream(stream))
        return self._stream_free.get(key, self.start_us)

    def gpu_idle_at(self, device: int | None = None) -> float:
        """When every stream of ``device`` has drained."""
        dev = self._dev(device)
        return max([t for (d, _), t in self._stream_free.items() if d == dev], default=self.start_us)

    def idle(self, us: float | None = None, ms: float | None = None) -> None:
        """Advance the host clock without any event (Python work the profiler does not see)."""
        self.now += _us(us, ms)

    advance = idle

    @contextlib.contextmanager
    def thread(self, tid: int, join: bool = False) -> Iterator[None]:
        """Emit host events on another thread (autograd, DataParallel replicas).

        The thread's clock starts at the caller's clock (or where it last
        stopped, if later). ``join`` makes the caller wait for the thread."""
        caller = self._cur
        th = self._threads.get(tid)
        if th is None:
            th = self._threads[tid] = _Thread(tid, caller.now)
        else:
            th.now = max(th.now, caller.now)
        self._cur = th
        try:
            yield
        finally:
            self._cur = caller
            if join:
                caller.now = max(caller.now, th.now)

    @contextlib.contextmanager
    def stream(self, stream: int, device: int | None = None) -> Iterator[None]:
        """Launch GPU work on ``stream`` (and ``device``) inside this block."""
        old = self._default_stream, self._default_device
        self._default_stream = stream
        if device is not None:
            self._default_device = device
        try:
            yield
        finally:
            self._default_stream, self._default_device = old

    # ------------------------------------------------------------------ host ranges

    @contextlib.contextmanager
    def op(
        self,
        name: str,
        input_types: Sequence[str] | None = None,
        input_dims: Sequence[Any] | None = None,
        us: float | None = None,
        ms: float | None = None,
        autograd: bool = False,
    ) -> Iterator[None]:
        """An operator (``cpu_op``; ``Operator`` in 2021) around what the block does.

        ``us``/``ms`` is a minimum duration: the host clock is moved to
        ``start + us`` at the end if the block took less. ``autograd=True``
        writes a ``Sequence number`` (and ``Fwd thread id``), as PyTorch does for
        an operator that recorded an autograd node (grad mode on, an input
        requiring grad)."""
        args: dict[str, Any] = {}
        if autograd:
            self._seq_nr += 1
            args["Sequence number"] = self._seq_nr
            args["Fwd thread id"] = 0
        if input_types is not None:
            args["Input type"] = list(input_types)
        if input_dims is not None or (self.record_shapes and input_types is not None):
            args["Input Dims"] = list(input_dims) if input_dims is not None else [[] for _ in input_types or ()]
        with self._range("cpu_op", name, args, _us(us, ms)):
            yield

    @contextlib.contextmanager
    def annotate(self, name: str, us: float | None = None, ms: float | None = None) -> Iterator[None]:
        """A ``record_function`` range (``user_annotation``; ``Operator`` in 2021)."""
        with self._range("user_annotation", name, {}, _us(us, ms)):
            yield

    @contextlib.contextmanager
    def step(self, number: int | None = None, us: float | None = None, ms: float | None = None) -> Iterator[int]:
        """One ``ProfilerStep#N`` on the main thread; yields N (auto-numbered)."""
        n = self.next_step if number is None else number
        self.next_step = n + 1
        with self.annotate(f"ProfilerStep#{n}", us=us, ms=ms):
            yield n

    @contextlib.contextmanager
    def python(self, file: str, line: int | None = None, func: str = "train_step") -> Iterator[None]:
        """A Python frame ``file(line): func`` (``python_function``, with_stack=True).

        With ``line=None`` the frame is named ``file`` verbatim (module frames
        such as ``nn.Module: DataParallel_0``, written with with_modules=True).

        In the 2021 dialect frames are not events: they become the
        ``Call stack`` string of the operators opened inside the block."""
        self._py_used = True
        name = file if line is None else f"{file}({line}): {func}"
        th = self._cur
        self._py_id += 1
        pyid = self._py_id
        ev = None
        if self.modern:
            parent = th.py_stack[-1][1] if th.py_stack else None
            ev = self._host_event("python_function", name, {"Python parent id": parent, "Python id": pyid})
            self.now += 0.5
        th.py_stack.append((name, pyid))
        try:
            yield
        finally:
            th.py_stack.pop()
            self.now += 0.5
            if ev is not None:
                ev["dur"] = self.now - ev["ts"]

    @contextlib.contextmanager
    def frames(self, *frames: Frame) -> Iterator[None]:
        """Several nested Python frames, outermost first: ``frames(("train.py", 80, "main"), ("train.py", 42))``."""
        with contextlib.ExitStack() as stack:
            for fr in frames:
                stack.enter_context(self.python(*fr))
            yield

    def cpu(self, us: float | None = None, ms: float | None = None, name: str = "aten::add") -> None:
        """Plain host work: one operator that launches nothing."""
        with self.op(name, input_types=["float", "float", "Scalar"], us=_us(us, ms, 10.0)):
            pass

    # ------------------------------------------------------------------ runtime + GPU

    def runtime(self, name: str, us: float | None = None, ms: float | None = None) -> dict[str, Any]:
        """A runtime/driver call with no GPU activity (``cudaEventRecord``, ``cudaGetDevice``...)."""
        ev, _ = self._runtime(name, _us(us, ms, self.launch_us))
        self.now += self.gap_us
        return ev

    def kernel(
        self,
        name: str,
        us: float = 10.0,
        *,
        grid: Sequence[int] = (80, 1, 1),
        block: Sequence[int] = (256, 1, 1),
        stream: int | None = None,
        device: int | None = None,
        launch: str = "cudaLaunchKernel",
        launch_us: float | None = None,
        wait_for: Sequence[int] = (),
    ) -> dict[str, Any]:
        """Launch one kernel: ``cudaLaunchKernel`` on the host, ``kernel`` on the GPU.

        Both carry the same correlation id (and the enclosing op's External
        id) and are joined by an ``ac2g`` flow. ``wait_for`` lists streams the
        kernel's stream waits on first (a ``cudaStreamWaitEvent`` dependency).
        Returns the GPU event."""
        dev, st = self._gpu_target(device, stream)
        for _other in wait_for:
            self.runtime("cudaStreamWaitEvent", us=2.0)
        rt, corr = self._runtime(launch, self._queue_wait(dev, st) + (self.launch_us if launch_us is None else launch_us))
        not_before = rt["ts"] + rt["dur"]
        waited = max((self._stream_free.get((dev, other), self.start_us) for other in wait_for), default=not_before)
        if waited > not_before:  # held by another stream: starts after its work (and a queued start's gap)
            not_before = waited + self._next_gap()
        blocks = 1
        for g in grid:
            blocks *= int(g)
        threads = 1
        for b in block:
            threads *= int(b)
        sms = max(self.num_sms, 1)
        extra = {
            "registers per thread": 32,
            "shared memory": 0,
            "blocks per SM": round(blocks / sms, 6),
            "warps per SM": round(blocks * max(threads // 32, 1) / sms, 6),
            "grid": list(grid),
            "block": list(block),
            "est. achieved occupancy %": min(100, max(1, int(blocks * threads / (sms * 2048) * 100))),
        }
        gev = self._gpu("kernel", name, us, dev, st, corr, rt, not_before, extra)
        self.now += self.gap_us
        return gev

    def kernels(self, name: str, n: int, us: float = 5.0, **kw: Any) -> None:
        """``n`` launches of the same kernel (e.g. many tiny elementwise kernels)."""
        for _ in range(n):
            self.kernel(name, us=us, **kw)

    def memcpy(
        self,
        direction: str = "HtoD",
        nbytes: int = 1 << 20,
        *,
        src: str | None = None,
        dst: str | None = None,
        us: float | None = None,
        host_waits: bool | None = None,
        stream: int | None = None,
        device: int | None = None,
        api: str = "cudaMemcpyAsync",
    ) -> dict[str, Any]:
        """One copy: a ``cudaMemcpyAsync`` call and a ``Memcpy <dir> (<src> -> <dst>)`` GPU event.

        ``src``/``dst`` default to a pageable host side. ``host_waits`` (default:
        True for pageable host memory, as CUDA stages pageable copies
        synchronously) makes the runtime call last until the copy ends.
        Returns the GPU event."""
        dev, st = self._gpu_target(device, stream)
        if src is None:
            src = "Pageable" if direction == "HtoD" else "Device"
        if dst is None:
            dst = "Pageable" if direction == "DtoH" else "Device"
        host_side = src if direction == "HtoD" else dst if direction == "DtoH" else "Device"
        if host_waits is None:
            host_waits = host_side == "Pageable"
        bw = _COPY_BW.get((direction, host_side), 10_000.0)
        dur = float(us) if us is not None else max(1.0, nbytes / bw)
        wait = self._queue_wait(dev, st)
        rt, corr = self._runtime(api, wait + self.launch_us)
        not_before = rt["ts"] + wait + min(self.launch_us, 2.0)
        name = f"Memcpy {direction} ({src} -> {dst})"
        gev = self._gpu("gpu_memcpy", name, dur, dev, st, corr, rt, not_before,
                        {"bytes": int(nbytes), "memory bandwidth (GB/s)": round(nbytes / dur / 1000.0, 6)})
        if host_waits:
            end = gev["ts"] + gev["dur"] + 2.0
            rt["dur"] = max(rt["dur"], end - rt["ts"])
            self.now = max(self.now, end)
        self.now += self.gap_us
        return gev

    def memset(self, nbytes: int = 1 << 20, us: float | None = None, stream: int | None = None,
               device: int | None = None) -> dict[str, Any]:
        """``cudaMemsetAsync`` and a ``Memset (Device)`` GPU event."""
        dev, st = self._gpu_target(device, stream)
        rt, corr = self._runtime("cudaMemsetAsync", self._queue_wait(dev, st) + self.launch_us)
        dur = float(us) if us is not None else max(1.0, nbytes / 500_000.0)
        gev = self._gpu("gpu_memset", "Memset (Device)", dur, dev, st, corr, rt, rt["ts"] + rt["dur"],
                        {"bytes": int(nbytes), "memory bandwidth (GB/s)": round(nbytes / dur / 1000.0, 6)})
        self.now += self.gap_us
        return gev

    def stream_synchronize(self, stream: int | None = None, device: int | None = None) -> dict[str, Any]:
        """``cudaStreamSynchronize``: the host waits until ``stream`` drains."""
        dev, st = self._gpu_target(device, stream)
        wait_until = self._stream_free.get((dev, st), self.now)
        return self._sync_call("cudaStreamSynchronize", "Stream Sync", dev, st, wait_until)

    def device_synchronize(self, device: int | None = None) -> dict[str, Any]:
        """``cudaDeviceSynchronize``: the host waits until every stream of the device drains."""
        dev = self._dev(device)
        self._require_gpu()
        return self._sync_call("cudaDeviceSynchronize", "Context Sync", dev, -1, self.gpu_idle_at(dev))

    def cuda_malloc(self, nbytes: int = 1 << 30, us: float = 500.0) -> dict[str, Any]:
        """A ``cudaMalloc`` call (the caching allocator growing its pool)."""
        self._require_gpu()
        return self.runtime("cudaMalloc", us=us)

    def cuda_free(self, us: float = 200.0, device: int | None = None) -> dict[str, Any]:
        """A ``cudaFree`` call; like CUDA it first waits for the whole device to be idle."""
        self._require_gpu()
        start = max(self.now, self.gpu_idle_at(device))
        ev, _ = self._runtime("cudaFree", (start - self.now) + us)
        self.now += self.gap_us
        return ev

    # ------------------------------------------------------------------ composite helpers

    def gemm(self, dtype: str = "float", us: float = 100.0, name: str = "aten::mm", kernel: str | None = None,
             **kw: Any) -> dict[str, Any]:
        """A matmul operator with ``dtype`` inputs and the GEMM kernel this GPU runs for it."""
        t = _DTYPE_INPUT.get(dtype, dtype)
        with self.op(name, input_types=[t, t], input_dims=[[1024, 1024], [1024, 1024]]):
            return self.kernel(kernel or gemm_kernel(dtype, self.cc), us=us, **kw)

    def copy_h2d(self, nbytes: int, pageable: bool = True, blocking: bool = True, us: float | None = None,
                 **kw: Any) -> dict[str, Any]:
        """``tensor.to("cuda")``: ``aten::to`` > ``aten::_to_copy`` > ``aten::copy_`` >
        ``cudaMemcpyAsync`` + ``Memcpy HtoD (Pageable|Pinned -> Device)``; with
        ``blocking`` (``non_blocking=False``) a ``cudaStreamSynchronize`` follows."""
        src = "Pageable" if pageable else "Pinned"
        with self.op("aten::to", input_types=["float", "Scalar", "Scalar", "Scalar", ""]):
            with self.op("aten::_to_copy", input_types=["float", "Scalar", "", "", "", "Scalar", ""]):
                with self.op("aten::empty_strided", us=3.0):
                    pass
                with self.op("aten::copy_", input_types=["float", "float", "Scalar"]):
                    gev = self.memcpy("HtoD", nbytes, src=src, dst="Device", us=us, **kw)
                    if blocking:
                        self.stream_synchronize(stream=kw.get("stream"), device=kw.get("device"))
        return gev

    def copy_d2h(self, nbytes: int, pageable: bool = True, blocking: bool = True, us: float | None = None,
                 **kw: Any) -> dict[str, Any]:
        """``tensor.cpu()``: ``aten::to`` > ... > ``Memcpy DtoH (Device -> Pageable|Pinned)``."""
        dst = "Pageable" if pageable else "Pinned"
        with self.op("aten::to", input_types=["float", "Scalar", "Scalar", "Scalar", ""]):
            with self.op("aten::_to_copy", input_types=["float", "Scalar", "", "", "", "Scalar", ""]):
                with self.op("aten::copy_", input_types=["float", "float", "Scalar"]):
                    gev = self.memcpy("DtoH", nbytes, src="Device", dst=dst, us=us, **kw)
                    if blocking:
                        self.stream_synchronize(stream=kw.get("stream"), device=kw.get("device"))
        return gev

    def sync_op(self, name: str = "aten::item", line: Frame | None = None, nbytes: int = 4,
                kernel: str | None = None, kernel_us: float = 5.0) -> dict[str, Any]:
        """An operator that makes the host wait for the GPU (``.item()``, ``nonzero``...).

        ``aten::item`` gets the real structure ``aten::item`` >
        ``aten::_local_scalar_dense`` > ``cudaMemcpyAsync`` (DtoH, waits for the
        stream) + ``cudaStreamSynchronize``; other names get an optional kernel,
        then the same copy and sync. ``line=("train.py", 42[, "func"])`` wraps it
        in that Python frame. Returns the ``cudaStreamSynchronize`` event."""
        with contextlib.ExitStack() as stack:
            if line is not None:
                stack.enter_context(self.python(*line))
            stack.enter_context(self.op(name, input_types=["float"]))
            if name == "aten::item":
                stack.enter_context(self.op("aten::_local_scalar_dense", input_types=["float"]))
            if kernel is not None:
                self.kernel(kernel, us=kernel_us)
            self.memcpy("DtoH", nbytes, src="Device", dst="Pageable", host_waits=True)
            return self.stream_synchronize()

    def sync_item(self, line: Frame | None = None, nbytes: int = 4) -> dict[str, Any]:
        """``loss.item()``: see :meth:`sync_op`."""
        return self.sync_op("aten::item", line=line, nbytes=nbytes)

    def dataloader(self, ms: float = 1.0, single_process: bool = True, us: float | None = None) -> None:
        """Fetching one batch: ``enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__``
        (``num_workers=0``: the host loads and collates the batch itself, so
        the range holds operators) or ``_MultiProcessingDataLoaderIter`` (the
        host only waits for a worker)."""
        total = _us(us, None if us is not None else ms)
        it = "_SingleProcessDataLoaderIter" if single_process else "_MultiProcessingDataLoaderIter"
        with contextlib.ExitStack() as stack:
            if self._py_used or self.with_stack:
                stack.enter_context(self.python("torch/utils/data/dataloader.py", 631, "__next__"))
            start = self.now
            stack.enter_context(self.annotate(f"enumerate(DataLoader)#{it}.__next__"))
            if single_process and total > 20.0:
                # decoding/augmenting samples, then collate: host operators
                with self.op("aten::to", input_types=["float", "Scalar", "Scalar", "Scalar", ""], us=total * 0.6):
                    pass
                with self.op("aten::stack", input_types=["TensorList", "Scalar"], us=total * 0.3):
                    pass
            self.now = max(self.now, start + total)

    def optimizer(self, ms: float = 1.0, name: str = "SGD", kernels: int = 0, kernel_us: float = 20.0,
                  us: float | None = None) -> None:
        """``Optimizer.step#<name>.step``, launching ``kernels`` multi-tensor kernels."""
        total = _us(us, None if us is not None else ms)
        start = self.now
        with self.annotate(f"Optimizer.step#{name}.step"):
            for _ in range(kernels):
                with self.op("aten::_foreach_add_", input_types=["TensorList", "TensorList", "Scalar"]):
                    self.kernel(KERNELS["optimizer"], us=kernel_us)
            self.now = max(self.now, start + total)

    def zero_grad(self, ms: float = 0.1, name: str = "SGD") -> None:
        """``Optimizer.zero_grad#<name>.zero_grad`` (host only: set_to_none)."""
        with self.annotate(f"Optimizer.zero_grad#{name}.zero_grad", ms=ms):
            pass

    def memory(self, alloc: int = 0, free: int = 0, device: int | None = None,
               total_allocated: int | None = None, total_reserved: int | None = None) -> list[dict[str, Any]]:
        """``[memory]`` instant events (profile_memory=True): one per alloc/free.

        ``device=-1`` is host memory (Device Type 0); otherwise a CUDA device
        (Device Type 1). Running Total Allocated/Reserved are kept per device
        (reserved grows in 2 MiB blocks and never shrinks) unless given.
        The 2021 dialect writes only Bytes/Device Type/Device Id, as it did."""
        self.profile_memory = True
        dev = self._default_device if device is None else device
        out = []
        for nbytes in ([alloc] if alloc else []) + ([-free] if free else []):
            cur = self._mem_alloc.get(dev, 0) + nbytes
            self._mem_alloc[dev] = cur
            res = max(self._mem_reserved.get(dev, 0), -(-cur // (2 << 20)) * (2 << 20))
            self._mem_reserved[dev] = res
            self._mem_addr += 1 << 21
            args: dict[str, Any] = {"Device Type": 0 if dev < 0 else 1, "Device Id": dev, "Bytes": int(nbytes)}
            if self.modern:
                args["Addr"] = self._mem_addr
                args["Total Allocated"] = int(total_allocated if total_allocated is not None else cur)
                args["Total Reserved"] = int(total_reserved if total_reserved is not None else res)
                args["Ev Idx"] = self._next_ev_idx()
            ev: dict[str, Any] = {"ph": "i", "s": "t", "name": "[memory]", "pid": self.pid, "tid": self.tid,
                                  "ts": self.now, "args": args}
            if self.modern:
                ev["cat"] = "cpu_instant_event"
            self.events.append(ev)
            self.now += 0.2
            out.append(ev)
        return out

    def nccl(self, op: str = "AllReduce", nbytes: int = 100 << 20, us: float = 1000.0, dtype: str = "float",
             stream: int = NCCL_STREAM, kernel_name: str | None = None, wait_for_compute: bool = True) -> dict[str, Any]:
        """A collective: ``nccl:all_reduce`` annotation > ``c10d::allreduce_`` >
        ``record_param_comms`` > an NCCL kernel on the NCCL stream (waiting
        for the compute stream first, as ProcessGroupNCCL does)."""
        self._require_gpu()
        rf = _NCCL_RF.get(op, op.lower())
        t = _DTYPE_INPUT.get(dtype, dtype)
        with self.annotate(f"nccl:{rf}"):
            with self.op(_NCCL_C10D.get(op, f"c10d::{rf}_"), input_types=["TensorList", "", "", "Int"]):
                with self.op("record_param_comms", input_types=[t]):
                    return self.kernel(kernel_name or nccl_kernel(op, dtype), us=us, stream=stream,
                                       wait_for=(self._default_stream,) if wait_for_compute else (),
                                       grid=(self.world_size or 2, 1, 1), block=(640, 1, 1))

    def data_parallel(self, devices: int = 2, kernel: str | None = None, kernel_us: float = 500.0,
                      param_bytes: int = 100 << 20, batch_bytes: int = 16 << 20) -> None:
        """One ``nn.DataParallel`` forward: scatter the batch, replicate (broadcast)
        the parameters to every GPU, run the replicas in threads, gather.

        Written as it appears with with_stack: ``nn.Module: DataParallel_0``
        and ``torch/nn/parallel/...`` Python frames, a ``DataParallel.forward``
        annotation, PtoP/DtoD copies and one kernel per device."""
        self._require_gpu()
        if devices > self.num_devices:
            self.num_devices = devices
        kname = kernel or gemm_kernel("float", self.cc)
        with self.frames(("torch/nn/modules/module.py", 1501, "_call_impl"), ("nn.Module: DataParallel_0",)):
            with self.python("torch/nn/parallel/data_parallel.py", 171, "forward"):
                with self.annotate("DataParallel.forward"):
                    with self.python("torch/nn/parallel/data_parallel.py", 188, "scatter"):
                        with self.python("torch/nn/parallel/scatter_gather.py", 72, "scatter_kwargs"):
                            with self.op("Scatter"):
                                for d in range(1, devices):
                                    self.memcpy("PtoP", batch_bytes // devices, src="Device", dst="Device",
                                                device=d)
                    with self.python("torch/nn/parallel/data_parallel.py", 185, "replicate"):
                        with self.python("torch/nn/parallel/replicate.py", 110, "replicate"):
                            with self.op("Broadcast"):
                                with self.python("torch/nn/parallel/comm.py", 57, "broadcast_coalesced"):
                                    with self.op("aten::_broadcast_coalesced"):
                                        for d in range(1, devices):
                                            self.memcpy("PtoP", param_bytes, src="Device", dst="Device",
                                                        device=d)
                    with self.python("torch/nn/parallel/parallel_apply.py", 110, "parallel_apply"):
                        for d in range(devices):
                            with self.thread(self.main_tid + 1000 + d, join=True):
                                with self.python("torch/nn/parallel/parallel_apply.py", 83, "_worker"):
                                    with self.op("aten::linear", input_types=["float", "float", "float"]):
                                        self.kernel(kname, us=kernel_us, device=d)
                    with self.python("torch/nn/parallel/data_parallel.py", 203, "gather"):
                        with self.op("Gather"):
                            for _d in range(1, devices):
                                self.memcpy("PtoP", batch_bytes // 64, src="Device", dst="Device", device=0)

    # ------------------------------------------------------------------ output

    def to_dict(self, spans: bool = True) -> dict[str, Any]:
        """The trace as the JSON object Kineto writes (times rounded like Kineto)."""
        modern = self.modern
        events = [self._finish(e, modern) for e in self.events]
        end = max((e["ts"] + e.get("dur", 0) for e in events), default=self.start_us)
        start = self._round(self.start_us - 10.0, modern)
        meta = self._metadata_events(start)
        if spans:
            events.append({"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans",
                           "tid": "PyTorch Profiler", "ts": start, "dur": self._round(end - start + 5.0, modern),
                           "args": {"Op count": 0}})
            events.append({"ph": "i", "s": "g", "name": "Iteration Start: PyTorch Profiler", "pid": "Traces",
                           "tid": "Trace PyTorch Profiler", "ts": start})
        top: dict[str, Any] = {"schemaVersion": 1}
        if self.device_properties:
            top["deviceProperties"] = [self._device_props(i) for i in range(self.num_devices)]
        if modern:
            if self.rank is not None:
                top["distributedInfo"] = {"backend": self.backend, "rank": self.rank,
                                          "world_size": self.world_size or 1}
            top["with_stack"] = int(self.with_stack if self.with_stack is not None else self._py_used)
            top["profile_memory"] = int(self.profile_memory)
            top["record_shapes"] = int(self.record_shapes)
            top["displayTimeUnit"] = "ms"
            top["baseTimeNanoseconds"] = self.base_time_ns
        top["traceEvents"] = meta + events
        if modern:
            top["traceName"] = "synthetic.pt.trace.json"  # Kineto writes this after the events
        return top

    def to_bytes(self, compact: bool = False) -> bytes:
        """The JSON text: Kineto's layout (one event per line) or ``compact`` (one line)."""
        top = self.to_dict()
        if compact:
            return json.dumps(top, separators=(",", ":")).encode()
        parts = ["{"]
        keys = list(top)
        for i, k in enumerate(keys):
            comma = "," if i < len(keys) - 1 else ""
            if k == "traceEvents":
                parts.append('  "traceEvents": [')
                evs = top[k]
                parts.append(",\n".join("  " + json.dumps(e) for e in evs))
                parts.append("  ]" + comma)
            else:
                parts.append(f"  {json.dumps(k)}: {json.dumps(top[k])}{comma}")
        parts.append("}")
        return ("\n".join(parts) + "\n").encode()

    def write(self, path: Union[str, os.PathLike[str]], compact: bool = False) -> Path:
        """Write the trace; ``.gz`` names are gzip-compressed. Returns the path."""
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        data = self.to_bytes(compact=compact)
        if p.name.endswith(".gz"):
            with gzip.open(p, "wb") as fh:
                fh.write(data)
        else:
            p.write_bytes(data)
        return p

    # ------------------------------------------------------------------ internals

    def _require_gpu(self) -> None:
        if not self.device:
            raise ValueError("this TraceBuilder is CPU-only (device=None): it cannot record GPU work")

    def _dev(self, device: int | None) -> int:
        return self._default_device if device is None else device

    def _stream(self, stream: int | None) -> int:
        return self._default_stream if stream is None else stream

    def _gpu_target(self, device: int | None, stream: int | None) -> tuple[int, int]:
        self._require_gpu()
        dev = self._dev(device)
        if dev >= self.num_devices:
            self.num_devices = dev + 1
        return dev, self._stream(stream)

    def _next_ev_idx(self) -> int:
        self._ev_idx += 1
        return self._ev_idx - 1

    def _host_event(self, cat: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
        ev = {"ph": "X", "cat": cat, "name": name, "pid": self.pid, "tid": self.tid, "ts": self.now, "dur": 0.0,
              "args": args}
        if self.modern:
            args["Ev Idx"] = self._next_ev_idx()
        self.events.append(ev)
        return ev

    @contextlib.contextmanager
    def _range(self, cat: str, name: str, args: dict[str, Any], min_us: float) -> Iterator[None]:
        th = self._cur
        self._ext += 1
        ext = self._ext
        a: dict[str, Any] = {"External id": ext}
        if self.modern and cat == "user_annotation":
            a["Record function id"] = 0
        a.update(args)
        if not self.modern:
            cat = "Operator"  # 2021: record_function ranges were operators too
            a["Trace name"] = "PyTorch Profiler"
            a["Trace iteration"] = 0
            if th.py_stack:
                a["Call stack"] = ";".join(f for f, _ in reversed(th.py_stack))
        ev = self._host_event(cat, name, a)
        rng = _Range(ev, ext, self.now, min_us)
        th.stack.append(rng)
        self.now += 0.5  # dispatcher overhead: children start strictly inside
        try:
            yield
        finally:
            self.now = max(self.now + 0.5, rng.start + min_us)
            th.stack.pop()
            ev["dur"] = self.now - ev["ts"]
            if self.gpu_annotations and self.modern and cat == "user_annotation" and rng.gpu_first is not None:
                assert rng.gpu_last is not None
                self.events.append({
                    "ph": "X", "cat": "gpu_user_annotation", "name": name, "pid": rng.gpu_device,
                    "tid": rng.gpu_stream, "ts": rng.gpu_first, "dur": rng.gpu_last - rng.gpu_first,
                    "args": {"External id": ext},
                })
            self.now += 0.2

    def _runtime(self, name: str, dur: float) -> tuple[dict[str, Any], int]:
        if self.hip and name.startswith("cuda"):
            name = "hip" + name[4:]
        self._corr += 1
        corr = self._corr
        th = self._cur
        ext = th.stack[-1].ext if th.stack else None
        if self.modern:
            args: dict[str, Any] = {}
            if ext is not None:
                args["External id"] = ext
            args["cbid"] = _CBID.get(name, 0)
            args["correlation"] = corr
            cat = "cuda_runtime"
        else:
            args = {"cbid": _CBID.get(name, 0), "correlation": corr, "external id": ext or 0,
                    "external ts": th.stack[-1].start if th.stack else self.now}
            cat = "Runtime"
        ev = {"ph": "X", "cat": cat, "name": name, "pid": self.pid, "tid": self.tid, "ts": self.now, "dur": dur,
              "args": args}
        self.events.append(ev)
        self.now += dur
        return ev, corr

    def _next_gap(self) -> float:
        """How long after the work it was queued behind the next queued GPU event starts (``stream_gaps_us``)."""
        if not self.stream_gaps_us:
            return 0.0
        self._gap_i += 1
        return self.stream_gaps_us[(self._gap_i - 1) % len(self.stream_gaps_us)]

    def _queue_wait(self, dev: int, stream: int) -> float:
        """How long a launch at ``now`` blocks because the stream's queue is full."""
        q = self._pending.get((dev, stream))
        if not q:
            return 0.0
        now = self.now
        while q and q[0] <= now:
            q.popleft()
        if len(q) < self.max_queue:
            return 0.0
        return q[len(q) - self.max_queue] - now

    def _gpu(self, cat: str, name: str, dur: float, dev: int, stream: int, corr: int, rt: dict[str, Any],
             not_before: float, extra: dict[str, Any]) -> dict[str, Any]:
        key = (dev, stream)
        free = self._stream_free.get(key, self.start_us)
        if free > not_before:  # queued behind the stream's work
            free += self._next_gap()
        start = max(not_before, free)
        dur = max(float(dur), 0.0)
        self._stream_free[key] = start + dur
        self._pending.setdefault(key, collections.deque()).append(start + dur)
        th = self._cur
        ext = th.stack[-1].ext if th.stack else None
        modern = self.modern
        args: dict[str, Any] = {}
        if modern and ext is not None:
            args["External id"] = ext
        if cat == "kernel":
            args["queued"] = 0
        args.update({"device": dev, "context": 1, "stream": stream, "correlation": corr})
        if not modern:
            args["external id"] = ext or 0
        args.update(extra)
        if not modern:
            cat = {"kernel": "Kernel", "gpu_memcpy": "Memcpy", "gpu_memset": "Memset"}[cat]
        ev = {"ph": "X", "cat": cat, "name": name, "pid": dev, "tid": stream if modern else f"stream {stream}",
              "ts": start, "dur": dur, "args": args}
        self.events.append(ev)
        flow_cat, flow_name = ("ac2g", "ac2g") if modern else ("async", "launch")
        self.events.append({"ph": "s", "id": corr, "pid": self.pid, "tid": self.tid, "ts": rt["ts"],
                            "cat": flow_cat, "name": flow_name})
        self.events.append({"ph": "f", "id": corr, "pid": dev, "tid": ev["tid"], "ts": start,
                            "cat": flow_cat, "name": flow_name, "bp": "e"})
        for rng in th.stack:
            if rng.gpu_first is None:
                rng.gpu_first, rng.gpu_device, rng.gpu_stream = start, dev, stream
            rng.gpu_last = max(rng.gpu_last or start, start + dur)
        return ev

    def _sync_call(self, name: str, kind: str, dev: int, stream: int, wait_until: float) -> dict[str, Any]:
        dur = max(wait_until - self.now, 0.0) + 2.0
        rt, corr = self._runtime(name, dur)
        if self.modern:
            ext = self._cur.stack[-1].ext if self._cur.stack else None
            args: dict[str, Any] = {}
            if ext is not None:
                args["External id"] = ext
            args.update({"cuda_sync_kind": kind, "stream": stream if stream >= 0 else _CONTEXT_SYNC_STREAM,
                         "correlation": corr, "device": dev, "context": 1})
            self.events.append({"ph": "X", "cat": "cuda_sync", "name": kind, "pid": dev, "tid": stream,
                                "ts": rt["ts"] + 1.0, "dur": max(dur - 1.0, 0.0), "args": args})
        self.now += self.gap_us
        return rt

    def _device_props(self, i: int) -> dict[str, Any]:
        major, minor = self.cc if self.cc else (None, None)
        return {
            "id": i, "name": self.device, "totalGlobalMem": self.total_memory, "computeMajor": major,
            "computeMinor": minor, "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048,
            "regsPerBlock": 65536, "regsPerMultiprocessor": 65536, "warpSize": 32, "sharedMemPerBlock": 49152,
            "sharedMemPerMultiprocessor": 167936, "numSms": self.num_sms, "sharedMemPerBlockOptin": 166912,
        }

    def _metadata_events(self, ts: float) -> list[dict[str, Any]]:
        modern = self.modern
        out: list[dict[str, Any]] = []

        def m(name: str, pid: Any, tid: Any, args: dict[str, Any]) -> None:
            out.append({"name": name, "ph": "M", "ts": ts, "pid": pid, "tid": tid, "args": args})

        m("process_name", self.pid, 0, {"name": self.process_name})
        m("process_labels", self.pid, 0, {"labels": "CPU"})
        if modern:
            m("process_sort_index", self.pid, 0, {"sort_index": self.pid})
        for d in range(self.num_devices):
            m("process_name", d, 0, {"name": self.process_name})
            m("process_labels", d, 0, {"labels": f"GPU {d}"})
            if modern:
                m("process_sort_index", d, 0, {"sort_index": 16777216 + d})
        for (d, s) in sorted(self._stream_free):
            m("thread_name", d, s if modern else f"stream {s}", {"name": f"stream {s} "})
            if modern:
                m("thread_sort_index", d, s, {"sort_index": s})
        for tid in self._threads:
            t = tid if modern else str(tid)
            m("thread_name", self.pid, t, {"name": f"thread {tid} ({self.process_name})"})
            if modern:
                m("thread_sort_index", self.pid, t, {"sort_index": tid})
        return out

    @staticmethod
    def _round(x: float, modern: bool) -> float | int:
        return round(x, 3) if modern else int(round(x))

    def _finish(self, e: dict[str, Any], modern: bool) -> dict[str, Any]:
        e = dict(e)
        if "args" in e:
            e["args"] = dict(e["args"])
        ts = e["ts"]
        e["ts"] = self._round(ts, modern)
        if "dur" in e:
            # round the end, not the duration, so nesting survives rounding
            end = self._round(ts + e["dur"], modern)
            e["dur"] = max(self._round(end - e["ts"], modern), 0)
        if not modern and e.get("ph") == "X" and e.get("cat") in ("Operator", "Runtime"):
            e["tid"] = str(e["tid"])
        if not modern and "external ts" in e.get("args", {}):
            e["args"]["external ts"] = self._round(e["args"]["external ts"], modern)
        return e


# ---------------------------------------------------------------------- ready-made traces


def simple_training(
    tb: TraceBuilder,
    steps: int = 5,
    *,
    warmup_steps: int = 0,
    warmup_factor: float = 4.0,
    layers: int = 8,
    kernel_us: float = 400.0,
    batch_bytes: int = 8 << 20,
    dtype: str = "float",
    data_ms: float = 0.2,
    max_queue: int | None = None,
) -> TraceBuilder:
    """A healthy training loop (the "good" baseline most rule tests start from).

    Per step: a DataLoader fetch from worker processes, a pinned
    non-blocking batch copy, ``layers`` GEMM forward and 2x ``layers``
    backward kernels (the host runs ahead of the GPU, which stays busy), an
    optimizer step. The first ``warmup_steps`` are ``warmup_factor`` slower
    (cudaMalloc calls and longer kernels, as cuDNN benchmarking and the
    caching allocator's growth make them).

    The host is kept at most about one step ahead of the GPU (``max_queue``
    defaults to one step's launches), so each step lasts as long as its GPU
    work, as in a real GPU-bound loop once CUDA's launch queue is full."""
    saved = tb.max_queue
    tb.max_queue = max_queue if max_queue is not None else 3 * layers + 6
    try:
        _simple_steps(tb, steps, warmup_steps, warmup_factor, layers, kernel_us, batch_bytes, dtype, data_ms)
    finally:
        tb.max_queue = saved
    return tb


def _simple_steps(tb: TraceBuilder, steps: int, warmup_steps: int, warmup_factor: float, layers: int,
                  kernel_us: float, batch_bytes: int, dtype: str, data_ms: float) -> None:
    for i in range(steps):
        slow = warmup_factor if i < warmup_steps else 1.0
        with tb.step():
            tb.dataloader(ms=data_ms, single_process=False)
            if slow > 1.0 and tb.device:
                tb.cuda_malloc(us=200.0 * slow)
            if tb.device:
                tb.copy_h2d(batch_bytes, pageable=False, blocking=False)
                with tb.annotate("## forward ##"):
                    for _ in range(layers):
                        tb.gemm(dtype, us=kernel_us * slow, name="aten::linear")
                with tb.annotate("## backward ##"):
                    for _ in range(layers):
                        tb.gemm(dtype, us=kernel_us * slow, name="aten::mm")
                        tb.gemm(dtype, us=kernel_us * slow, name="aten::mm")
                tb.optimizer(ms=0.2, kernels=2, kernel_us=kernel_us / 4)
            else:
                tb.cpu(us=kernel_us * layers * 3 * slow, name="aten::mm")
                tb.optimizer(ms=0.2)
            if tb.profile_memory:
                tb.memory(alloc=batch_bytes)
                tb.memory(free=batch_bytes)
            if slow > 1.0 and tb.device:
                tb.device_synchronize()  # cudnn.benchmark autotuning synchronises


def write_ranks(
    directory: Union[str, os.PathLike[str]],
    world_size: int,
    body: Callable[[TraceBuilder, int], Any],
    *,
    suffix: str = ".pt.trace.json",
    **builder_kwargs: Any,
) -> list[Path]:
    """A multi-rank job: one trace per rank in ``directory``
    (``rank<R>.pt.trace.json``), each with ``distributedInfo``; ``body(tb, rank)``
    fills each rank's builder. Returns the paths, by rank."""
    out = []
    for r in range(world_size):
        kw = dict(builder_kwargs)
        kw.setdefault("pid", 1000 + r)
        tb = TraceBuilder(rank=r, world_size=world_size, **kw)
        body(tb, r)
        out.append(tb.write(Path(directory) / f"rank{r}{suffix}"))
    return out

"""Global PyTorch settings that slow training down (GP620-GP624).

The checks are plain functions of facts (so they are testable without a
GPU); :func:`read_settings` gathers those facts from torch.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpuprof.findings import Evidence, Finding, Severity
from gpuprof.runtimecodes import runtime_check

if TYPE_CHECKING:  # pragma: no cover - annotations only
    from gpuprof.trace.model import Trace

__all__ = ["TorchSettings", "read_settings", "cudnn_benchmark_finding", "tf32_finding", "anomaly_finding",
           "launch_blocking_finding", "deterministic_finding", "LAUNCH_CALLS"]

# the runtime calls that launch a kernel (CUDA and ROCm): with CUDA_LAUNCH_BLOCKING=1 each lasts as long as its kernel
LAUNCH_CALLS = frozenset(("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx",
                          "cudaLaunchCooperativeKernel", "hipLaunchKernel", "hipExtLaunchKernel",
                          "hipModuleLaunchKernel"))


@dataclass(frozen=True)
class TorchSettings:
    """The settings the checks read, as found at the first step."""

    cuda: bool
    capability: tuple[int, int] | None
    device_name: str
    cudnn_benchmark: bool
    tf32_matmul: bool  # FP32 matmuls may use TF32 tensor cores
    matmul_precision: str  # torch.get_float32_matmul_precision()
    launch_blocking: bool = False  # CUDA_LAUNCH_BLOCKING=1 in the environment (GP623)
    deterministic: bool = False  # torch.use_deterministic_algorithms(True) (GP624)
    deterministic_warn_only: bool = False  # ... with warn_only=True
    cudnn_deterministic: bool = False  # torch.backends.cudnn.deterministic


def read_settings() -> TorchSettings:
    import torch

    cuda = bool(torch.cuda.is_available() and torch.cuda.is_initialized())  # type: ignore[no-untyped-call]
    cap: tuple[int, int] | None = None
    name = ""
    if cuda:
        major, minor = torch.cuda.get_device_capability()
        cap = (major, minor)
        name = torch.cuda.get_device_name()
    precision = torch.get_float32_matmul_precision()
    tf32 = precision != "highest" or bool(getattr(torch.backends.cuda.matmul, "allow_tf32", False))
    return TorchSettings(
        cuda=cuda,
        capability=cap,
        device_name=name,
        cudnn_benchmark=bool(torch.backends.cudnn.benchmark),
        tf32_matmul=tf32,
        matmul_precision=precision,
        launch_blocking=os.environ.get("CUDA_LAUNCH_BLOCKING", "").strip() == "1",  # the CUDA runtime reads "1"
        deterministic=bool(torch.are_deterministic_algorithms_enabled()),
        deterministic_warn_only=bool(torch.is_deterministic_algorithms_warn_only_enabled()),
        cudnn_deterministic=bool(torch.backends.cudnn.deterministic),
    )


def cudnn_benchmark_finding(s: TorchSettings, has_conv: bool, shapes_stable: bool | None) -> Finding | None:
    """GP620: on CUDA, convolutions ran with stable input shapes and cudnn.benchmark off."""
    if not (s.cuda and has_conv and shapes_stable and not s.cudnn_benchmark):
        return None
    c = runtime_check("GP620")
    return Finding(
        code=c.code, name=c.name, severity=c.severity,
        message="torch.backends.cudnn.benchmark is False while the model runs convolutions on inputs of one "
                "shape: cuDNN uses its default algorithm instead of timing the fastest one",
        advice="Set torch.backends.cudnn.benchmark = True before training (the first steps are slower while "
               "cuDNN times candidates; leave it off when input shapes change every step).",
        evidence=(Evidence("cudnn.benchmark", "False", None, "", extra={"convolutions": True,
                                                                         "stable_shapes": True}),),
        origin="runtime",
    )


def tf32_finding(s: TorchSettings, fp32_matmuls: int) -> Finding | None:
    """GP621: FP32 matmuls on compute capability >= 8.0 with TF32 disabled."""
    if not (s.cuda and s.capability and s.capability >= (8, 0) and fp32_matmuls > 0 and not s.tf32_matmul):
        return None
    c = runtime_check("GP621")
    return Finding(
        code=c.code, name=c.name, severity=c.severity,
        message=f"{fp32_matmuls} FP32 matmul ops per trace ran on {s.device_name or 'the GPU'} "
                f"(compute capability {s.capability[0]}.{s.capability[1]}) with TF32 disabled "
                f"(float32 matmul precision '{s.matmul_precision}'): tensor cores stay unused",
        advice="torch.set_float32_matmul_precision('high') (TF32, ~10 bits of mantissa, fine for training), "
               "or use torch.autocast(device_type='cuda', dtype=torch.bfloat16).",
        evidence=(Evidence("fp32_matmuls", fp32_matmuls, 0, "ops",
                           extra={"capability": list(s.capability), "precision": s.matmul_precision}),),
        origin="runtime",
    )


def anomaly_finding(enabled_steps: int, checked_steps: int) -> Finding | None:
    """GP622: autograd anomaly detection on during training steps."""
    if enabled_steps <= 0:
        return None
    c = runtime_check("GP622")
    return Finding(
        code=c.code, name=c.name, severity=c.severity,
        message=f"autograd anomaly detection was on in {enabled_steps} of {checked_steps} checked steps: "
                "every backward op records a Python stack and checks its outputs for NaN",
        advice="Remove torch.autograd.set_detect_anomaly(True) / detect_anomaly() from training runs; turn it "
               "on only to locate a NaN.",
        evidence=(Evidence("anomaly_steps", enabled_steps, 0, "steps", extra={"checked_steps": checked_steps}),),
        origin="runtime",
    )


def launch_blocking_finding(s: TorchSettings, launch_us: float | None = None, launches: int = 0,
                            steps: int = 0, step_us: float | None = None) -> Finding | None:
    """GP623: CUDA_LAUNCH_BLOCKING=1 in the environment.

    A warning when the run uses CUDA, with the host time spent inside kernel
    launches per recorded step when a trace measured it (``launch_us`` over
    ``steps``); info on a run without CUDA (it changes nothing there, but the
    same script on a GPU would pay it).
    """
    if not s.launch_blocking:
        return None
    c = runtime_check("GP623")
    advice = ("Unset CUDA_LAUNCH_BLOCKING for training and profiling (it is a debugging switch: it makes an "
              "asynchronous CUDA error point at the line that launched the failing kernel); profile without it.")
    if not s.cuda:
        return Finding(
            code=c.code, name=c.name, severity=Severity.INFO,
            message="CUDA_LAUNCH_BLOCKING=1 is set; this run does not use CUDA, so it costs nothing here, but on "
                    "a GPU every kernel launch would wait until its kernel has finished",
            advice=advice, evidence=(Evidence("CUDA_LAUNCH_BLOCKING", "1", None, "", extra={"cuda": False}),),
            origin="runtime")
    measured = ""
    extra: dict[str, object] = {"cuda": True}
    if launch_us is not None and launches and steps:
        per_step = launch_us / steps
        share = f", {per_step / step_us:.0%} of the mean step" if step_us else ""
        measured = (f"; the host waited {per_step / 1000:.2f} ms per recorded step inside {launches // steps} "
                    f"kernel launches{share} (an upper bound of the time lost: part of it would overlap the GPU's work)")
        extra.update(launch_us_per_step=round(per_step, 1), launches_per_step=launches // steps)
    return Finding(
        code=c.code, name=c.name, severity=c.severity,
        message="CUDA_LAUNCH_BLOCKING=1 is set: every kernel launch blocks the host until the kernel has "
                "finished, so Python can never queue work ahead of the GPU (no overlap of the host's work with "
                "the kernels, the GPU idles between them)" + measured,
        advice=advice, evidence=(Evidence("CUDA_LAUNCH_BLOCKING", "1", None, "", extra=extra),),
        origin="runtime")


def deterministic_finding(s: TorchSettings) -> Finding | None:
    """GP624: deterministic algorithms forced; a warning on CUDA, info without CUDA (CPU kernels are
    nearly all deterministic already)."""
    names = ([f"torch.use_deterministic_algorithms(True{', warn_only=True' if s.deterministic_warn_only else ''})"]
             if s.deterministic else []) + (["torch.backends.cudnn.deterministic = True"]
                                            if s.cudnn_deterministic else [])
    if not names:
        return None
    c = runtime_check("GP624")
    why = []
    if s.cudnn_deterministic or s.deterministic:
        why.append("cuDNN may only use deterministic convolution algorithms, often slower ones (cudnn.benchmark "
                   "can no longer pick the fastest)")
    if s.deterministic:
        why.append("ops without a deterministic CUDA kernel take slower paths (index_add_, scatter_add_, "
                   "index_put_ with accumulate) or raise, cuBLAS needs CUBLAS_WORKSPACE_CONFIG, and every "
                   "torch.empty is filled with NaN (torch.utils.deterministic.fill_uninitialized_memory)")
    where = ("" if s.cuda else "; this run does not use CUDA: on the CPU it changes little (CPU kernels are "
                               "nearly all deterministic already; the NaN fill of new tensors remains), on a GPU "
                               "it costs speed")
    return Finding(
        code=c.code, name=c.name, severity=c.severity if s.cuda else Severity.INFO,
        message=f"deterministic algorithms are forced ({', '.join(names)}): " + "; ".join(why) + where
                + ". The cost is not measured (it needs a run without it)",
        advice="Turn it off for speed runs: torch.use_deterministic_algorithms(False), "
               "torch.backends.cudnn.deterministic = False (and torch.backends.cudnn.benchmark = True for fixed "
               "input shapes); keep deterministic mode for the runs that must be bit-reproducible.",
        evidence=(Evidence("deterministic", ", ".join(names), None, "",
                           extra={"use_deterministic_algorithms": s.deterministic,
                                  "warn_only": s.deterministic_warn_only,
                                  "cudnn_deterministic": s.cudnn_deterministic, "cuda": s.cuda}),),
        origin="runtime")


def trace_op_facts(traces: Sequence[Trace | str | os.PathLike[str]]) -> dict[str, int | bool]:
    """Facts the settings checks need from the captured traces (loaded :class:`~gpuprof.trace.model.Trace`
    objects, or paths to load; no torch)."""
    from gpuprof.trace.load import load_trace
    from gpuprof.trace.model import DTYPE_FLOAT, DTYPE_HALF, op_dtypes

    has_conv = False
    fp32_mm = 0
    launch_ns = 0
    launches = 0
    for item in traces:
        trace = load_trace(item) if isinstance(item, (str, os.PathLike)) else item
        for rt in trace.runtime:
            if rt.name in LAUNCH_CALLS:
                launches += 1
                launch_ns += round(rt.dur * 1000)
        for op in trace.ops:
            name = op.name
            if "conv" in name and name.startswith("aten::"):
                has_conv = True
            if name in ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear"):
                flags = op_dtypes(op)  # also for ops that carry a Call stack (the payload is then a tuple)
                if flags & DTYPE_FLOAT and not flags & DTYPE_HALF:
                    fp32_mm += 1
    return {"has_conv": has_conv, "fp32_matmuls": fp32_mm, "launches": launches, "launch_ns": launch_ns}

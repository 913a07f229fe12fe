"""Global PyTorch settings that slow training down (GP620-GP622).

The checks are plain functions of facts (so they are testable without a
GPU); :func:`read_settings` gathers those facts from torch.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpuprof.capture.codes import runtime_check
from gpuprof.findings import Evidence, Finding

if TYPE_CHECKING:  # pragma: no cover - annotations only
    from gpuprof.trace.model import Trace

__all__ = ["TorchSettings", "read_settings", "cudnn_benchmark_finding", "tf32_finding", "anomaly_finding"]


@dataclass(frozen=True)
class TorchSettings:
    """The settings the checks read, as found at the first step."""

    cuda: bool
    capability: tuple[int, int] | None
    device_name: str
    cudnn_benchmark: bool
    tf32_matmul: bool  # FP32 matmuls may use TF32 tensor cores
    matmul_precision: str  # torch.get_float32_matmul_precision()


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


def trace_op_facts(traces: Sequence[Trace | str | os.PathLike[str]]) -> dict[str, int | bool]:
    """Facts the settings checks need from the captured traces (loaded :class:`~gpuprof.trace.model.Trace`
    objects, or paths to load; no torch)."""
    from gpuprof.trace.load import load_trace
    from gpuprof.trace.model import DTYPE_FLOAT, DTYPE_HALF, op_dtypes

    has_conv = False
    fp32_mm = 0
    for item in traces:
        trace = load_trace(item) if isinstance(item, (str, os.PathLike)) else item
        for op in trace.ops:
            name = op.name
            if "conv" in name and name.startswith("aten::"):
                has_conv = True
            if name in ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear"):
                flags = op_dtypes(op)  # also for ops that carry a Call stack (the payload is then a tuple)
                if flags & DTYPE_FLOAT and not flags & DTYPE_HALF:
                    fp32_mm += 1
    return {"has_conv": has_conv, "fp32_matmuls": fp32_mm}

"""The runtime checks done during capture (GP6xx, and GP71x for distributed runs), as data.

This module imports no torch, so ``gpuprof rules`` / ``gpuprof explain`` can
list the runtime checks next to the trace rules. Each check is documented in
``docs/capture.md``; the code that produces it names the module below.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuprof.findings import Severity

__all__ = ["RuntimeCheck", "RUNTIME_CHECKS", "runtime_check"]


@dataclass(frozen=True)
class RuntimeCheck:
    """One GP6xx code: its slug, default severity and a one-line summary."""

    code: str
    name: str
    severity: Severity
    title: str
    module: str  # the gpuprof.capture module that raises it


RUNTIME_CHECKS: tuple[RuntimeCheck, ...] = (
    RuntimeCheck("GP601", "dataloader-main-process", Severity.WARNING,
                 "DataLoader with num_workers=0 loads batches in the training process", "dataloader"),
    RuntimeCheck("GP602", "dataloader-pageable-memory", Severity.WARNING,
                 "DataLoader with pin_memory=False while training on CUDA", "dataloader"),
    RuntimeCheck("GP603", "dataloader-too-many-workers", Severity.WARNING,
                 "More DataLoader workers than CPU cores available to this process", "dataloader"),
    RuntimeCheck("GP604", "dataloader-workers-restarted", Severity.WARNING,
                 "persistent_workers=False: worker processes restart every epoch", "dataloader"),
    RuntimeCheck("GP610", "module-split-across-devices", Severity.ERROR,
                 "One module's own parameters/buffers live on different devices", "placement"),
    RuntimeCheck("GP611", "model-mixes-devices", Severity.WARNING,
                 "A model's submodules mix CPU and accelerator devices", "placement"),
    RuntimeCheck("GP612", "input-on-other-device", Severity.ERROR,
                 "A module received an input on another device than its parameters", "placement"),
    RuntimeCheck("GP613", "device-mismatch-error", Severity.ERROR,
                 "The step raised PyTorch's device-mismatch error", "placement"),
    RuntimeCheck("GP620", "cudnn-benchmark-off", Severity.WARNING,
                 "torch.backends.cudnn.benchmark is off with convolutions and stable shapes", "settings"),
    RuntimeCheck("GP621", "tf32-disabled", Severity.WARNING,
                 "TF32 disabled on an Ampere-or-newer GPU while running FP32 matmuls", "settings"),
    RuntimeCheck("GP622", "anomaly-detection-on", Severity.WARNING,
                 "Autograd anomaly detection left on during training", "settings"),
    RuntimeCheck("GP630", "host-sync-site", Severity.WARNING,
                 "A source line synchronises the host with the GPU every step", "syncs"),
    RuntimeCheck("GP640", "memory-growth", Severity.WARNING,
                 "Memory grows step after step (a leak, e.g. accumulating loss instead of loss.item())",
                 "memory"),
    RuntimeCheck("GP641", "out-of-memory", Severity.ERROR,
                 "The run hit a CUDA out-of-memory error; a snapshot was dumped", "memory"),
    RuntimeCheck("GP710", "missing-distributed-sampler", Severity.WARNING,
                 "A DataLoader in a multi-rank run without DistributedSampler: every rank reads the same samples",
                 "distcheck"),
    RuntimeCheck("GP711", "backend-device-mismatch", Severity.WARNING,
                 "The process group's backend does not suit the device (gloo on CUDA, nccl on CPU)", "distcheck"),
)

_BY_CODE = {c.code: c for c in RUNTIME_CHECKS}


def runtime_check(code: str) -> RuntimeCheck:
    """The :class:`RuntimeCheck` of ``code`` (KeyError for an unknown code)."""
    return _BY_CODE[code]

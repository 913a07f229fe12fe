"""The rows of the report's views (docs/views.md defines every field).

Plain records beside the trace's other tables (:mod:`gpuprof.trace.stats`),
so the report can carry them without depending on the code that fills them
(:mod:`gpuprof.views.build`, which needs the rules' kernel classification).
Times are µs over the whole trace (not per step), as in the trace file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec

__all__ = ["VIEWS_VERSION", "OperatorRow", "KernelRow", "RangeRow", "ModuleMfu", "Mfu", "TraceViews", "MAX_ROWS"]

VIEWS_VERSION = 1
MAX_ROWS = 500  # rows kept per view in the report, most GPU (then CPU) time first; the rest are summed in `rest`


@dataclass(frozen=True)
class OperatorRow:
    """Calls of one operator name with one set of input shapes."""

    name: str
    input_shapes: str | None  # the "Input Dims" JSON text; None without record_shapes
    calls: int
    cpu_total_us: float
    cpu_self_us: float
    gpu_self_us: float  # kernels this operator launched itself
    gpu_total_us: float  # plus those of the operators nested in it
    stacks: list[str] = field(default_factory=list)  # up to 3 user source lines of its calls, when recorded
    flops: float | None = None  # floating-point operations of all its calls, nested operators' included (flops_source)
    flops_source: str | None = None  # "recorded" (the trace's kernel_flop), "estimate" (input shapes) or None
    tflops: float | None = None  # flops / gpu_total_us, TFLOP/s (None without GPU time)


@dataclass(frozen=True)
class KernelRow:
    """Launches of one kernel name."""

    name: str
    calls: int
    total_us: float
    mean_us: float
    max_us: float
    tensor_cores: bool | None  # by name: True/False when the name says, None when it does not
    op_dtype: str | None  # input dtype of the launching operators: fp64, fp32, bf16, fp16, fp8, mixed, None
    precision: str | None  # the math it runs: fp64, fp32, tf32, bf16, fp16, fp8 (None: unknown)
    flops: float | None  # floating-point operations of all its launches (see flops_source)
    flops_source: str | None  # "recorded" (the trace's kernel_flop), "estimate" (input shapes) or None
    tflops: float | None  # flops / total time, TFLOP/s
    mfu: float | None  # tflops / the device's peak for `precision` (peaks.py), fraction
    grid: list[int] | None = None
    block: list[int] | None = None
    registers_per_thread: int | None = None
    occupancy: float | None = None  # estimated achieved occupancy, fraction
    # tflops / the device's dense BF16 (FP16 without BF16) tensor-core peak (TraceViews.reference_precision), fraction
    reference_mfu: float | None = None


@dataclass(frozen=True)
class RangeRow:
    """One user ``record_function`` range name, or one ``nn.Module`` path."""

    name: str
    calls: int
    cpu_total_us: float
    gpu_self_us: float  # kernels launched inside it and no nested range
    gpu_total_us: float  # kernels launched anywhere inside it
    # MFU over its kernels' own time: their FLOPs at the device's peak for each kernel's precision / gpu_total_us
    # (docs/views.md, "MFU"); None without a peak or FLOPs
    mfu: float | None = None
    known_flops_share: float | None = None  # share of gpu_total_us in kernels whose FLOPs are known
    # the precision(s) of the peaks `mfu` is taken against: "fp32", or "bf16+fp32" (most FLOPs first)
    peak_precision: str | None = None
    reference_mfu: float | None = None  # the same FLOPs against the dense BF16/FP16 tensor-core peak, fraction


@dataclass(frozen=True)
class ModuleMfu:
    """One module's MFU (``traces[].mfu.per_module``): the figures of its modules-view row."""

    name: str
    gpu_total_us: float
    mfu: float | None
    known_flops_share: float | None
    peak_precision: str | None = None
    reference_mfu: float | None = None


@dataclass
class Mfu:
    """Model FLOPs utilisation of the recorded steps (``traces[].mfu``; docs/views.md, "MFU").

    ``value``: the time the steps' compute kernels with known FLOPs would take at the device's peak for each
    kernel's own precision, over the steps' wall time (for one precision: achieved FLOP/s / peak). A lower
    bound: kernels whose FLOPs are unknown add none, hence ``known_flops_share``.
    """

    value: float | None  # None: unknown peak (device not in the table) or no kernel with known FLOPs
    known_flops_share: float | None  # share of the steps' compute-kernel time whose FLOPs are known
    no_peak_share: float | None  # the part of it with no peak for its precision (counted in no MFU)
    peak_source: str | None  # the peak table's row (views.peak_device); None: unknown device, no MFU
    flops_per_step: float | None  # FLOPs of the kernels with known FLOPs, per step
    flops_by_precision: dict[str, float] = field(default_factory=dict)  # precision -> FLOPs per step
    per_module: list[ModuleMfu] = field(default_factory=list)  # modules with GPU time, most first (at most 20)
    # the precision(s) of the peaks `value` is taken against: "fp32", or "bf16+fp32" (most FLOPs first)
    peak_precision: str | None = None
    # the steps' known FLOPs against the device's dense BF16 (FP16 without BF16) tensor-core peak: the figure the
    # field quotes, so an FP32 job reads against the peak a BF16 one would
    reference_value: float | None = None
    reference_precision: str | None = None  # that peak's precision: "bf16", "fp16"; None: unknown device


@dataclass
class TraceViews:
    """The four views of one trace (``traces[].views``)."""

    version: int = VIEWS_VERSION
    kernel_total_us: float = 0.0  # all kernel time in the trace: what every view's GPU time adds up to
    unattributed_gpu_us: float = 0.0  # kernel time whose launching operator is unknown
    peak_device: str | None = None  # the device row of the peak table MFU used (None: no MFU)
    reference_precision: str | None = None  # the precision of the reference peak of every reference_mfu (bf16, fp16)
    operators: list[OperatorRow] = field(default_factory=list)
    kernels: list[KernelRow] = field(default_factory=list)
    modules: list[RangeRow] = field(default_factory=list)
    ranges: list[RangeRow] = field(default_factory=list)
    rest: dict[str, dict[str, float]] = field(default_factory=dict)  # view -> summed fields of rows past MAX_ROWS

    def to_dict(self) -> dict[str, Any]:
        return msgspec.to_builtins(self)  # type: ignore[no-any-return]

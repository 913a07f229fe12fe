"""The FLOPs of every kernel and the time they would take at the device's peak: the work behind MFU.

Not a rule: the figures GP307 (low MFU) and the report's views (:mod:`gpuprof.views.build`: the
kernels view, per-module MFU and the trace's step MFU) read alike, computed once per trace
(``TraceMetrics.memo``), so every view and the finding show one number (docs/views.md, "MFU").

* An operator's FLOPs: the trace's ``kernel_flop`` when above 0 (torch's trace augmenter writes 0
  where it has no figure), else the estimate from its inputs (:mod:`gpuprof.trace.flops`).
* A kernel's FLOPs: its share of the nearest operator around its launch with FLOPs
  (:func:`kernel_flops`).
* A kernel's precision: by its name, else its launching operators' input dtype
  (:mod:`gpuprof.trace.precision`); its *peak time* is its FLOPs over the device's peak at that
  precision (:mod:`gpuprof.trace.peaks`), in µs. A kernel with FLOPs but no peak (unknown device,
  unknown precision, or a path the part does not have) has a NaN peak time: it counts towards no MFU.
* Beside it, every kernel's *reference time*: its FLOPs over the device's dense BF16 tensor-core peak (FP16 on
  parts without BF16; :func:`gpuprof.trace.peaks.reference_precision`), the peak the field quotes MFU against,
  so an FP32 job measured against its own FP32 peak is also read against the one a BF16 job would be.
"""

from __future__ import annotations

import re
from operator import attrgetter
from typing import NamedTuple

import numpy as np

from gpuprof.rules.precision import is_eligible_kernel, uses_tensor_cores
from gpuprof.trace.arrays import sorted_unique
from gpuprof.trace.columns import columns
from gpuprof.trace.flops import ESTIMATED_OPS, estimate_flops
from gpuprof.trace.metrics import TraceMetrics
from gpuprof.trace.model import (
    DTYPE_BF16,
    DTYPE_DOUBLE,
    DTYPE_FLOAT,
    DTYPE_FP16,
    DTYPE_HALF,
    op_concrete_inputs,
    op_dtypes,
    op_flops,
    op_shape_key,
)
from gpuprof.trace.peaks import device_row, peak_for, reference_precision
from gpuprof.trace.precision import kernel_precision
from gpuprof.trace.viewrows import Mfu

__all__ = ["OpFlops", "KernelWork", "op_flops_of", "kernel_work", "peak_device", "dtype_name", "step_mfu",
           "precision_label"]

_extra_of = attrgetter("extra")
_GEMM_NAME = re.compile(r"gemm|gemv")


class OpFlops(NamedTuple):
    """Per operator call of ``metrics.attribution.ops``: its FLOPs (NaN: none) and whether the trace recorded them."""

    flops: np.ndarray
    recorded: np.ndarray


class KernelWork(NamedTuple):
    """Per kernel of ``trace.kernels`` (``group`` indexes ``names``, ``precision`` and ``tensor_cores``)."""

    group: np.ndarray
    names: list[str]
    flags: np.ndarray  # per name: the launching operators' DTYPE_* flags, ORed
    precision: list[str | None]  # per name
    tensor_cores: list[bool | None]  # per name
    flops: np.ndarray  # per kernel: its share of an operator's FLOPs (0: none)
    recorded: np.ndarray  # per kernel: that share comes from a recorded figure
    peak_us: np.ndarray  # per kernel: flops at the device's peak for its precision, µs (0 no FLOPs, NaN no peak)
    peak_device: str | None
    ref_us: np.ndarray  # per kernel: flops at the device's dense BF16/FP16 tensor-core peak, µs (0 no FLOPs, NaN no peak)
    reference_precision: str | None  # the precision of that peak: "bf16", "fp16" (no BF16 on the part), None


def peak_device(m: TraceMetrics) -> str | None:
    """The peak table's row for the trace's main device (:func:`gpuprof.trace.peaks.device_row`)."""
    dev = next((d for d in m.trace.devices if d.id == m.main_device), m.trace.devices[0] if m.trace.devices else None)
    if dev is None:
        return None
    return device_row(dev.name, dev.compute_capability)


def op_flops_of(m: TraceMetrics) -> OpFlops:
    """Every operator call's FLOPs (module docstring), once per trace."""
    return m.memo(_op_flops)


def _op_flops(m: TraceMetrics) -> OpFlops:
    att = m.attribution
    ops = att.ops if att is not None else []
    n = len(ops)
    if n == 0:
        return OpFlops(np.zeros(0), np.zeros(0, bool))
    assert att is not None
    # the Python loop runs once per distinct (name, payload) (the loader shares one object per distinct value)
    first, inv = att.name_and_payload_groups
    u_flops = np.full(len(first), np.nan)
    u_recorded = np.zeros(len(first), bool)
    for j, i in enumerate(first.tolist()):
        o = ops[i]
        rec = op_flops(o)
        if rec is not None and rec > 0:
            u_flops[j], u_recorded[j] = rec, True
        elif o.name in ESTIMATED_OPS:
            est = estimate_flops(o.name, op_shape_key(o), op_concrete_inputs(o))
            if est is not None:
                u_flops[j] = est
    return OpFlops(u_flops[inv], u_recorded[inv])


def kernel_work(m: TraceMetrics) -> KernelWork:
    """Every kernel's FLOPs, precision and peak time (module docstring), once per trace."""
    return m.memo(_kernel_work)


def _kernel_work(m: TraceMetrics) -> KernelWork:
    kernels = m.trace.kernels
    nk = len(kernels)
    kc = columns(m.trace, kernels)
    group, names = kc.name_code.astype(np.int64), list(kc.names)
    g = len(names)
    att = m.attribution
    row = peak_device(m)
    ref = reference_precision(row)
    if att is None or nk == 0:
        empty = np.zeros(nk)
        return KernelWork(group, names, np.zeros(g, np.int64), [None] * g, [None] * g, empty, np.zeros(nk, bool),
                          empty.copy(), row, empty.copy(), ref)
    k_op = att.gpu_op[:nk]  # gpu_events() yields the kernels first
    # the launching operators' dtype flags, read once per distinct payload object (shared by the loader)
    launched = sorted_unique(k_op[k_op >= 0])
    flags_of = np.zeros(max(len(att.ops), 1), np.int64)
    if len(launched):
        l_ops = list(map(att.ops.__getitem__, launched.tolist()))
        _, first, inv = np.unique(np.fromiter(map(id, map(_extra_of, l_ops)), np.int64, len(l_ops)),
                                  return_index=True, return_inverse=True)
        flags_of[launched] = np.fromiter(map(op_dtypes, map(l_ops.__getitem__, first.tolist())), np.int64,
                                         len(first))[inv.reshape(-1)]
    has = k_op >= 0
    flags = np.zeros(g, np.int64)
    np.bitwise_or.at(flags, group, np.where(has, flags_of[np.maximum(k_op, 0)], 0))
    tc = [uses_tensor_cores(n) for n in names]
    precision = [kernel_precision(n, dtype_name(int(f)), t) for n, f, t in zip(names, flags.tolist(), tc, strict=True)]
    gemm = np.fromiter(map(_does_matmul, names), bool, g)
    k_flops, k_recorded = kernel_flops(att.parent, k_op, kc.dur, has & gemm[group], op_flops_of(m))
    peak = np.array([peak_for(row, p) or np.nan for p in precision]) if g else np.zeros(0)
    ref_peak = peak_for(row, ref) or np.nan
    with np.errstate(invalid="ignore"):
        peak_us = np.where(k_flops > 0, k_flops / (peak[group] * 1e6), 0.0)  # FLOP / (TFLOP/s * 1e6 FLOP/µs)
        ref_us = np.where(k_flops > 0, k_flops / (ref_peak * 1e6), 0.0)
    return KernelWork(group, names, flags, precision, tc, k_flops, k_recorded, peak_us, row, ref_us, ref)


def kernel_flops(
    parent: np.ndarray, k_op: np.ndarray, k_dur: np.ndarray, gemm: np.ndarray, fl: OpFlops
) -> tuple[np.ndarray, np.ndarray]:
    """Per kernel: its share of an operator's FLOPs, and whether that figure was recorded (docs/views.md).

    A kernel's FLOPs come from the nearest operator around its launch (its
    launching operator or an enclosing one) whose FLOPs the trace records;
    failing one, from the nearest with an estimate. Only GEMM, GEMV and
    convolution kernels (``gemm``) take a share, not an operator's bias, copy
    or layout kernels; but recorded FLOPs of an operator that launched no
    such kernel (an Inductor-generated Triton kernel) go to the kernels it
    launched. An operator's FLOPs are shared among the kernels that take
    them by their time.
    """
    nk = len(k_op)
    n = len(fl.flops)
    if n == 0:  # kernels, but no operator: nothing to take FLOPs from
        return np.zeros(nk), np.zeros(nk, bool)
    rec = fl.recorded
    owner = _nearest(k_op, rec, parent)
    by_rec = owner >= 0
    owner = np.where(by_rec, owner, _nearest(np.where(by_rec, -1, k_op), ~np.isnan(fl.flops) & ~rec, parent))
    o = np.maximum(owner, 0)
    matmul = (owner >= 0) & gemm
    owner_has_matmul = np.bincount(owner[matmul], minlength=n) > 0
    takes = matmul | ((owner >= 0) & by_rec & ~owner_has_matmul[o])
    if not takes.any():
        return np.zeros(nk), np.zeros(nk, bool)
    time = np.bincount(owner[takes], weights=k_dur[takes], minlength=n)
    share = np.where(takes & (time[o] > 0), k_dur / np.where(time[o] > 0, time[o], 1.0), 0.0)
    return np.where(takes, np.nan_to_num(fl.flops[o]), 0.0) * share, takes & by_rec


def _does_matmul(name: str) -> bool:
    """A kernel that takes a share of its operator's estimated FLOPs: a GEMM, GEMV or convolution kernel by
    name, not the operator's bias, copy, layout-shuffle or elementwise kernels."""
    return is_eligible_kernel(name) or _GEMM_NAME.search(name[:300].lower()) is not None


def _nearest(start: np.ndarray, wanted: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """For each start op (-1: none), the nearest of itself and its ancestors with ``wanted`` set (-1: none).

    One numpy pass per nesting level, over the starts still climbing.
    """
    found = np.full(len(start), -1, np.int64)
    cur = start.astype(np.int64, copy=True)
    while True:
        live = (cur >= 0) & (found < 0)
        if not live.any():
            return found
        c = np.maximum(cur, 0)
        hit = live & wanted[c]
        found[hit] = cur[hit]
        cur = np.where(live & ~hit, parent[c], -1)


def dtype_name(flags: int) -> str | None:
    """The input dtype of a kernel's launching operators from their DTYPE_* flags ("mixed" for several)."""
    found = []
    if flags & DTYPE_DOUBLE:
        found.append("fp64")
    if flags & DTYPE_FLOAT:
        found.append("fp32")
    if flags & DTYPE_BF16:
        found.append("bf16")
    if flags & DTYPE_FP16:
        found.append("fp16")
    if flags & DTYPE_HALF and not flags & (DTYPE_BF16 | DTYPE_FP16):
        found.append("fp8")
    if not found:
        return None
    return found[0] if len(found) == 1 else "mixed"


def step_mfu(m: TraceMetrics) -> Mfu:
    """The MFU of the recorded steps (:class:`~gpuprof.trace.viewrows.Mfu`), once per trace; no per-module rows."""
    return m.memo(_step_mfu)


def _step_mfu(m: TraceMetrics) -> Mfu:
    w = kernel_work(m)
    at = m.step_kernel_at  # compute kernels (not collectives) of the main device inside the steps
    n = max(m.num_steps, 1)
    dur = columns(m.trace, m.trace.kernels).dur[at] if len(at) else np.zeros(0)
    flops, peak_us = w.flops[at], w.peak_us[at]
    total = float(dur.sum())
    has = flops > 0
    priced = has & np.isfinite(peak_us)
    wall = m.total_time
    by_prec: dict[str, float] = {}
    priced_prec: dict[str, float] = {}
    if has.any():
        prec = np.array([p or "unknown" for p in w.precision], dtype=object)[w.group[at]]
        for p in sorted(set(prec[has].tolist())):
            by_prec[str(p)] = float(flops[has & (prec == p)].sum()) / n
            priced_prec[str(p)] = float(flops[priced & (prec == p)].sum())
    ref_us = w.ref_us[at]
    return Mfu(
        value=float(peak_us[priced].sum()) / wall if w.peak_device and priced.any() and wall > 0 else None,
        peak_precision=precision_label(priced_prec) if w.peak_device and priced.any() and wall > 0 else None,
        reference_value=(float(ref_us[has].sum()) / wall if w.reference_precision and has.any() and wall > 0
                         else None),
        reference_precision=w.reference_precision,
        known_flops_share=float(dur[has].sum()) / total if total > 0 else None,
        no_peak_share=float(dur[has & ~priced].sum()) / total if total > 0 else None,
        peak_source=w.peak_device,
        flops_per_step=float(flops[has].sum()) / n if has.any() else None,
        flops_by_precision=by_prec,
    )


_LABEL_MIN_SHARE = 0.01  # a precision with less of the FLOPs cannot move the figure: left out of its label


def precision_label(flops_by_precision: dict[str, float]) -> str | None:
    """The precision of the peak an MFU figure is taken against: the kernels' one precision (``fp32``), or theirs
    joined by ``+``, most FLOPs first (``bf16+fp32``: each kernel against its own precision's peak), leaving out
    those with under 1% of the FLOPs; None without FLOPs."""
    total = sum(f for f in flops_by_precision.values() if f > 0)
    named = sorted((-f, p) for p, f in flops_by_precision.items() if f > 0 and f >= _LABEL_MIN_SHARE * total)
    return "+".join(p for _, p in named) or None

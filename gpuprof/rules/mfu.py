"""GP307: low model FLOPs utilisation of the steps, said only where the trace knows most of the FLOPs."""

from __future__ import annotations

from typing import Iterable

import numpy as np

from gpuprof.codespec import Option
from gpuprof.findings import Evidence, Finding, Severity
from gpuprof.rules.base import Rule, RuleContext, register
from gpuprof.rules.cause import CauseFigure
from gpuprof.rules.flopwork import kernel_work, step_mfu
from gpuprof.trace.columns import columns
from gpuprof.trace.metrics import TraceMetrics
from gpuprof.trace.phase import serving_engine

__all__ = ["LowMfu"]


def mfu_per_step(m: TraceMetrics) -> list[float] | None:
    """GP307's cause per step: each step's MFU (its priced kernels' time at the peak over the step's time)."""
    w = kernel_work(m)
    at = m.step_kernel_at
    if not w.peak_device or not m.steps:
        return None
    ts = columns(m.trace, m.trace.kernels).ts[at]
    step = np.searchsorted(np.array(m.step_starts), ts, side="right") - 1
    peak_us = w.peak_us[at]
    priced = (w.flops[at] > 0) & np.isfinite(peak_us)
    per = np.bincount(step[priced], weights=peak_us[priced], minlength=m.num_steps)[:m.num_steps]
    return [float(x) / t if t > 0 else 0.0 for x, t in zip(per, m.step_times)]


@register
class LowMfu(Rule):
    """The steps reach a small fraction of the GPU's peak FLOP rate.

    MFU (docs/views.md, "MFU") is the time the steps' kernels with known FLOPs would take at the device's
    published peak for each kernel's own precision, over the steps' wall time. Kernels whose FLOPs gpuprof
    cannot count (attention, normalisation, elementwise, custom kernels) add none, so the figure is a lower
    bound, and it is said only when kernels with known FLOPs take at least ``min_known_share`` of the steps'
    kernel time; on an unknown GPU (no peak) nothing is said. The finding splits the figure in two: the share
    of the step the GPU is busy (GP101 covers idle time) and the MFU of the GEMMs/convolutions themselves while
    they run, so it says which of the two to work on. Info: a low MFU is a measure, not one defect. The figure
    names the precision of its peak and, when that is not the device's dense BF16 (FP16) tensor-core peak, gives
    the figure against that peak too (the one the field quotes: an FP32 job reads 2%, not 34%); the threshold is
    judged on the figure at the kernels' own precision, the FP32 time being GP302's.
    """

    code = "GP307"
    name = "low-mfu"
    title = "Low model FLOPs utilisation: the steps reach a small fraction of the GPU's peak"
    cause = CauseFigure("MFU of the step", mfu_per_step, unit="fraction", higher_is_better=True)
    severity = Severity.INFO
    options = (
        Option("max_mfu", 0.20, "report when the steps' MFU is below this fraction of the peak"),
        Option("min_known_share", 0.50, "...and kernels with known FLOPs take at least this share of the steps' "
                                        "kernel time (else the figure says too little)"),
    )
    bad_example = """
        model = MyViT().cuda().to(torch.bfloat16)
        for x in loader:                 # batch of 1: small GEMMs, many small kernels, the GPU mostly idle
            model(x.cuda())
    """
    good_example = """
        model = torch.compile(MyViT().cuda().to(torch.bfloat16))
        for x in loader:                 # larger batches (or CUDA graphs) keep the tensor cores fed
            model(x.cuda())
    """

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        m = ctx.metrics
        mfu = step_mfu(m)
        if mfu.value is None or mfu.known_flops_share is None or mfu.peak_source is None:
            return  # an unknown peak is never another card's: no figure, no finding
        if mfu.known_flops_share < ctx.opt("min_known_share") or mfu.value >= ctx.opt("max_mfu"):
            return
        w = kernel_work(m)
        at = m.step_kernel_at
        dur = columns(m.trace, m.trace.kernels).dur[at]
        priced = (w.flops[at] > 0) & np.isfinite(w.peak_us[at])
        busy = float(dur[priced].sum())
        kernel_mfu = float(w.peak_us[at][priced].sum()) / busy if busy > 0 else None
        util = m.gpu_utilization
        prec = (mfu.peak_precision or "").upper()
        ref = (mfu.reference_precision or "").upper()
        against = (f"the {mfu.peak_source} peaks of its kernels' precisions ({prec})" if "+" in prec
                   else f"the {mfu.peak_source} {prec} peak")
        if mfu.reference_value is not None and ref and prec != ref:
            against += f"; {mfu.reference_value:.1%} of its dense {ref} tensor-core peak"
        parts = [f"the steps reach {mfu.value:.1%} of {against} (FLOPs known for {mfu.known_flops_share:.0%} of the "
                 "steps' kernel time)"]
        if util is not None:
            parts.append(f"the GPU is busy {util:.0%} of the step")
        if kernel_mfu is not None:
            parts.append(f"the kernels with known FLOPs run at {kernel_mfu:.1%} of the peak while they run")
        engine = serving_engine(m)
        if engine is not None:  # decoding reads the weights and the KV cache per token: bandwidth, not FLOPs
            parts.append(f"a {engine} serving trace: its decode steps are bound by memory bandwidth, so a low MFU "
                         "is expected there and only the prefill's GEMMs should approach the peak")
        advice = []
        if util is not None and util < 0.5:
            advice.append("Most of the step the GPU waits: fix the idle time first (the GPU utilisation findings "
                          "and the idle breakdown say where the host spends it)")
        if kernel_mfu is not None and kernel_mfu < 0.5:
            advice.append("The GEMMs themselves run far below the peak: larger batches or fused layers give them "
                          "bigger matrices; bf16/fp16 autocast (not fp32) uses the tensor cores; dimensions that are "
                          "multiples of 8 (GP305) avoid slow kernels; torch.compile fuses the small kernels around them")
        yield self.finding(
            ctx,
            "; ".join(parts),
            ". ".join(advice or ["Profile a larger batch or a compiled model and compare the MFU"]) + ".",
            evidence=(Evidence("mfu", round(mfu.value, 5), ctx.opt("max_mfu"), "fraction",
                               extra={"known_flops_share": round(mfu.known_flops_share, 4),
                                      "min_known_share": ctx.opt("min_known_share"),
                                      "peak_source": mfu.peak_source,
                                      "peak_precision": mfu.peak_precision,
                                      "reference_mfu": (round(mfu.reference_value, 5)
                                                        if mfu.reference_value is not None else None),
                                      "reference_precision": mfu.reference_precision,
                                      "kernel_mfu": round(kernel_mfu, 5) if kernel_mfu is not None else None,
                                      "gpu_utilization": round(util, 4) if util is not None else None,
                                      "flops_per_step": mfu.flops_per_step}),),
        )

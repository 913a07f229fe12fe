"""GP820: convolutions paying NCHW <-> NHWC layout conversions (channels_last advice)."""

from __future__ import annotations

import functools
import re
from typing import Iterable

from gpuprof.codespec import Option
from gpuprof.findings import Evidence, Finding
from gpuprof.rules.base import Rule, RuleContext, event_refs, register
from gpuprof.rules.common import count_of

__all__ = ["LayoutTransposes", "is_layout_transpose"]

# cuDNN/MIOpen layout shuffles around convolutions: cudnn::ops::nchwToNhwcKernel, nhwcToNchwKernel,
# (older) cudnn::nchwToNhwcKernel, MIOpen's transpose_NCHW2NHWC / transpose_NHWC2NCHW
_TRANSPOSE = re.compile(r"nchwtonhwc|nhwctonchw|transpose_nchw2nhwc|transpose_nhwc2nchw", re.I)


@functools.lru_cache(maxsize=4096)
def is_layout_transpose(name: str) -> bool:
    """A kernel that only converts a tensor between NCHW and NHWC layouts for a convolution library.

    Cached: a trace launches a few hundred distinct kernels tens of thousands of times."""
    return _TRANSPOSE.search(name[:300]) is not None


@register
class LayoutTransposes(Rule):
    """Convolutions pay NCHW <-> NHWC layout conversions: use channels_last.

    Tensor-core convolutions (FP16/BF16 under AMP, TF32) work in NHWC. With
    PyTorch's default NCHW tensors, cuDNN/MIOpen convert the input to NHWC
    before the convolution and the output back after it: the
    ``nchwToNhwc``/``nhwcToNchw`` kernels, pure memory traffic. Their GPU time
    inside the steps is the cost (the kernels run on the critical path of
    each convolution). Converting the model and its inputs to
    ``torch.channels_last`` once removes them.
    """

    code = "GP820"
    name = "layout-transposes"
    title = "Convolutions pay NCHW/NHWC layout conversions (use channels_last)"
    options = (Option("min_per_step", 1.0, "report from this many conversion kernels per step"),)
    bad_example = """
        model = torchvision.models.resnet50().cuda()   # NCHW weights and activations
        with torch.autocast("cuda", dtype=torch.float16):
            loss = loss_fn(model(x.cuda()), y)           # cuDNN converts to NHWC around each convolution
    """
    good_example = """
        model = torchvision.models.resnet50().cuda().to(memory_format=torch.channels_last)
        x = x.cuda(non_blocking=True).to(memory_format=torch.channels_last)
        with torch.autocast("cuda", dtype=torch.float16):
            loss = loss_fn(model(x), y)
    """

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        m = ctx.metrics
        if not m.steps:
            return
        shuffles = [k for k in m.step_kernels if is_layout_transpose(k.name)]
        per_step = len(shuffles) / m.num_steps
        if not shuffles or per_step < ctx.opt("min_per_step"):
            return
        us_per_step = sum(k.dur for k in shuffles) / m.num_steps
        to_nhwc = sum(1 for k in shuffles if re.search(r"nchwtonhwc|nchw2nhwc", k.name, re.I))
        yield self.finding(
            ctx,
            f"convolutions convert layouts: {count_of(per_step, 'NCHW/NHWC conversion kernel')} per step "
            f"({to_nhwc / m.num_steps:.3g} to NHWC, {(len(shuffles) - to_nhwc) / m.num_steps:.3g} back)",
            """
            Convert the model and its inputs to channels_last once: model = model.to(memory_format=
            torch.channels_last) and x = x.to(memory_format=torch.channels_last) (or in the DataLoader's
            collate). Tensor-core convolutions (AMP FP16/BF16, TF32) then read NHWC directly and cuDNN
            stops converting around every convolution.
            """,
            evidence=(Evidence("conversion_kernels_per_step", round(per_step, 3), ctx.opt("min_per_step"), "kernels",
                               events=event_refs(shuffles),
                               extra={"gpu_us_per_step": round(us_per_step, 1), "to_nhwc": to_nhwc,
                                      "to_nchw": len(shuffles) - to_nhwc}),),
            cost_us_per_step=us_per_step, cost_label="GPU time converting layouts",
        )

"""GP305: GEMMs on slow unaligned kernels because a matrix dimension is not a multiple of 8."""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Iterable

from gpuprof.codespec import Option
from gpuprof.findings import Evidence, Finding
from gpuprof.rules.base import Rule, RuleContext, event_refs, register
from gpuprof.rules.precision import is_eligible_kernel, uses_tensor_cores
from gpuprof.trace.flops import estimate_flops
from gpuprof.trace.model import DTYPE_HALF, Event, dur_of, name_of, op_concrete_inputs, op_dtypes, op_shape_key

__all__ = ["MisalignedGemm", "is_unaligned_kernel", "odd_dims"]

# CUTLASS names its kernels with the vector width of their global loads, in elements: align8 for 16-bit
# operands (16 bytes), align4 for 32-bit. align1/align2 mean a dimension that is no multiple of that width
# forced scalar or narrow loads, at a fraction of the tensor cores' rate.
_UNALIGNED = re.compile(r"align[12](?!\d)", re.I)
_GEMM_OPS = frozenset({"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear",
                       "aten::addbmm", "aten::_scaled_mm"})


def is_unaligned_kernel(name: str) -> bool:
    """A GEMM/convolution kernel whose name says it loads 1 or 2 elements at a time."""
    return _UNALIGNED.search(name[:300]) is not None and is_eligible_kernel(name)


def odd_dims(dims_text: str | None, multiple: int) -> list[int]:
    """The matrix dimensions (the last two of each input) that are not multiples of ``multiple``."""
    if not dims_text:
        return []
    try:
        shapes = json.loads(dims_text)
    except ValueError:
        return []
    out: list[int] = []
    for s in shapes if isinstance(shapes, list) else []:
        if isinstance(s, list) and len(s) >= 2 and all(isinstance(d, int) for d in s[-2:]):
            out += [d for d in s[-2:] if d % multiple and d not in out]
    return out


@register
class MisalignedGemm(Rule):
    """GEMMs run on unaligned kernels because a matrix dimension is not a multiple of 8.

    Tensor-core GEMM kernels load their operands 16 bytes at a time: 8 float16/bfloat16 elements (4 for
    float32/TF32). When a matrix dimension (a sequence length of 3137 or 5185, a vocabulary of 50257, a
    hidden size of 1001) is not a multiple of that, cuBLAS falls back to CUTLASS kernels that load one or
    two elements at a time (``..._align1``, ``..._align2``), which reach a fraction of the GPU's rate. The
    finding names the kernels, their share of the step's kernel time, the operators' odd dimensions (from
    ``Input Dims``, with ``record_shapes=True``) and, where the trace also has aligned tensor-core GEMMs
    with known FLOPs, the time the unaligned ones would take at that rate: the cost.
    """

    code = "GP305"
    name = "misaligned-gemm"
    title = "GEMMs on slow unaligned kernels: a matrix dimension is not a multiple of 8"
    options = (Option("min_share", 0.02, "report when unaligned GEMM kernels take this share of the step's kernel time"),)
    bad_example = """
        tokens = tokenizer(texts, padding="longest", return_tensors="pt")   # sequence length 5185
        logits = model(**tokens).logits                                     # q @ k.T runs on an align1 kernel
    """
    good_example = """
        tokens = tokenizer(texts, padding="longest", pad_to_multiple_of=8, return_tensors="pt")   # 5192
        model.resize_token_embeddings(len(tokenizer), pad_to_multiple_of=64)                      # vocabulary too
    """

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        m = ctx.metrics
        if not m.steps:
            return
        kernels = m.step_kernels
        total = sum(map(dur_of, kernels))  # the same additions in the same order, without a generator
        if total <= 0:
            return
        bad: list[Event] = []
        dims: Counter[int] = Counter()
        bad_flops = bad_us_known = good_flops = good_us = 0.0
        # per distinct name: unaligned (True), an aligned tensor-core GEMM (False), neither (None)
        verdict: dict[str, bool | None] = {}
        for name in set(map(name_of, kernels)):
            verdict[name] = True if is_unaligned_kernel(name) else False if uses_tensor_cores(name) is True else None
        for k in kernels:
            unaligned = verdict[k.name]
            if unaligned is None:
                continue
            launch = m.launch_by_corr.get(k.corr)
            op = m.op_by_ext.get(launch.ext if launch is not None else k.ext)
            shapes = op_shape_key(op) if op is not None and op.name in _GEMM_OPS else None
            flops = estimate_flops(op.name, shapes, op_concrete_inputs(op)) if op is not None and shapes else None
            if unaligned:
                bad.append(k)
                if op is not None:
                    multiple = 8 if op_dtypes(op) & DTYPE_HALF else 4
                    for d in odd_dims(shapes, multiple):
                        dims[d] += 1
                if flops:
                    bad_flops += flops
                    bad_us_known += k.dur
            elif flops:
                good_flops += flops
                good_us += k.dur
        bad_us = sum(map(dur_of, bad))
        share = bad_us / total
        if not bad or share < ctx.opt("min_share"):
            return
        n = m.num_steps
        cost = None
        if bad_flops and good_flops and good_us:
            rate = good_flops / good_us  # FLOP per µs of this trace's aligned tensor-core GEMMs
            cost = max(0.0, bad_us_known - bad_flops / rate) / n
        odd = ", ".join(str(d) for d, _ in dims.most_common(4))
        names = Counter(k.name for k in bad).most_common(1)[0][0]
        yield self.finding(
            ctx,
            f"unaligned GEMM kernels take {share:.0%} of the step's kernel time ({bad_us / n / 1000:.3g} ms per step, "
            f"e.g. {names[:100]})" + (f"; matrix dimensions not a multiple of 8: {odd}" if odd else ""),
            """
            Pad the dimension to a multiple of 8 (16-bit) or 4 (float32/TF32): the sequence length
            (tokenizer(..., pad_to_multiple_of=8), or pad the batch in the collate function), the vocabulary
            (model.resize_token_embeddings(len(tokenizer), pad_to_multiple_of=64)), hidden and head sizes, the
            number of patches or frames. The GEMMs then run on aligned tensor-core kernels.
            """,
            evidence=(Evidence("unaligned_gemm_share", round(share, 4), ctx.opt("min_share"), "fraction",
                               events=event_refs(sorted(bad, key=lambda k: -k.dur)),
                               extra={"unaligned_us_per_step": round(bad_us / n, 1),
                                      "odd_dimensions": [d for d, _ in dims.most_common(8)],
                                      "aligned_gemm_tflops": round(good_flops / good_us / 1e6, 2) if good_us else None,
                                      "unaligned_gemm_tflops": round(bad_flops / bad_us_known / 1e6, 2)
                                      if bad_us_known else None}),),
            cost_us_per_step=cost,
            cost_label="GPU time the unaligned GEMMs take beyond the trace's aligned tensor-core rate"
            if cost is not None else None,
        )

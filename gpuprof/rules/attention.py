"""GP304: attention computed eagerly (softmax over bmm), not by a fused attention kernel."""

from __future__ import annotations

from collections import defaultdict
from typing import Iterable, NamedTuple

import numpy as np

from gpuprof.codespec import Option
from gpuprof.findings import Evidence, Finding
from gpuprof.rules.base import Rule, RuleContext, event_refs, register
from gpuprof.rules.cause import CauseFigure, kernels_per_step
from gpuprof.rules.precision import is_eligible_kernel
from gpuprof.trace.metrics import TraceMetrics
from gpuprof.trace.model import Event, dur_of

__all__ = ["UnfusedAttention", "attention_blocks", "AttentionBlock"]

_SOFTMAX = frozenset({"aten::softmax", "aten::_softmax", "aten::_softmax_backward_data"})
_GEMM = frozenset({"aten::matmul", "aten::bmm", "aten::baddbmm", "aten::einsum"})
_MAX_GAP_US = 5_000.0  # host time between the score GEMM, the softmax and the value GEMM of one attention


class AttentionBlock(NamedTuple):
    """One eager attention on one host thread: the score GEMM, the softmax, the value GEMM (``start``..``end``)."""

    pid: object
    tid: object
    start: float
    end: float
    softmax: Event


def attention_blocks(m: TraceMetrics) -> list[AttentionBlock]:
    """Softmax operators with a matmul/bmm just before and just after on the same thread, within ``_MAX_GAP_US``.

    That is eager attention, ``softmax(q @ k.T) @ v`` (and its backward: ``_softmax_backward_data`` between the
    gradient GEMMs). A softmax nested in another (``aten::softmax`` > ``aten::_softmax``) counts once.
    """
    by_thread: dict[tuple[object, object], list[Event]] = defaultdict(list)
    for o in m.trace.ops:
        if o.name in _SOFTMAX or o.name in _GEMM:
            by_thread[(o.pid, o.tid)].append(o)
    out: list[AttentionBlock] = []
    for (pid, tid), ops in by_thread.items():
        ops.sort(key=lambda e: (e.ts, -e.dur))
        gemm_end = np.array([o.ts + o.dur for o in ops if o.name in _GEMM])
        gemm_ts = np.array([o.ts for o in ops if o.name in _GEMM])
        if not len(gemm_ts):
            continue
        order_end = np.argsort(gemm_end, kind="stable")
        ends_sorted = gemm_end[order_end]
        covered = -np.inf
        for o in ops:
            if o.name not in _SOFTMAX or o.ts < covered:
                continue  # a GEMM, or a softmax nested in the one just taken
            covered = o.ts + o.dur
            i = int(np.searchsorted(ends_sorted, o.ts, side="right")) - 1  # the GEMM that ended last before it
            j = int(np.searchsorted(gemm_ts, covered, side="left"))  # the first GEMM starting after it
            if i < 0 or j >= len(gemm_ts):
                continue
            before_end = float(ends_sorted[i])
            if o.ts - before_end > _MAX_GAP_US or float(gemm_ts[j]) - covered > _MAX_GAP_US:
                continue
            start = float(gemm_ts[order_end[i]])
            after = ops_after = float(gemm_ts[j])
            end = max(float(gemm_end[j]), after)
            del ops_after
            out.append(AttentionBlock(pid, tid, start, end, o))
    return out


def eager_attention(m: TraceMetrics) -> tuple[list[Event], list[AttentionBlock]]:
    """The kernels each eager attention block of the steps launched (each once), and the blocks; once per trace."""
    return m.memo(_eager_attention)


def _eager_attention(m: TraceMetrics) -> tuple[list[Event], list[AttentionBlock]]:
    kernels = m.step_kernels
    blocks = [b for b in attention_blocks(m) if m.step_of(b.softmax.ts) is not None]
    if not kernels or not blocks:
        return [], blocks
    # the kernels each block's thread launched inside the block
    launches: dict[tuple[object, object], list[tuple[float, Event]]] = defaultdict(list)
    for k in kernels:
        launch = m.launch_by_corr.get(k.corr)
        if launch is not None:
            launches[(launch.pid, launch.tid)].append((launch.ts, k))
    inside: list[Event] = []
    for key, got in launches.items():
        got.sort(key=lambda x: x[0])
        ts = np.array([t for t, _ in got])
        for b in (b for b in blocks if (b.pid, b.tid) == key):
            lo, hi = np.searchsorted(ts, b.start, side="left"), np.searchsorted(ts, b.end, side="right")
            inside.extend(k for _, k in got[lo:hi])
    return list({id(k): k for k in inside}.values()), blocks  # nested blocks never count a kernel twice


def eager_attention_per_step(m: TraceMetrics) -> list[float] | None:
    """GP304's cause per step: the GPU time of the kernels eager attention launched, by step."""
    return kernels_per_step(m, eager_attention(m)[0]) if m.main_device is not None else None


@register
class UnfusedAttention(Rule):
    """Attention computed eagerly: ``softmax(q @ k.T) @ v`` as separate kernels.

    An eager attention writes the full ``seq × seq`` score matrix to GPU memory, reads it back for the
    scaling, masking and softmax kernels, writes the probabilities and reads them again for the second
    GEMM: memory traffic that grows with the square of the sequence length, and a score matrix that
    autograd keeps for the backward pass. A fused attention kernel (FlashAttention, memory-efficient
    attention, cuDNN attention; what ``torch.nn.functional.scaled_dot_product_attention`` dispatches to)
    keeps the scores on chip. The finding counts the softmax operators that sit between two matmul/bmm
    operators on one thread (the score and value GEMMs) and measures the GPU time of every kernel launched
    between the first GEMM and the second: its share of the step's kernel time. The cost is the time of the
    non-GEMM kernels among them (softmax, scale, mask, dropout, copies), which a fused kernel does not spend;
    the GEMM work remains.
    """

    code = "GP304"
    name = "unfused-attention"
    title = "Attention computed eagerly (softmax over bmm), not by a fused attention kernel"
    cause = CauseFigure("GPU time of eager attention's kernels", eager_attention_per_step)
    options = (
        Option("min_share", 0.10, "report when eager attention's kernels take this share of the step's kernel time"),
    )
    bad_example = """
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        scores = scores.masked_fill(mask == 0, float("-inf"))
        out = torch.softmax(scores, dim=-1) @ v
    """
    good_example = """
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)   # FlashAttention / mem-efficient
        # Hugging Face models: AutoModel.from_pretrained(..., attn_implementation="sdpa")  (or "flash_attention_2")
    """

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        m = ctx.metrics
        if not m.steps or m.main_device is None:
            return
        kernels = m.step_kernels
        total = sum(map(dur_of, kernels))  # the same additions in the same order, without a generator
        if not kernels or total <= 0:
            return
        unique, blocks = eager_attention(m)
        if not unique:
            return
        attn_us = sum(k.dur for k in unique)
        extra = [k for k in unique if not is_eligible_kernel(k.name)]
        extra_us = sum(k.dur for k in extra)
        share = attn_us / total
        if share < ctx.opt("min_share"):
            return
        n = m.num_steps
        first = blocks[0].softmax
        loc = m.stacks.location(first.pid, first.tid, first.ts, op=first)
        yield self.finding(
            ctx,
            f"eager attention: {len(blocks) / n:.3g} softmax-between-matmuls per step take {share:.0%} of the step's "
            f"kernel time ({attn_us / n / 1000:.3g} ms per step), {extra_us / n / 1000:.3g} ms of it in softmax, "
            "scale, mask and copy kernels a fused attention kernel does not run",
            """
            Compute attention with torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=...,
            is_causal=...): it dispatches to FlashAttention, memory-efficient or cuDNN attention, which never
            write the seq x seq score matrix to memory (forward and backward). Hugging Face models: load them with
            attn_implementation="sdpa" (or "flash_attention_2"). Keep head dimensions a multiple of 8 and use
            float16/bfloat16 so the fused kernels apply.
            """,
            evidence=(Evidence("attention_kernel_share", round(share, 4), ctx.opt("min_share"), "fraction",
                               events=event_refs(sorted(extra, key=lambda k: -k.dur)),
                               extra={"attention_us_per_step": round(attn_us / n, 1),
                                      "non_gemm_us_per_step": round(extra_us / n, 1),
                                      "blocks_per_step": round(len(blocks) / n, 3),
                                      "step_kernel_us_per_step": round(total / n, 1)}),),
            cost_us_per_step=extra_us / n,
            cost_label="GPU time in eager attention's softmax, scale and mask kernels",
            location=loc,
        )

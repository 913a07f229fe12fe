"""GP306: GPU time launched outside any operator (graph replays, direct launches, missing launch records)."""

from __future__ import annotations

from collections import Counter
from typing import Iterable

import numpy as np

from gpuprof.codespec import Option
from gpuprof.findings import Evidence, Finding, Severity
from gpuprof.rules.base import Rule, RuleContext, event_refs, register
from gpuprof.trace.columns import columns

__all__ = ["OutsideOperators"]

_GRAPH = ("cudaGraphLaunch", "hipGraphLaunch", "cuGraphLaunch")


@register
class OutsideOperators(Rule):
    """Much of the GPU time was launched outside any PyTorch operator.

    The operators, modules and kernels views, and the rules that name an operator or a source line, attribute a
    kernel through the operator around its launch. Kernels replayed from a CUDA/HIP graph (``cudaGraphLaunch``:
    ``torch.compile(mode="reduce-overhead")``, vLLM/SGLang decode), kernels launched directly (a Triton or
    custom kernel called outside ``torch.library``), and kernels whose launch the trace did not record have no
    operator: their time is real but no view can say which layer spent it. The finding says how much of the
    step's kernel time that is, split by what launched it, so a reader knows how far the per-operator figures go.
    """

    code = "GP306"
    name = "gpu-time-outside-operators"
    title = "Much of the GPU time was launched outside any operator (graph replays, direct launches)"
    severity = Severity.INFO
    options = (Option("min_share", 0.20, "report when this share of the step's kernel time has no operator"),)
    bad_example = """
        compiled = torch.compile(model, mode="reduce-overhead")   # CUDA graphs: replayed kernels carry no operator
        with torch.profiler.profile(...) as prof:
            compiled(x)
    """
    good_example = """
        compiled = torch.compile(model)                            # profile once without CUDA graphs to attribute
        with torch.profiler.profile(...) as prof:                  # the kernels to operators and modules
            compiled(x)
    """

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        m = ctx.metrics
        att = m.attribution
        if att is None or not m.steps:
            return
        at = m.step_kernel_at
        kernels = m.trace.kernels
        kc = columns(m.trace, kernels)
        # sums in kernel order (cumsum adds left to right, as sum() over the events did: the same float)
        total = _sum(kc.dur[at])
        if total <= 0:
            return
        out_at = at[att.gpu_op[at] < 0]  # the step's kernels no operator launched, in order
        kinds: list[str] = []
        for corr in kc.corr[out_at].tolist():  # only those kernels: a dict look-up each
            launch = m.launch_by_corr.get(corr)
            kinds.append("no launch recorded" if launch is None else "graph replay" if launch.name in _GRAPH
                         else f"direct {launch.name}")
        by: Counter[str] = Counter()  # of float µs (Counter for most_common and its missing keys' 0)
        dur = kc.dur[out_at]
        kind_of = np.array(kinds, dtype=object)
        for kind in dict.fromkeys(kinds):  # first-seen order, as the loop over the events filled the counter
            by[kind] = _sum(dur[kind_of == kind])  # type: ignore[assignment]  # Counter's values typed int
        share = sum(by.values()) / total
        if share < ctx.opt("min_share"):
            return
        parts = ", ".join(f"{v / total:.0%} {_words(k)}" for k, v in by.most_common(3) if v >= 0.005 * total)
        advice = []
        if by["graph replay"]:
            advice.append("Graph replays: profile one run with CUDA graphs off (torch.compile without "
                          "mode=\"reduce-overhead\", vLLM enforce_eager=True, SGLang --disable-cuda-graph) to see which "
                          "operators and modules the replayed kernels belong to")
        if any(k.startswith("direct") for k in by):
            advice.append("Direct launches: register the kernel as a custom op (torch.library.custom_op, "
                          "torch.library.triton_op) or wrap its call in torch.profiler.record_function so the views can "
                          "name it")
        if by["no launch recorded"]:
            advice.append("No launch recorded: the profiler lost the launching runtime calls (a full activity buffer, "
                          "or launches from a thread it did not trace); record fewer steps per trace or with_stack=False")
        yield self.finding(
            ctx,
            f"{share:.0%} of the step's kernel time ({sum(by.values()) / m.num_steps / 1000:.3g} ms per step) was "
            f"launched outside any operator: {parts}; the operators and modules views cannot attribute it",
            ". ".join(advice) + ".",
            evidence=(Evidence("outside_operator_share", round(share, 4), ctx.opt("min_share"), "fraction",
                               events=event_refs(sorted((kernels[i] for i in out_at.tolist()), key=lambda k: -k.dur)),
                               extra={k.replace(" ", "_"): round(v / total, 4) for k, v in by.items()}),),
        )


def _sum(values: np.ndarray) -> float:
    """The sum of ``values`` added left to right (as Python's ``sum`` over the events): 0.0 when empty."""
    return float(np.cumsum(values)[-1]) if len(values) else 0.0


def _words(kind: str) -> str:
    if kind == "graph replay":
        return "replayed from CUDA/HIP graphs"
    if kind == "no launch recorded":
        return "with no launch in the trace"
    return "launched directly by " + kind.split(" ", 1)[1]

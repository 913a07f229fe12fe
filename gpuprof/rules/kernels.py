"""GP301: the GPU waits on kernel launches (many tiny kernels)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from itertools import compress
from typing import Iterable

import numpy as np

from gpuprof.codespec import Option
from gpuprof.findings import Evidence, Finding, Severity, SourceLocation
from gpuprof.rules.base import Rule, RuleContext, event_refs, register
from gpuprof.rules.cause import CauseFigure, idle_part_per_step
from gpuprof.rules.whatif import ReplayContext, WhatIf
from gpuprof.trace.arrays import median
from gpuprof.trace.columns import columns, gpu_columns
from gpuprof.trace.critpath.replay import Removal
from gpuprof.trace.intervals import Intervals
from gpuprof.trace.metrics import TraceMetrics
from gpuprof.trace.model import Event
from gpuprof.trace.shapes import step_shapes
from gpuprof.trace.vocab import RuntimeClass, classify_runtime
from gpuprof.units import fmt_us

__all__ = ["LaunchBound", "LaunchStats", "launch_stats", "is_graph_launch"]


@dataclass
class LaunchStats:
    """Kernel-launch figures of the main device over the step windows.

    * ``kernels``: compute kernels (not NCCL/RCCL collectives) of the main device
      that start inside a step window.
    * ``tiny``: those shorter than the tiny-kernel threshold.
    * ``median_us``: median kernel duration.
    * ``launch_idle_us``: **launch overhead**, the time inside the step windows
      when the main device ran nothing (no kernel, copy or memset) while a host
      thread was inside a runtime call that launched work on that device
      (``cudaLaunchKernel``, ``cuLaunchKernel``, ``hipLaunchKernel``, ...)
      lasting at most ``max_launch_us``: a longer call is not per-launch
      overhead but a one-off (lazy loading of the kernel's module on first
      use, a full launch queue).
    * ``launch_interval_us``: **launch cadence**, the median time between the
      starts of consecutive launch calls of those kernels (in time order, all
      host threads); None with fewer than two launches.
    * ``optimizer_tiny``: tiny kernels launched from inside
      ``Optimizer.step``/``zero_grad`` on the main thread.
    * ``graph_kernels``/``graph_launches``: kernels replayed from CUDA/HIP
      graphs (their correlation id is a ``cudaGraphLaunch``/``hipGraphLaunch``
      call) and those graph launches, inside the steps. Graph kernels pay no
      launch each, so they are left out of every figure above.
    * ``top_ops``: the operators that launched the most tiny kernels.
    * ``location``: the user's source line around the first tiny-kernel launch
      of the top operator (when the trace has Python stacks).
    """

    kernels: list[Event]
    tiny: list[Event]
    median_us: float
    launch_idle_us: float
    launch_interval_us: float | None
    optimizer_tiny: int
    top_ops: list[tuple[str, int]]
    location: SourceLocation | None = None
    graph_kernels: int = 0
    graph_launches: int = 0


# Runtime calls that replay a captured graph: one call launches every kernel of the graph.
_GRAPH_LAUNCH = ("cudaGraphLaunch", "hipGraphLaunch", "cuGraphLaunch")


def is_graph_launch(name: str) -> bool:
    """A CUDA/HIP graph replay (``cudaGraphLaunch``, ``hipGraphLaunch``, ``cuGraphLaunch``...)."""
    return name.startswith(_GRAPH_LAUNCH)


def launch_stats(m: TraceMetrics, tiny_us: float, max_launch_us: float = float("inf")) -> LaunchStats | None:
    """Compute :class:`LaunchStats` (None without GPU activity or steps)."""
    dev = m.main_device
    if dev is None or not m.steps:
        return None
    trace = m.trace
    rc = columns(trace, trace.runtime)
    gc = gpu_columns(trace)
    launch = m.gpu_launch  # per GPU event, its launch call in trace.runtime (-1: none)
    # per distinct runtime name, once: graph replays and (other) launch calls
    is_graph = np.fromiter(map(is_graph_launch, rc.names), bool, len(rc.names))
    is_launch = np.fromiter((classify_runtime(n) is RuntimeClass.LAUNCH for n in rc.names), bool, len(rc.names)) & ~is_graph
    at = m.step_kernel_at  # the step kernels' positions (trace.kernels come first in the GPU columns)
    k_launch = launch[at]
    graph_kernels = 0
    graph_calls = 0
    if is_graph.any():  # replayed graphs: no launch per kernel, so not what this rule measures
        replayed = (k_launch >= 0) & is_graph[rc.name_code[np.maximum(k_launch, 0)]]
        graph_kernels = int(replayed.sum())
        graph_calls = len(np.unique(gc.corr[at[replayed]]))
        at, k_launch = at[~replayed], k_launch[~replayed]
    if not len(at):
        return None
    kernels: list[Event] = list(map(trace.kernels.__getitem__, at.tolist()))
    k_dur = gc.dur[at]
    is_tiny = k_dur < tiny_us
    tiny = list(compress(kernels, is_tiny.tolist()))
    # Launch calls that put work on the main device, from any host thread (once per GPU event, in GPU-event order)
    call = launch[(gc.device == dev) & (launch >= 0)]
    call = call[is_launch[rc.name_code[call]] & (rc.dur[call] <= max_launch_us)]
    launches = Intervals.from_spans(rc.ts[call], rc.dur[call]) if len(call) else Intervals.empty()  # union_of(calls)
    idle = Intervals.from_pairs(m.windows).subtract(m.gpu_busy.get(dev, Intervals.empty()))
    launch_idle = idle.intersect(launches).total()

    kernel_launch_ts = np.sort(rc.ts[k_launch[k_launch >= 0]])
    launch_interval = median(np.diff(kernel_launch_ts)) if len(kernel_launch_ts) > 1 else None
    tiny_at = k_launch[is_tiny]
    tiny_at = tiny_at[tiny_at >= 0]  # the launch calls of the tiny kernels, in the kernels' order
    optimizer = m.host_intervals.get("optimizer", Intervals.empty())
    optimizer_tiny = 0
    if optimizer and len(tiny_at):
        optimizer_tiny = int(optimizer.covers(rc.ts[tiny_at]).sum())
    get_op = m.op_by_ext.get
    launching_ops = list(map(get_op, rc.ext[tiny_at].tolist()))
    ops = Counter(o.name for o in launching_ops if o is not None)
    top_ops = ops.most_common(3)
    location = None
    if top_ops:
        top = top_ops[0][0]
        i, op = next((i, o) for i, o in zip(tiny_at.tolist(), launching_ops) if o is not None and o.name == top)
        launch_call = trace.runtime[i]
        location = m.stacks.location(launch_call.pid, launch_call.tid, launch_call.ts, op=op)
    return LaunchStats(
        kernels=kernels,
        tiny=tiny,
        median_us=median(k_dur),
        launch_idle_us=launch_idle,
        launch_interval_us=launch_interval,
        optimizer_tiny=optimizer_tiny,
        top_ops=top_ops,
        location=location,
        graph_kernels=graph_kernels,
        graph_launches=graph_calls,
    )


def launch_gaps(ctx: ReplayContext, f: Finding) -> Removal:
    """GP301's what-if: the launch gaps closed, as one CUDA graph launch per stretch would."""
    return Removal(close_launch_gaps=True)


@register
class LaunchBound(Rule):
    """The GPU runs tiny kernels and waits for the host to launch the next one.

    Judged on the main device over the profiled steps by launch gaps and
    kernel sizes, whatever the number of kernels per step (a small model
    with a handful of kernels can be launch-bound too). All of:

    * kernel sizes: at least ``min_tiny_share`` of the kernels are shorter
      than ``tiny_us``, and the median kernel is shorter than the **launch
      cadence** (median time between consecutive launches): each kernel ends
      before the next one is launched, so no queue builds up;
    * launch gaps: the **launch overhead** (GPU idle while a host thread was
      inside a launch call for that GPU, see :class:`LaunchStats`) is at
      least ``min_launch_share`` of the step;
    * the GPU is busy less than ``max_utilization`` of the step.

    Each launch costs the host 5-20 µs of runtime call
    plus the Python and dispatcher work around it; when kernels run for less
    than that, the GPU finishes each one before the next arrives and the
    step's speed is set by the CPU, not the GPU. The cost is the launch
    overhead per step: the GPU time a launch-free schedule (CUDA graphs) would
    give back, a lower bound since Python time between launches idles the GPU
    too.

    The advice depends on the steps' shapes (``gpuprof.trace.shapes``, from
    ``Input Dims``): static shapes make the step a CUDA-graph candidate
    (``mode="reduce-overhead"``, ``torch.cuda.graph``); shapes that change
    from step to step need padding or bucketing first; steps that already
    replay CUDA graphs get advice about the kernels launched outside them.
    """

    code = "GP301"
    name = "launch-bound"
    title = "Launch-bound: many tiny kernels, GPU waiting on launches"
    what_if = WhatIf("launch gaps closed, as one CUDA graph launch per stretch", launch_gaps)
    cause = CauseFigure("GPU idle in runtime (launch) calls", idle_part_per_step("runtime"))
    severity = Severity.WARNING
    options = (
        Option("tiny_us", 10.0, "kernels shorter than this many µs count as tiny"),
        Option("max_launch_us", 100.0, "launch calls longer than this (µs) are one-offs (lazy module loading), not launch overhead"),
        Option("min_tiny_share", 0.5, "report when at least this share of kernels is tiny"),
        Option("min_launch_share", 0.05, "...and the launch overhead is at least this share of the step"),
        Option("max_utilization", 0.8, "...and the GPU is busy less than this share of the step"),
        Option("error_above", 0.25, "launch overhead above this share of the step is an error"),
    )
    bad_example = """
        model = SmallMLP().cuda()                       # a few µs of GPU work per layer
        opt = torch.optim.Adam(model.parameters(), foreach=False)
        for x, y in loader:                             # batch_size=8
            loss = F.cross_entropy(model(x), y)         # hundreds of tiny kernels, one launch each
            loss.backward(); opt.step(); opt.zero_grad()
    """
    good_example = """
        model = torch.compile(SmallMLP().cuda(), mode="reduce-overhead")   # fused kernels in CUDA graphs
        opt = torch.optim.Adam(model.parameters(), fused=True)
        for x, y in loader:                             # batch_size=256: more work per launch
            loss = F.cross_entropy(model(x), y)
            loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
    """

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        m = ctx.metrics
        st = launch_stats(m, ctx.opt("tiny_us"), ctx.opt("max_launch_us"))
        if st is None:
            return
        n_steps = m.num_steps
        step_us = m.mean_step_time
        tiny_share = len(st.tiny) / len(st.kernels)
        launch_per_step = st.launch_idle_us / n_steps
        launch_share = launch_per_step / step_us if step_us > 0 else 0.0
        util = m.gpu_utilization or 0.0
        if tiny_share < ctx.opt("min_tiny_share") or launch_share < ctx.opt("min_launch_share"):
            return
        per_step = len(st.kernels) / n_steps
        if util >= ctx.opt("max_utilization"):
            return
        if st.launch_interval_us is None or st.median_us >= st.launch_interval_us:
            return  # kernels outlast the launch cadence: work queues up, the launches are not what the GPU waits on
        ops = ", ".join(f"{name} ({n})" for name, n in st.top_ops)
        shapes = step_shapes(m)
        if st.graph_launches:
            advice = [
                f"The steps already replay CUDA graphs ({st.graph_launches / n_steps:.3g} graph launches per step, "
                f"{st.graph_kernels / n_steps:.3g} kernels per step inside them, not counted here); the tiny kernels "
                "above are launched one by one outside the graphs: bring that code into the graphed region "
                "(torch.compile mode=\"reduce-overhead\" over the whole step, a larger torch.cuda.graph capture) "
                "or give it more work per launch",
            ]
        elif shapes.static:
            advice = [
                f"The step is a CUDA-graph candidate: its matmul/conv shapes are the same in each of the "
                f"{shapes.steps} steps, so torch.compile(model, mode=\"reduce-overhead\") can fuse the element-wise "
                "kernels and replay the step as one CUDA graph (or capture it yourself with torch.cuda.graph / "
                "torch.cuda.make_graphed_callables); a larger batch size also gives each launch more work",
            ]
        elif shapes.static is False:
            advice = [
                f"Shapes change from step to step ({shapes.distinct} distinct matmul/conv shapes over {shapes.steps} "
                f"steps, {shapes.ratio:g}x a step's): CUDA graphs need static shapes, and "
                "torch.compile(mode=\"reduce-overhead\") would record a graph per shape. Pad or bucket inputs to "
                "a few fixed sizes first (DataLoader collate padding to a multiple, drop_last=True), then use "
                "reduce-overhead; a larger batch size also gives each launch more work",
            ]
        else:
            advice = [
                "Give the GPU more work per launch: a larger batch size; "
                "torch.compile(model, mode=\"reduce-overhead\") to fuse element-wise kernels and replay them as CUDA "
                "graphs (or capture the step yourself with torch.cuda.graph / torch.cuda.make_graphed_callables, "
                "which needs static shapes)",
            ]
        if st.optimizer_tiny:
            advice.append(
                f"{st.optimizer_tiny} of the tiny kernels come from the optimizer: use "
                "torch.optim.AdamW(..., fused=True) (or foreach=True), and zero_grad(set_to_none=True)"
            )
        else:
            advice.append("use fused/foreach optimizers (torch.optim.AdamW(..., fused=True))")
        advice.append(
            "replace Python loops over small tensors with batched tensor ops (fewer, larger kernels)"
            + (f"; most tiny kernels are launched by {ops}" if ops else "")
        )
        sev = Severity.ERROR if launch_share > ctx.opt("error_above") else Severity.WARNING
        yield self.finding(
            ctx,
            f"Launch-bound: {tiny_share:.0%} of the {len(st.kernels)} kernels in {n_steps} steps run < "
            f"{ctx.opt('tiny_us'):g} µs (median kernel {fmt_us(st.median_us)}, median time between launches "
            f"{fmt_us(st.launch_interval_us)}, {per_step:.3g} kernels per step); "
            f"the GPU is busy {util:.0%} of the step time",
            "; ".join(advice) + ".",
            evidence=[
                Evidence("tiny_kernel_share", round(tiny_share, 4), ctx.opt("min_tiny_share"), "fraction",
                         events=event_refs(st.tiny),
                         extra={"kernels": len(st.kernels), "tiny_kernels": len(st.tiny), "tiny_us": ctx.opt("tiny_us"),
                                "kernels_per_step": round(per_step, 1), "median_kernel_us": round(st.median_us, 2),
                                "launch_interval_us": round(st.launch_interval_us, 2),
                                "optimizer_tiny_kernels": st.optimizer_tiny, "top_ops": dict(st.top_ops),
                                "graph_launches": st.graph_launches, "graph_kernels": st.graph_kernels,
                                "static_shapes": shapes.static, "shape_ratio": shapes.ratio}),
                Evidence("launch_overhead_share", round(launch_share, 4), ctx.opt("min_launch_share"), "fraction",
                         extra={"launch_overhead_us_per_step": round(launch_per_step, 1),
                                "gpu_utilization": round(util, 4)}),
            ],
            cost_us_per_step=launch_per_step, cost_label="GPU idle while the host was inside kernel-launch calls",
            location=st.location, severity=sev,
        )

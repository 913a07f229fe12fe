"""GP301: the GPU waits on kernel launches (many tiny kernels)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Iterable

import numpy as np

from gpuprof.findings import Evidence, Finding, Severity, SourceLocation
from gpuprof.rules.base import Option, Rule, RuleContext, event_refs, register
from gpuprof.trace.arrays import median
from gpuprof.trace.intervals import Intervals
from gpuprof.trace.metrics import TraceMetrics, union_of
from gpuprof.trace.model import Event, dur_of, ts_of
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
    kernels = m.step_kernels
    graph_names = {n for n in {r.name for r in m.launch_by_corr.values()} if is_graph_launch(n)}
    graph_kernels = 0
    graph_calls: set[int] = set()
    if graph_names:  # replayed graphs: no launch per kernel, so not what this rule measures
        eager = []
        for k in kernels:
            r = m.launch_by_corr.get(k.corr)
            if r is not None and r.name in graph_names:
                graph_kernels += 1
                graph_calls.add(k.corr)
            else:
                eager.append(k)
        kernels = eager
    if not kernels:
        return None
    tiny = [k for k in kernels if k.dur < tiny_us]
    # Launch calls that put work on the main device, from any host thread.
    launch_names = {n for n in {r.name for r in m.launch_by_corr.values()}
                    if classify_runtime(n) is RuntimeClass.LAUNCH and n not in graph_names}
    calls = [
        r
        for events in (m.trace.kernels, m.trace.memcpys, m.trace.memsets)
        for r in map(m.launch_by_corr.get, (g.corr for g in events if g.device == dev))
        if r is not None and r.name in launch_names and r.dur <= max_launch_us
    ]
    launches = union_of(calls)
    idle = Intervals.from_pairs(m.windows).subtract(m.gpu_busy.get(dev, Intervals.empty()))
    launch_idle = idle.intersect(launches).total()

    get_launch, get_op = m.launch_by_corr.get, m.op_by_ext.get
    kernel_launch_ts = np.sort(np.fromiter(
        (r.ts for r in map(get_launch, [k.corr for k in kernels]) if r is not None), np.float64))
    launch_interval = median(np.diff(kernel_launch_ts)) if len(kernel_launch_ts) > 1 else None
    tiny_launches = [r for r in map(get_launch, [k.corr for k in tiny]) if r is not None]
    optimizer = m.host_intervals.get("optimizer", Intervals.empty())
    optimizer_tiny = 0
    if optimizer and tiny_launches:
        t = np.fromiter(map(ts_of, tiny_launches), np.float64, len(tiny_launches))
        optimizer_tiny = int(optimizer.covers(t).sum())
    launching_ops = [get_op(r.ext) for r in tiny_launches]
    ops = Counter(o.name for o in launching_ops if o is not None)
    top_ops = ops.most_common(3)
    location = None
    if top_ops:
        top = top_ops[0][0]
        launch, op = next((r, o) for r, o in zip(tiny_launches, launching_ops) if o is not None and o.name == top)
        location = m.stacks.location(launch.pid, launch.tid, launch.ts, op=op)
    return LaunchStats(
        kernels=kernels,
        tiny=tiny,
        median_us=median(np.fromiter(map(dur_of, kernels), np.float64, len(kernels))),
        launch_idle_us=launch_idle,
        launch_interval_us=launch_interval,
        optimizer_tiny=optimizer_tiny,
        top_ops=top_ops,
        location=location,
        graph_kernels=graph_kernels,
        graph_launches=len(graph_calls),
    )


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
                Evidence(
                    "tiny_kernel_share",
                    round(tiny_share, 4),
                    ctx.opt("min_tiny_share"),
                    "fraction",
                    events=event_refs(st.tiny),
                    extra={
                        "kernels": len(st.kernels),
                        "tiny_kernels": len(st.tiny),
                        "tiny_us": ctx.opt("tiny_us"),
                        "kernels_per_step": round(per_step, 1),
                        "median_kernel_us": round(st.median_us, 2),
                        "launch_interval_us": round(st.launch_interval_us, 2),
                        "optimizer_tiny_kernels": st.optimizer_tiny,
                        "top_ops": dict(st.top_ops),
                        "graph_launches": st.graph_launches,
                        "graph_kernels": st.graph_kernels,
                        "static_shapes": shapes.static,
                        "shape_ratio": shapes.ratio,
                    },
                ),
                Evidence(
                    "launch_overhead_share",
                    round(launch_share, 4),
                    ctx.opt("min_launch_share"),
                    "fraction",
                    extra={"launch_overhead_us_per_step": round(launch_per_step, 1), "gpu_utilization": round(util, 4)},
                ),
            ],
            cost_us_per_step=launch_per_step,
            cost_label="GPU idle while the host was inside kernel-launch calls",
            location=st.location,
            severity=sev,
        )

"""GP205: expensive CUDA/HIP runtime calls on the host inside steps."""

from __future__ import annotations

from collections import defaultdict
from typing import Iterable

from gpuprof.findings import Evidence, Finding, Severity, SourceLocation
from gpuprof.rules.base import Option, Rule, RuleContext, event_refs, register
from gpuprof.rules.common import host_step_of, kernel_idle_within, of_step
from gpuprof.trace.metrics import TraceMetrics
from gpuprof.trace.model import Event
from gpuprof.trace.vocab import RuntimeClass, classify_runtime
from gpuprof.units import fmt_us

__all__ = ["ExpensiveRuntimeCalls", "is_allocator_call"]

# Virtual-memory driver calls of the caching allocator with expandable_segments.
_VMM_CALLS = ("cuMemCreate", "cuMemMap", "cuMemUnmap", "cuMemRelease", "cuMemAddressReserve", "cuMemAddressFree",
              "cuMemSetAccess", "hipMemCreate", "hipMemMap", "hipMemUnmap", "hipMemRelease",
              "hipMemAddressReserve", "hipMemAddressFree", "hipMemSetAccess")
# Calls other rules report (launch overhead, copies, syncs) or that are cheap by design.
_ELSEWHERE = (RuntimeClass.LAUNCH, RuntimeClass.MEMCPY, RuntimeClass.SYNC)


def is_allocator_call(name: str) -> bool:
    """Device or pinned-host memory allocation/free: cudaMalloc, cudaFree, cudaMallocHost, cudaHostAlloc, hipFree, cuMemMap..."""
    rc = classify_runtime(name)
    return rc in (RuntimeClass.MALLOC, RuntimeClass.FREE) or name.startswith(_VMM_CALLS)


def _interest(name: str) -> bool | None:
    """True: an allocator call; False: a call this rule times; None: reported elsewhere or cheap by design."""
    if is_allocator_call(name):
        return True
    rc = classify_runtime(name)
    if rc in _ELSEWHERE or (rc is RuntimeClass.MEMSET and name.endswith("Async")):
        return None
    return False


def _location(m: TraceMetrics, r: Event) -> SourceLocation | None:
    op = m.op_by_ext.get(r.ext) if r.ext >= 0 else None
    return m.stacks.location(r.pid, r.tid, r.ts, op=op)


def _cost(m: TraceMetrics, calls: list[Event]) -> float:
    """Per step: time inside ``calls`` when the main GPU ran no kernel (their whole length without a GPU)."""
    host = [(r.ts, r.end) for r in calls]
    if m.main_device is None:
        return sum(r.dur for r in calls) / m.num_steps
    return kernel_idle_within(m, host) / m.num_steps


@register
class ExpensiveRuntimeCalls(Rule):
    """Slow CUDA/HIP runtime calls made on the host inside training steps.

    Two patterns, from the runtime events inside the steps' host ranges:

    * **allocator churn**: ``cudaMalloc``/``cudaFree``/``cudaMallocHost``/
      ``cudaHostAlloc``/``hipFree`` (and the ``cuMemMap`` family of
      ``expandable_segments``) in at least ``min_step_fraction`` of the steps.
      PyTorch's caching allocator normally allocates once and reuses: calls
      every step mean the cache is emptied (``torch.cuda.empty_cache()``), the
      memory is too fragmented to reuse blocks, or pinned buffers are created
      each step. ``cudaFree`` also waits for the whole device.
    * **long synchronous calls**: any other runtime call (not a launch, copy
      or synchronisation, which other rules report) whose time per step is at
      least ``min_us_per_step`` and ``min_share`` of the step (stream/event
      creation, module loading, attribute queries in a loop...).

    Time per step = summed call time / number of steps. The cost is the part
    of that time when the main GPU ran no kernel.
    """

    code = "GP205"
    name = "expensive-runtime-calls"
    title = "Expensive runtime calls (allocator churn, slow synchronous calls) inside steps"
    severity = Severity.WARNING
    options = (
        Option("min_step_fraction", 0.5, "allocator calls in at least this fraction of steps are churn"),
        Option("min_steps", 2, "need at least this many steps to tell churn from warm-up"),
        Option("min_us_per_step", 500.0, "report runtime calls taking at least this long per step (µs)"),
        Option("min_share", 0.01, "and at least this share of the step"),
    )
    bad_example = """
        for x, y in loader:
            loss = model(x.cuda()).sum()
            loss.backward(); opt.step()
            torch.cuda.empty_cache()              # next step must cudaMalloc everything again
    """
    good_example = """
        # export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True   (less fragmentation)
        for x, y in loader:                       # fixed shapes: cached blocks are reused
            loss = model(x.cuda(non_blocking=True)).sum()
            loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
    """

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        m = ctx.metrics
        if m.num_steps < ctx.opt("min_steps") or not m.has_step_markers:
            return  # one big "step" cannot tell set-up calls from per-step ones
        alloc: list[Event] = []
        other: dict[str, list[Event]] = defaultdict(list)
        wanted = {name: _interest(name) for name in {r.name for r in m.trace.runtime}}  # per distinct name, once
        for r in m.trace.runtime:
            what = wanted[r.name]
            if what is None or host_step_of(m, r.ts) is None:
                continue
            if what:
                alloc.append(r)
            else:
                other[r.name].append(r)
        yield from self._churn(ctx, alloc)
        for name, calls in other.items():
            yield from self._long_calls(ctx, name, calls)

    def _churn(self, ctx: RuleContext, calls: list[Event]) -> Iterable[Finding]:
        m = ctx.metrics
        if not calls:
            return
        steps_hit = {host_step_of(m, r.ts) for r in calls}
        frac = len(steps_hit) / m.num_steps
        if frac < ctx.opt("min_step_fraction"):
            return
        n = m.num_steps
        per_name: dict[str, int] = defaultdict(int)
        for r in calls:
            per_name[r.name] += 1
        time_ps = sum(r.dur for r in calls) / n
        cost = _cost(m, calls)
        counts = ", ".join(f"{k} ×{v / n:.3g}" for k, v in sorted(per_name.items(), key=lambda kv: -kv[1]))
        frees = any(classify_runtime(k) is RuntimeClass.FREE or k.startswith(("cuMemUnmap", "hipMemUnmap")) for k in per_name)
        advice = (
            "Memory is returned to the driver inside the loop: remove torch.cuda.empty_cache() (and gc-driven "
            "frees) from the step. " if frees else ""
        ) + (
            "Keep tensor shapes stable so cached blocks are reused (pad variable-length batches to a few bucket "
            "sizes), set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True against fragmentation, and allocate "
            "pinned host buffers once, outside the loop."
        )
        yield self.finding(
            ctx,
            f"Allocator calls in {len(steps_hit)} of {n} steps ({counts} per step): "
            f"{fmt_us(time_ps)} per step in cudaMalloc/cudaFree-like calls",
            advice,
            evidence=[
                Evidence(
                    "steps_with_allocator_calls_fraction",
                    round(frac, 4),
                    ctx.opt("min_step_fraction"),
                    "fraction",
                    events=event_refs(calls),
                    extra={
                        "calls_per_step": {k: round(v / n, 3) for k, v in per_name.items()},
                        "allocator_us_per_step": round(time_ps, 1),
                        "kernel_idle_us_per_step": round(cost, 1),
                    },
                )
            ],
            cost_us_per_step=cost,
            cost_label="time in these calls with no kernel running",
            location=_location(m, max(calls, key=lambda r: r.dur)),
        )

    def _long_calls(self, ctx: RuleContext, name: str, calls: list[Event]) -> Iterable[Finding]:
        m = ctx.metrics
        n = m.num_steps
        time_ps = sum(r.dur for r in calls) / n
        share = time_ps / m.mean_step_time if m.mean_step_time > 0 else 0.0
        if time_ps < ctx.opt("min_us_per_step") or share < ctx.opt("min_share"):
            return
        longest = max(calls, key=lambda r: r.dur)
        cost = _cost(m, calls)
        yield self.finding(
            ctx,
            f"{name} takes {of_step(m, time_ps)} ({len(calls) / n:.3g} calls per step, "
            f"longest call {fmt_us(longest.dur)})",
            f"Move {name} out of the training step: create streams/events, query device attributes and load "
            "modules once at start-up and reuse them.",
            evidence=[
                Evidence(
                    "runtime_us_per_step",
                    round(time_ps, 1),
                    ctx.opt("min_us_per_step"),
                    "us",
                    events=event_refs(sorted(calls, key=lambda r: -r.dur)),
                    extra={
                        "call": name,
                        "calls_per_step": round(len(calls) / n, 3),
                        "longest_us": round(longest.dur, 1),
                        "share_of_step": round(share, 4),
                        "kernel_idle_us_per_step": round(cost, 1),
                    },
                )
            ],
            cost_us_per_step=cost,
            cost_label="time in these calls with no kernel running",
            location=_location(m, longest),
        )

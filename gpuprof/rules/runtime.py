"""GP205: expensive CUDA/HIP runtime calls on the host inside steps; GP206: one-off start-up calls."""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass
from itertools import repeat
from typing import Iterable

import numpy as np

from gpuprof.codespec import Option
from gpuprof.findings import Evidence, Finding, Severity, SourceLocation
from gpuprof.rules.base import Rule, RuleContext, event_refs, register
from gpuprof.rules.common import host_step_of, host_steps_at, kernel_idle_within, of_step
from gpuprof.rules.whatif import ReplayContext, WhatIf
from gpuprof.trace.columns import Columns, columns
from gpuprof.trace.critpath.replay import Removal
from gpuprof.trace.intervals import Intervals
from gpuprof.trace.metrics import TraceMetrics
from gpuprof.trace.model import Event
from gpuprof.trace.phase import trace_phase
from gpuprof.trace.threads import thread_keys
from gpuprof.trace.vocab import RuntimeClass, classify_runtime
from gpuprof.units import fmt_us

__all__ = ["ExpensiveRuntimeCalls", "StartupCost", "is_allocator_call", "first_use_calls", "FirstUse"]

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


def call_names(f: Finding) -> set[str]:
    """The runtime calls a GP205 finding's evidence names (``call``; the keys of ``calls_per_step``/``calls``: the
    evidence :class:`ExpensiveRuntimeCalls` writes, read back beside where it is written)."""
    out: set[str] = set()
    for ev in f.evidence:
        one = ev.extra.get("call")
        if isinstance(one, str):
            out.add(one)
        for key in ("calls_per_step", "calls"):
            many = ev.extra.get(key)
            if isinstance(many, dict):
                out.update(k for k in many if isinstance(k, str))
    return out


def startup_spans(findings: Iterable[Finding]) -> Intervals:
    """The calls GP206 reports as one-off start-up work: never a per-step cost to cut (GP205 leaves them out)."""
    refs = [e for f in findings if f.code == "GP206" for ev in f.evidence for e in ev.events]
    return Intervals.from_pairs((e.ts, e.ts + e.dur) for e in refs) if refs else Intervals.empty()


def runtime_calls(ctx: ReplayContext, f: Finding) -> Removal:
    """GP205's what-if: the main thread's time in the calls the finding names (its evidence: the allocator calls of
    a churn finding, the one slow call of a long-call finding), cut out of its time line: the fix makes them cheap
    (a warm caching allocator) or moves them out of the step (created once at start-up). The calls GP206 reports as
    start-up work are not cut."""
    names = call_names(f)
    cut = Intervals.empty()
    for name, calls in ctx.graph.host_runtime:
        if name in names:
            cut = cut.union(calls)
    if cut:
        if "startup" not in ctx.memo:
            ctx.memo["startup"] = startup_spans(ctx.findings)
        cut = cut.subtract(ctx.memo["startup"])
    return Removal(cut_host=cut)


def calls_elsewhere_us(ctx: ReplayContext, f: Finding) -> float:
    """Per step, the time of the finding's calls inside the steps on host threads other than the main one."""
    g, m = ctx.graph, ctx.metrics
    names = call_names(f)
    if not g.steps or not names or not m.trace.runtime:
        return 0.0
    rc = columns(m.trace, m.trace.runtime)
    named_ = np.fromiter((n in names for n in rc.names), bool, len(rc.names))[rc.name_code]
    keys = thread_keys(m.main_thread)
    other = np.fromiter((t not in keys for t in rc.threads), bool, len(rc.threads))[rc.thread_code]
    lo, hi = g.steps[0][0], max(s[2] for s in g.steps)
    at = named_ & other & (rc.ts >= lo) & (rc.ts <= hi)
    return float(rc.dur[at].sum()) / len(g.steps)


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

    **Traces without step markers** (one whole-trace step, after the lead-in)
    cannot show "every step", so churn is judged by count and against the GPU
    work: at least ``min_calls_whole_trace`` allocator calls whose time with
    no kernel running is at least ``min_busy_ratio`` of the GPU's busy time
    and ``min_share`` of the trace (none without recorded GPU work). Long
    calls use the same thresholds over the trace, and must meet them without
    their longest call (one long call is one-off work). One-off start-up calls
    (see GP206) are GP206's when it runs, never counted twice.
    """

    code = "GP205"
    name = "expensive-runtime-calls"
    title = "Expensive runtime calls (allocator churn, slow synchronous calls) inside steps"
    what_if = WhatIf("the named runtime calls' host time cut (allocator warm, calls hoisted out of the step)",
                     runtime_calls, elsewhere_us=calls_elsewhere_us)
    severity = Severity.WARNING
    options = (
        Option("min_step_fraction", 0.5, "allocator calls in at least this fraction of steps are churn"),
        Option("min_steps", 2, "need at least this many steps to tell churn from warm-up"),
        Option("min_us_per_step", 500.0, "report runtime calls taking at least this long per step (µs)"),
        Option("min_share", 0.01, "and at least this share of the step"),
        Option("min_calls_whole_trace", 10, "without step markers: need at least this many allocator calls"),
        Option("min_busy_ratio", 0.10,
               "without step markers: allocator time with no kernel running must be at least this share of GPU busy time"),
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
        if not m.steps or (m.has_step_markers and m.num_steps < ctx.opt("min_steps")):
            return  # two steps at least to tell set-up calls from per-step ones
        if trace_phase(m) is not None:
            return  # a graph capture pass: its instantiation and capture calls are what recording needs
        startup = ctx.runs("GP206")
        skip = {id(f.call) for f in first_use_calls(m, startup["min_call_us"], startup["min_ratio"])} if startup else set()
        runtime = m.trace.runtime
        rc = columns(m.trace, runtime)
        # per distinct name, once: 1 an allocator call, 0 a call timed here, -1 none (launches, copies, syncs)
        interest = np.fromiter((-1 if (w := _interest(name)) is None else int(w) for name in rc.names), np.int8,
                               len(rc.names))[rc.name_code]
        keep = (interest >= 0) & (host_steps_at(m, rc.ts) >= 0)  # in a step
        if skip:
            keep &= ~np.fromiter(map(skip.__contains__, map(id, runtime)), bool, rc.n)
        at = np.flatnonzero(keep)
        alloc: list[Event] = list(map(runtime.__getitem__, at[interest[at] == 1].tolist()))
        at = at[interest[at] == 0]
        # the calls of each name in list order, names in order of first call
        by_code = np.argsort(rc.name_code[at], kind="stable")  # by name, in list order within one
        code = rc.name_code[at][by_code]
        starts = np.flatnonzero(np.concatenate(([True], code[1:] != code[:-1]))) if len(code) else np.zeros(0, np.int64)
        ends = np.append(starts[1:], len(code))
        other: dict[str, list[Event]] = {}
        for g in np.argsort(by_code[starts], kind="stable").tolist():  # names in order of first call
            a, b = int(starts[g]), int(ends[g])
            other[rc.names[int(code[a])]] = list(map(runtime.__getitem__, at[by_code[a:b]].tolist()))
        yield from self._churn(ctx, alloc)
        for name, calls in other.items():
            yield from self._long_calls(ctx, name, calls)

    def _churn(self, ctx: RuleContext, calls: list[Event]) -> Iterable[Finding]:
        m = ctx.metrics
        if not calls:
            return
        if not m.has_step_markers:
            yield from self._churn_whole_trace(ctx, calls)
            return
        steps_hit = {host_step_of(m, r.ts) for r in calls}
        frac = len(steps_hit) / m.num_steps
        if frac < ctx.opt("min_step_fraction"):
            return
        n = m.num_steps
        per_name = Counter(r.name for r in calls)
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
        evidence = Evidence("steps_with_allocator_calls_fraction", round(frac, 4), ctx.opt("min_step_fraction"),
                            "fraction", events=event_refs(calls),
                            extra={"calls_per_step": {k: round(v / n, 3) for k, v in per_name.items()},
                                   "allocator_us_per_step": round(time_ps, 1), "kernel_idle_us_per_step": round(cost, 1)})
        yield self._calls_finding(
            ctx, f"Allocator calls in {len(steps_hit)} of {n} steps ({counts} per step): "
            f"{fmt_us(time_ps)} per step in cudaMalloc/cudaFree-like calls", advice, evidence, cost,
            max(calls, key=lambda r: r.dur))

    def _churn_whole_trace(self, ctx: RuleContext, calls: list[Event]) -> Iterable[Finding]:
        """Churn in a trace without steps: many allocator calls whose idle time weighs against the GPU work."""
        m = ctx.metrics
        if len(calls) < ctx.opt("min_calls_whole_trace"):
            return
        busy = m.gpu_busy_total()
        if busy <= 0:
            return  # no recorded GPU work (a CUPTI range-profiler trace): nothing to judge the calls against
        cost = _cost(m, calls)
        if cost < ctx.opt("min_share") * m.total_time or cost < ctx.opt("min_busy_ratio") * busy:
            return
        per_name = Counter(r.name for r in calls)
        total = sum(r.dur for r in calls)
        counts = ", ".join(f"{k} ×{v}" for k, v in sorted(per_name.items(), key=lambda kv: -kv[1]))
        ratio = f"{cost / busy:.1f}× the GPU's busy time ({fmt_us(busy)})"
        evidence = Evidence("allocator_idle_us_vs_gpu_busy", round(cost / busy, 4), ctx.opt("min_busy_ratio"), "ratio",
                            events=event_refs(sorted(calls, key=lambda r: -r.dur)),
                            extra={"calls": dict(per_name), "allocator_us": round(total, 1),
                                   "kernel_idle_us": round(cost, 1), "gpu_busy_us": round(busy, 1)})
        yield self._calls_finding(
            ctx,
            f"{len(calls)} allocator calls in a trace without step markers ({counts}): {fmt_us(total)} in "
            f"cudaMalloc/cudaFree-like calls, {fmt_us(cost)} of it with no kernel running, {ratio}",
            "Memory is allocated and returned to the driver while the GPU waits. Keep tensor shapes stable so "
            "cached blocks are reused, do not call torch.cuda.empty_cache() in the loop, set "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, allocate pinned buffers once; and profile a "
            "few steps after warm-up with torch.profiler.schedule(wait=1, warmup=1, active=3) so the steps "
            "show whether this repeats.", evidence, cost, max(calls, key=lambda r: r.dur))

    def _long_calls(self, ctx: RuleContext, name: str, calls: list[Event]) -> Iterable[Finding]:
        m = ctx.metrics
        n = m.num_steps
        time_ps = sum(r.dur for r in calls) / n
        share = time_ps / m.mean_step_time if m.mean_step_time > 0 else 0.0
        if time_ps < ctx.opt("min_us_per_step") or share < ctx.opt("min_share"):
            return
        longest = max(calls, key=lambda r: r.dur)
        if not m.has_step_markers:
            # one "step": a single long call is one-off work (GP206's), not a repeated cost
            rest = time_ps - longest.dur
            if rest < ctx.opt("min_us_per_step") or rest < ctx.opt("min_share") * m.mean_step_time:
                return
        cost = _cost(m, calls)
        per = "per step" if m.has_step_markers else "in the trace"
        evidence = Evidence("runtime_us_per_step", round(time_ps, 1), ctx.opt("min_us_per_step"), "us",
                            events=event_refs(sorted(calls, key=lambda r: -r.dur)),
                            extra={"call": name, "calls_per_step": round(len(calls) / n, 3),
                                   "longest_us": round(longest.dur, 1), "share_of_step": round(share, 4),
                                   "kernel_idle_us_per_step": round(cost, 1)})
        yield self._calls_finding(
            ctx, f"{name} takes {of_step(m, time_ps)} ({len(calls) / n:.3g} calls {per}, "
            f"longest call {fmt_us(longest.dur)})",
            f"Move {name} out of the training step: create streams/events, query device attributes and load "
            "modules once at start-up and reuse them.", evidence, cost, longest)

    def _calls_finding(self, ctx: RuleContext, message: str, advice: str, evidence: Evidence, cost: float,
                       longest: Event) -> Finding:
        """A finding on runtime calls: costed by their time with no kernel running, located at the longest."""
        return self.finding(ctx, message, advice, evidence=[evidence], cost_us_per_step=cost,
                            cost_label="time in these calls with no kernel running",
                            location=_location(ctx.metrics, longest))


@dataclass(frozen=True)
class FirstUse:
    """A runtime call that does one-off start-up work, and why it is taken for one."""

    call: Event
    what: str  # "the first CUDA/HIP call of the process (context creation)", "the first launch of K", ...
    others_median_us: float | None  # median of the other calls of the same kind (None: no other call)


def first_use_calls(m: TraceMetrics, min_call_us: float, min_ratio: float) -> list[FirstUse]:
    """:func:`_first_use_calls`, computed once per trace and thresholds (GP205 and GP206 both ask)."""
    return m.memo(_first_use_calls, min_call_us, min_ratio)


def _first_use_calls(m: TraceMetrics, min_call_us: float, min_ratio: float) -> list[FirstUse]:
    """Per process and kind of call, the slowest call when it is a one-off: slow, and much slower than the rest.

    Kind: a kernel launch is keyed by the kernel it launched (the first launch
    of a kernel loads its module under lazy loading), any other call by its
    name. Synchronisations and copies wait for the GPU, so they are never
    start-up work. The slowest call of a kind counts when it lasts at least
    ``min_call_us`` and at least ``min_ratio`` times the median of the others
    (any call when it is alone).
    A call slow every step is therefore never one-off work.
    """
    kernel_by_corr = {k.corr: k.name for k in m.trace.kernels if k.corr >= 0}
    first_of_pid, by_kind = _calls_by_kind(m.trace.runtime, kernel_by_corr, min_call_us, columns(m.trace, m.trace.runtime))
    out = []
    boundary = _startup_end(m)
    for kind, calls in by_kind:
        slow = max(calls, key=lambda r: r.dur)
        calls.sort(key=lambda r: r.ts)  # only the kinds with a slow call need their order
        # by position: every slow call before the first GPU work (or the first step) is start-up work, however
        # many of its kind there are (two slow start-up cudaFree calls must not hide each other)
        early = [r for r in calls if r.ts < boundary and r.dur >= min_call_us]
        for r in early:
            if first_of_pid.get(r.pid) is r:
                what = "the first CUDA/HIP call of the process (context creation)"
            else:
                what = f"{r.name} before the first {'step' if m.has_step_markers else 'GPU work'} (start-up)"
            out.append(FirstUse(r, what, None))
        if slow in early:
            continue
        if is_allocator_call(slow.name) and slow is not calls[0] and boundary > float("-inf"):
            continue  # a slow allocator call mid-run (not its kind's first) is churn or a cache miss: GP205's
        rest = [r.dur for r in calls if r is not slow]
        med = statistics.median(rest) if rest else None
        if med is not None and slow.dur < min_ratio * med:
            continue
        if first_of_pid.get(slow.pid) is slow:
            what = "the first CUDA/HIP call of the process (context creation)"
        elif kind.startswith("launch:") and slow.corr in kernel_by_corr:
            first = "the first launch" if calls[0] is slow else "a one-off launch"
            what = f"{first} of {short_kernel_name(kind[len('launch:'):])} (module loading)"
        elif kind.startswith("launch:"):
            what = f"a one-off {slow.name} (its kernel is not in the trace; module loading)"
        elif calls[0] is slow:
            what = f"the first {slow.name}"
        else:
            what = f"a one-off {slow.name} ({len(rest)} other call{'s' if len(rest) != 1 else ''}, median {fmt_us(med or 0.0)})"
        out.append(FirstUse(slow, what, med))
    out.sort(key=lambda f: f.call.ts)
    return out


def _calls_by_kind(runtime: list[Event], kernel_by_corr: dict[int, str], min_call_us: float,
                   cols: Columns | None = None) -> tuple[dict[object, Event], list[tuple[str, list[Event]]]]:
    """The first call (earliest, then first listed) of each process, and the calls of each
    (process, kind) of :func:`_first_use_calls` whose slowest lasts ``min_call_us`` or more, kinds in
    order of first call, calls in list order. Classes and kinds are found once per distinct name (and
    kernel), the grouping is a sort of codes: few kinds have a slow call, and only they are listed.
    ``cols``: ``runtime``'s columns when the caller has them (the trace's shared ones)."""
    n = len(runtime)
    if n == 0:
        return {}, []
    c = cols if cols is not None else Columns(runtime)
    ts, dur = c.ts, c.dur
    # process codes in order of first call: each thread's pid, threads in order of first call
    pcode: dict[object, int] = {}
    t_pc = np.fromiter((pcode.setdefault(t[0], len(pcode)) for t in c.threads), np.int64, len(c.threads))
    pc = t_pc[c.thread_code]
    idx = np.arange(n, dtype=np.int64)
    by_pid = np.lexsort((idx, ts, pc))  # per process: earliest first, then first listed
    heads = by_pid[np.concatenate(([True], np.diff(pc[by_pid]) != 0))]
    first_of_pid = {runtime[i].pid: runtime[i] for i in heads.tolist()}
    # kind of each call: "launch:" + the kernel it launched (else its own name) for a launch, else its name
    classes = {name: classify_runtime(name) for name in c.names}
    kinds: dict[str, int] = {}
    kind_of_name: dict[str, int] = {}  # non-launch calls
    launch_names: dict[str, int] = {}  # launch calls without their kernel in the trace
    skip = -1
    for name, rc in classes.items():
        if rc is RuntimeClass.SYNC or rc is RuntimeClass.MEMCPY:
            kind_of_name[name] = skip
        elif rc is RuntimeClass.LAUNCH:
            launch_names[name] = kinds.setdefault("launch:" + name, len(kinds))
        else:
            kind_of_name[name] = kinds.setdefault(name, len(kinds))
    kernel_kind: dict[str | None, int] = {k: kinds.setdefault("launch:" + k, len(kinds)) for k in set(kernel_by_corr.values())}
    names = c.names
    kc = np.fromiter(map(kind_of_name.get, names, repeat(-2)), np.int64, len(names))[c.name_code]  # -2: a launch
    launch = np.flatnonzero(kc == -2)
    if len(launch):
        ln = [names[i] for i in c.name_code[launch].tolist()]
        corrs = c.corr[launch].tolist()
        kernels = map(kernel_by_corr.get, corrs)  # None: its kernel is not in the trace
        kc[launch] = np.fromiter(map(kernel_kind.get, kernels, map(launch_names.__getitem__, ln)), np.int64, len(launch))
    keep = np.flatnonzero(kc != skip)
    if not len(keep):  # only syncs and copies: never start-up work
        return first_of_pid, []
    code = pc[keep] * (len(kinds) + 1) + kc[keep]
    order = np.argsort(code, kind="stable")
    sc = code[order]
    bounds = np.flatnonzero(np.diff(sc)) + 1
    starts = np.concatenate(([0], bounds))
    ends = np.concatenate((bounds, [len(sc)]))
    longest = np.maximum.reduceat(dur[keep][order], starts)
    firsts = order[starts]
    kind_names = list(kinds)
    out: list[tuple[str, list[Event]]] = []
    for g in np.argsort(firsts, kind="stable").tolist():
        if not longest[g] >= min_call_us:
            continue
        members = keep[order[starts[g]:ends[g]]]
        out.append((kind_names[int(kc[members[0]])], list(map(runtime.__getitem__, members.tolist()))))
    return first_of_pid, out


def _startup_end(m: TraceMetrics) -> float:
    """Where start-up ends: the first step's start with step markers, else the first GPU work (copy, kernel...)."""
    if m.has_step_markers and m.steps:
        return m.steps[0].start
    if m.lead_in is not None:
        return m.lead_in[1]
    starts = [e.ts for e in (m.trace.kernels[:1] + m.trace.memcpys[:1] + m.trace.memsets[:1])]
    return min(starts) if starts else float("-inf")  # no GPU work recorded: position says nothing


def short_kernel_name(name: str, limit: int = 80) -> str:
    """``void at::native::vectorized_elementwise_kernel<4, ...>(int, ...)`` -> ``at::native::vectorized_elementwise_kernel``."""
    base = name[5:] if name.startswith("void ") else name
    base = base.replace("(anonymous namespace)", "{anonymous}")
    cut = min((i for i in (base.find("<"), base.find("(")) if i > 0), default=len(base))
    base = base[:cut]
    return base if len(base) <= limit else base[: limit - 1] + "…"


@register
class StartupCost(Rule):
    """One-off start-up work in the trace: slow first calls (context creation, module loading, first allocations).

    The first CUDA/HIP call of a process creates the GPU context (often a
    ``cudaFree``, ``cudaGetDeviceCount`` or ``cudaDeviceGetStreamPriorityRange``
    taking seconds); the first launch of a kernel loads its module (lazy
    loading); the first cuDNN/cuBLAS call creates handles and workspaces. A
    profiler started before that work records it, and without step markers it
    reads as seconds of GPU idle time. It is paid once per process, not per
    step: it is reported here, as start-up cost, and not by GP205.

    A call is start-up work **by position** when it lasts at least
    ``min_call_us`` and starts before the first step (with step markers) or
    before the first GPU work (without): every such call, however many of its
    kind (two slow start-up ``cudaFree`` calls do not hide each other). Later,
    a call is one-off start-up work when it is the slowest of its kind in its
    process (a launch: of the launches of that kernel; else of the calls of
    that name), lasts at least ``min_call_us``, and at least ``min_ratio``
    times the median of the others; an allocator call (``cudaFree``,
    ``hipFree``, ``cudaMalloc``...) after start-up only when it is the first
    of its kind (the first ``cudaFree`` initialising the allocator): a slow one
    mid-run is churn or a cache miss, GP205's (in a trace with no step and
    no GPU work at all, position says nothing and the ratio alone decides). Synchronisations and copies never are
    (they wait for the GPU). The cost is the time of these calls inside the
    profiled steps (not the lead-in) when no kernel ran, per step: it distorts
    what the steps measure. All in the lead-in, the finding is info.
    """

    code = "GP206"
    name = "startup-cost"
    title = "One-off start-up work (context creation, module loading) in the trace"
    severity = Severity.WARNING
    options = (
        Option("min_call_us", 10_000.0, "a one-off call is start-up work when it takes at least this long (µs)"),
        Option("min_ratio", 10.0, "...and at least this many times the median of the other calls of its kind"),
    )
    bad_example = """
        prof = torch.profiler.profile(activities=[CPU, CUDA])
        prof.start()                              # before CUDA is initialised
        model = Net().cuda()                      # context creation, cuDNN handles: seconds
        for x, y in loader:
            loss = model(x.cuda()).sum(); loss.backward(); opt.step()
        prof.stop()
    """
    good_example = """
        model = Net().cuda()
        with torch.profiler.profile(activities=[CPU, CUDA],
                                    schedule=torch.profiler.schedule(wait=1, warmup=2, active=3)) as prof:
            for x, y in loader:                   # start-up and warm-up steps are not recorded
                loss = model(x.cuda()).sum(); loss.backward(); opt.step()
                prof.step()
    """

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        m = ctx.metrics
        found = first_use_calls(m, ctx.opt("min_call_us"), ctx.opt("min_ratio"))
        if not found:
            return
        total = sum(f.call.dur for f in found)
        inside = [(max(f.call.ts, s.start), min(f.call.end, s.end)) for f in found for s in m.steps
                  if f.call.ts < s.end and f.call.end > s.start]
        in_steps = sum(b - a for a, b in inside)
        cost = (kernel_idle_within(m, inside) if m.main_device is not None else in_steps) / max(m.num_steps, 1)
        lead = m.lead_in
        in_lead = sum(max(0.0, min(f.call.end, lead[1]) - max(f.call.ts, lead[0])) for f in found) if lead else 0.0
        listed = "; ".join(f"{f.call.name} {fmt_us(f.call.dur)}: {f.what}" for f in sorted(found, key=lambda f: -f.call.dur)[:4])
        where = []
        if in_lead > 0:
            where.append(f"{fmt_us(in_lead)} in the lead-in before the first GPU work")
        if in_steps > 0:
            where.append(f"{fmt_us(in_steps)} inside the profiled {'steps' if m.has_step_markers else 'trace'}")
        msg = (f"One-off start-up work: {len(found)} call{'s' if len(found) != 1 else ''} took {fmt_us(total)} "
               f"({listed})" + (f"; {', '.join(where)}" if where else ""))
        advice = (
            "This is paid once per process, not per step. Start the profiler after start-up and warm-up "
            "(torch.profiler.schedule(wait=1, warmup=1, active=3), or a warm-up iteration before prof.start()) so "
            "the profiled steps show the steady state; where start-up time itself matters, create the CUDA "
            "context and cuDNN/cuBLAS handles early (torch.cuda.init(), one warm-up batch) and keep "
            "CUDA_MODULE_LOADING=LAZY (the default since CUDA 11.7) so only the kernels used are loaded."
        )
        calls = [{"call": f.call.name, "us": round(f.call.dur, 1), "what": f.what,
                  "others_median_us": None if f.others_median_us is None else round(f.others_median_us, 1)}
                 for f in found]
        evidence = [Evidence("startup_us", round(total, 1), ctx.opt("min_call_us"), "us",
                             events=event_refs(f.call for f in found),
                             extra={"calls": calls, "in_lead_in_us": round(in_lead, 1),
                                    "in_steps_us": round(in_steps, 1)})]
        loc = _location(m, max(found, key=lambda f: f.call.dur).call)
        if cost <= 0:
            yield self.finding(ctx, msg, advice, evidence=evidence, location=loc, severity=Severity.INFO)
            return
        yield self.finding(ctx, msg, advice, evidence=evidence, location=loc, cost_us_per_step=cost,
                           cost_label="start-up time inside the profiled steps with no kernel running")

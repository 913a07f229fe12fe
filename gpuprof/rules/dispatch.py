"""GP308: a CPU-only step spent mostly dispatching many tiny operators (the host-bound loop of a CPU run)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gpuprof.codespec import Option
from gpuprof.findings import Evidence, Finding, Severity
from gpuprof.rules.base import Rule, RuleContext, register
from gpuprof.trace.metrics import TraceMetrics
from gpuprof.trace.model import Event
from gpuprof.units import fmt_us

__all__ = ["DispatchBound", "DispatchStats", "dispatch_stats"]


@dataclass(frozen=True)
class DispatchStats:
    """The recorded steps' CPU operators (per step on average, every host thread).

    * an operator's *self time* is its duration less that of the operators directly inside it; an operator
      (by name) whose median self time is ``tiny_us`` or more *computes*, and all its calls' self time is
      compute; the others are *small* (for tensors that small the arithmetic is nanoseconds);
    * ``in_ops_us``: time inside top-level operators (those not nested in another: what Python called);
    * the framework's time is ``in_ops_us`` less the compute: dispatch, argument parsing, output
      allocation, autograd bookkeeping, and the small operators whole, except what one of their calls spent
      over the tiny threshold (``paused_us``: the trainer preempted inside a call, by other processes' load,
      or a page fault), which leaves the step too: shares are of the step less its pauses.
    """

    steps: int
    step_us: float  # mean step time
    leaves: float  # operators per step
    small: float  # of them small (median self time under tiny_us)
    small_median_us: float
    compute_us: float  # time in the compute leaves per step
    in_ops_us: float  # time inside top-level operators per step
    top: tuple[tuple[str, int], ...]  # the small leaves called most, with their count over the steps

    small_us: float = 0.0  # the small operators' self time per step, each call at its operator's median
    unit_us: float | None = None  # the dispatch unit: median self time of a view operator's call (None: too few)
    tiny_us: float = 10.0  # the tiny threshold used: tiny_units dispatch units, or tiny_us without a unit
    paused_us: float = 0.0  # per step: the small operators' calls' time over tiny_us each (preempted, not dispatch)

    @property
    def framework_us(self) -> float:
        return max(self.in_ops_us - self.compute_us - self.paused_us, 0.0)

    def share(self, us: float) -> float:
        """``us`` per step as a share of the step less its paused time (a pause is neither side's)."""
        busy = self.step_us - self.paused_us
        return min(us / busy, 1.0) if busy > 0 else 0.0


# operators that only make a new view of a tensor's metadata (or return it): whatever the tensor, their self time is
# the framework's fixed cost of one call on this host at this load, the unit the "tiny" threshold scales with
VIEW_OPS = frozenset({
    "aten::view", "aten::t", "aten::transpose", "aten::as_strided", "aten::select", "aten::slice", "aten::expand",
    "aten::unsqueeze", "aten::squeeze", "aten::permute", "aten::alias", "aten::_reshape_alias", "aten::reshape",
    "aten::detach", "detach", "aten::resolve_conj", "aten::resolve_neg", "aten::lift_fresh"})
MIN_VIEW_CALLS = 20  # view operator calls needed to measure the dispatch unit


def _self_times(ops: Sequence[Event]) -> tuple[float, dict[str, list[float]]]:
    """One thread's operators (sorted by start, longest first): (time in top-level operators, each operator's
    self times by name)."""
    in_ops = 0.0
    stack: list[list[float]] = []  # open operators: [end, children's time]
    open_events: list[Event] = []
    selfs: dict[str, list[float]] = {}

    def close(item: list[float], e: Event) -> None:
        selfs.setdefault(e.name, []).append(max(e.dur - item[1], 0.0))

    for e in ops:
        while stack and stack[-1][0] <= e.ts:
            close(stack.pop(), open_events.pop())
        if stack:
            stack[-1][1] += e.dur
        else:
            in_ops += e.dur
        stack.append([e.ts + e.dur, 0.0])
        open_events.append(e)
    while stack:
        close(stack.pop(), open_events.pop())
    return in_ops, selfs


def _classify(selfs: dict[str, list[float]], tiny_us: float) -> tuple[list[float], float, list[str], float]:
    """(the small operators' self times, each call at its operator's median; the compute operators' self time;
    the small operators' names, one per call; the paused time: what a small operator's call spent over
    ``tiny_us``, a preemption or a page fault inside the call, not dispatch)."""
    compute = paused = 0.0
    small: list[float] = []
    names: list[str] = []
    for name, vals in selfs.items():
        vals = sorted(vals)
        med = vals[len(vals) // 2]
        if med >= tiny_us:  # an operator that computes: all its calls' self time (a preemption inside one
            compute += sum(vals)  # cannot be told from a larger call: the compute share errs high, the verdict silent)
        else:  # a tiny one: each call at its median (a pause inside one call is no dispatch)
            small += [med] * len(vals)
            names += [name] * len(vals)
            paused += sum(v - tiny_us for v in vals if v > tiny_us)
    return small, compute, names, paused


def _walk(ops: Sequence[Event], tiny_us: float) -> tuple[float, list[float], float, list[str]]:
    """One thread's operators (sorted by start, longest first): (time in top-level operators, the small
    operators' self times, the compute operators' self time, the small operators' names)."""
    in_ops, selfs = _self_times(ops)
    small, compute, names, _ = _classify(selfs, tiny_us)
    return in_ops, small, compute, names


def dispatch_unit(selfs: Iterable[dict[str, list[float]]]) -> float | None:
    """The median self time of the view operators' calls (:data:`VIEW_OPS`), None under MIN_VIEW_CALLS calls."""
    vals = sorted(v for by_name in selfs for name, vs in by_name.items() if name in VIEW_OPS for v in vs)
    return vals[len(vals) // 2] if len(vals) >= MIN_VIEW_CALLS else None


def dispatch_stats(m: TraceMetrics, tiny_us: float, tiny_units: float = 0.0) -> DispatchStats | None:
    """:class:`DispatchStats` of a trace with step markers and no GPU work, else None. With ``tiny_units`` and a
    measured dispatch unit (:func:`dispatch_unit`), the tiny threshold is ``tiny_units`` units, else ``tiny_us``:
    a host slowed by other processes' load stretches the operators and the unit alike, so the split does not
    move with the load."""
    trace = m.trace
    if not m.has_step_markers or not m.steps or trace.kernels or m.main_device is not None:
        return None
    lo, hi = m.steps[0].start, m.steps[-1].end
    by_thread: dict[object, list[Event]] = {}
    for e in trace.ops:
        if lo <= e.ts < hi and not e.name.startswith("ProfilerStep"):
            by_thread.setdefault((e.pid, e.tid), []).append(e)
    total = sum(len(v) for v in by_thread.values())
    if not total:
        return None
    n = len(m.steps)
    step_us = sum(s.dur for s in m.steps) / n
    walked = []
    for evs in by_thread.values():
        evs.sort(key=lambda e: (e.ts, -e.dur))
        walked.append(_self_times(evs))
    unit = dispatch_unit(selfs for _, selfs in walked)
    threshold = tiny_units * unit if unit is not None and tiny_units > 0 else tiny_us
    in_ops = compute = paused = 0.0
    small: list[float] = []
    names: list[str] = []
    for a, selfs in walked:
        b, c, d, p = _classify(selfs, threshold)
        in_ops, compute, paused = in_ops + a, compute + c, paused + p
        small += b
        names += d
    durs = sorted(small)
    top = tuple(Counter(names).most_common(3))
    return DispatchStats(steps=n, step_us=step_us, leaves=total / n, small=len(small) / n,
                         small_median_us=durs[len(durs) // 2] if durs else 0.0, compute_us=compute / n,
                         in_ops_us=in_ops / n, top=top, small_us=sum(durs) / n, unit_us=unit, tiny_us=threshold,
                         paused_us=paused / n)


@register
class DispatchBound(Rule):
    """A CPU-only run whose steps go to the framework's dispatch of many tiny operators, not to computing.

    On a CPU-only run everything is host work, so "host-bound" means the framework's own time. Measured over
    the recorded steps, on every host thread (:class:`DispatchStats`): an operator's self time is its
    duration less that of the operators directly inside it; an operator (by name) whose median self time is
    ``tiny_units`` (20) dispatch units or more *computes* (all its calls' self time is compute: a pause inside a
    call of a small operator does not make it compute), a unit being the median self time of a view operator's
    call (``tiny_us``, 10 µs, without 20 view calls); the framework's time is the time inside top-level
    operators (what Python called) less the compute: dispatch, argument parsing, output allocation, autograd
    bookkeeping and the small operators whole (for tensors that small the arithmetic is nanoseconds).

    The decision does not move with other processes' load: calls are counted; a host slowed alike stretches
    the operators and the unit together; a small operator's call's time over the threshold is a preemption,
    paused time that leaves the step too. A preemption between operators still lowers the framework's share,
    one inside a computing operator raises the compute share (both err toward silence): the planted host-bound
    loop's 44-69% stands well clear of the 30% threshold. All of:

    * at least ``min_small_ops`` small operator calls per step;
    * the framework's time is at least ``min_framework_share`` of the step;
    * the compute takes less than ``max_compute_share`` of it.

    The finding gives the small operator calls per step and their median duration, the framework's share, the
    compute share and the rest (Python between operators, sleeps, I/O); the cost is the framework's time per
    step, what fewer, larger operators (vectorised code, ``torch.compile``) could give back at most. The
    profiler adds its own cost to each operator it records, so in a recorded step the framework's share is
    larger than without it: the finding quotes the recorded step's time. GPU runs have their own rules for
    the same loop: GP301 (the GPU waits on launches) and GP203 (the host waits for the GPU: ``.item()``,
    ``print(loss)`` every step).
    """

    code = "GP308"
    name = "cpu-dispatch-bound"
    title = "CPU step dominated by framework dispatch: many tiny operators"
    severity = Severity.WARNING
    options = (
        Option("tiny_us", 10.0, "CPU operators whose median self time is under this many µs are small (a trace "
               "with fewer than 20 view operator calls: no dispatch unit)"),
        Option("tiny_units", 20.0, "...else under this many dispatch units (a view operator call's median self "
               "time): a load that slows the host moves the threshold with the operators"),
        Option("min_small_ops", 100, "report with at least this many small operator calls per step"),
        Option("min_framework_share", 0.3, "...the framework's time is at least this share of the step"),
        Option("max_compute_share", 0.5, "...and the operators that compute take less than this share"),
    )
    bad_example = """
        for x, y in batches:                             # CPU-only
            for i in range(len(x)):                      # one sample at a time: hundreds of tiny ops a step
                loss = loss + F.mse_loss(model(x[i]), y[i])
            loss.backward(); opt.step(); print(loss.item())
    """
    good_example = """
        model = torch.compile(model)                     # fuses the element-wise operators
        for x, y in batches:
            loss = F.mse_loss(model(x), y)               # the whole batch: a few large operators
            loss.backward(); opt.step()
    """

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        st = dispatch_stats(ctx.metrics, ctx.opt("tiny_us"), ctx.opt("tiny_units"))
        if st is None:
            return
        fw, comp = st.share(st.framework_us), st.share(st.compute_us)
        if st.small < ctx.opt("min_small_ops") or fw < ctx.opt("min_framework_share") \
                or comp >= ctx.opt("max_compute_share"):
            return
        rest = max(1.0 - fw - comp, 0.0)
        tops = ", ".join(f"{name} ({count / st.steps:.0f}/step)" for name, count in st.top)
        msg = (f"host-bound on framework dispatch: {st.small:.0f} of the {st.leaves:.0f} operator calls per step "
               f"run for less than {fmt_us(st.tiny_us)} of their own time each (median {fmt_us(st.small_median_us)}); the "
               f"framework's time (inside operators, less the compute of operators of "
               f"{fmt_us(st.tiny_us)} or more) is {fw:.0%} of the {fmt_us(st.step_us)} recorded step, "
               f"compute {comp:.0%}, outside operators (Python, other host time) {rest:.0%}. Most called: {tops}")
        advice = ("Fewer, larger operators: vectorise Python loops over samples or small tensors into batched "
                  "tensor operations; torch.compile(model) fuses element-wise operators into a few kernels; "
                  "avoid per-step host round trips (`.item()`, `print(loss)`, `.tolist()`) except every N steps. "
                  "On a GPU the same loop is launch-bound: torch.compile(mode=\"reduce-overhead\") or CUDA graphs.")
        yield Finding(
            code=self.code, name=self.name, severity=self.severity, message=msg, advice=advice,
            evidence=(Evidence("framework_share", round(fw, 4), ctx.opt("min_framework_share"), "fraction", extra={
                "small_ops_per_step": round(st.small, 1), "ops_per_step": round(st.leaves, 1),
                "small_op_median_us": round(st.small_median_us, 2), "framework_us_per_step": round(st.framework_us, 1),
                "compute_us_per_step": round(st.compute_us, 1), "compute_share": round(comp, 4),
                "outside_ops_share": round(rest, 4), "step_time_us": round(st.step_us, 1),
                "top_small_ops": [[n, c] for n, c in st.top], "tiny_us": round(st.tiny_us, 2),
                "dispatch_unit_us": None if st.unit_us is None else round(st.unit_us, 3)}),),
            cost_us_per_step=round(st.framework_us, 1))

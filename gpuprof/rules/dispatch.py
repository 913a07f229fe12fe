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
      allocation, autograd bookkeeping, and the small operators whole.
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

    @property
    def framework_us(self) -> float:
        return max(self.in_ops_us - self.compute_us, 0.0)

    def share(self, us: float) -> float:
        return min(us / self.step_us, 1.0) if self.step_us > 0 else 0.0


def _walk(ops: Sequence[Event], tiny_us: float) -> tuple[float, list[float], float, list[str]]:
    """One thread's operators (sorted by start, longest first): (time in top-level operators, the small
    operators' self times, the compute operators' self time, the small operators' names)."""
    in_ops = compute = 0.0
    small: list[float] = []
    names: list[str] = []
    stack: list[list[float]] = []  # open operators: [end, children's time]
    done: list[tuple[Event, float]] = []

    def close(item: list[float], e: Event) -> None:
        done.append((e, e.dur - item[1]))

    open_events: list[Event] = []
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
    selfs: dict[str, list[float]] = {}
    for e, self_us in done:
        selfs.setdefault(e.name, []).append(max(self_us, 0.0))
    for name, vals in selfs.items():
        vals.sort()
        med = vals[len(vals) // 2]
        if med >= tiny_us:  # an operator that computes: all its calls' self time
            compute += sum(vals)
        else:  # a tiny one: each call at its median (a pause inside one call is no dispatch)
            small += [med] * len(vals)
            names += [name] * len(vals)
    return in_ops, small, compute, names


def dispatch_stats(m: TraceMetrics, tiny_us: float) -> DispatchStats | None:
    """:class:`DispatchStats` of a trace with step markers and no GPU work, else None."""
    trace = m.trace
    if not m.has_step_markers or not m.steps or trace.kernels or m.main_device is not None:
        return None
    lo, hi = m.steps[0].start, m.steps[-1].end
    by_thread: dict[object, list[Event]] = {}
    for e in trace.ops:
        if lo <= e.ts < hi and not e.name.startswith("ProfilerStep"):
            by_thread.setdefault((e.pid, e.tid), []).append(e)
    n = len(m.steps)
    step_us = sum(s.dur for s in m.steps) / n
    in_ops = compute = 0.0
    small: list[float] = []
    names: list[str] = []
    for evs in by_thread.values():
        evs.sort(key=lambda e: (e.ts, -e.dur))
        a, b, c, d = _walk(evs, tiny_us)
        in_ops, compute = in_ops + a, compute + c
        small += b
        names += d
    total = sum(len(v) for v in by_thread.values())
    if not total:
        return None
    durs = sorted(small)
    top = tuple(Counter(names).most_common(3))
    return DispatchStats(steps=n, step_us=step_us, leaves=total / n, small=len(small) / n,
                         small_median_us=durs[len(durs) // 2] if durs else 0.0, compute_us=compute / n,
                         in_ops_us=in_ops / n, top=top, small_us=sum(durs) / n)


@register
class DispatchBound(Rule):
    """A CPU-only run whose steps go to the framework's dispatch of many tiny operators, not to computing.

    On a CPU-only run everything is host work, so "host-bound" means the framework's own time. Measured over
    the recorded steps, on every host thread (:class:`DispatchStats`): an operator's self time is its
    duration less that of the operators directly inside it; an operator (by name) whose median self time is
    ``tiny_us`` (10 µs) or more *computes* (all its calls' self time is compute: a pause inside a call of a
    small operator does not make it compute); the framework's time is the time inside top-level operators
    (what Python called) less the compute: dispatch, argument parsing, output allocation, autograd
    bookkeeping and the small operators whole (for tensors that small the arithmetic is nanoseconds). All of:

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
        Option("tiny_us", 10.0, "CPU operators whose median self time is under this many µs are small"),
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
        st = dispatch_stats(ctx.metrics, ctx.opt("tiny_us"))
        if st is None:
            return
        fw, comp = st.share(st.framework_us), st.share(st.compute_us)
        if st.small < ctx.opt("min_small_ops") or fw < ctx.opt("min_framework_share") \
                or comp >= ctx.opt("max_compute_share"):
            return
        rest = max(1.0 - fw - comp, 0.0)
        tops = ", ".join(f"{name} ({count / st.steps:.0f}/step)" for name, count in st.top)
        msg = (f"host-bound on framework dispatch: {st.small:.0f} of the {st.leaves:.0f} operator calls per step "
               f"run for less than {fmt_us(ctx.opt('tiny_us'))} of their own time each (median {fmt_us(st.small_median_us)}); the "
               f"framework's time (inside operators, less the compute of operators of "
               f"{fmt_us(ctx.opt('tiny_us'))} or more) is {fw:.0%} of the {fmt_us(st.step_us)} recorded step, "
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
                "top_small_ops": [[n, c] for n, c in st.top]}),),
            cost_us_per_step=round(st.framework_us, 1))

"""GP840: host habits in the step seen in a trace: ``zero_grad()`` filling gradients with zeros."""

from __future__ import annotations

from bisect import bisect_right
from typing import Iterable

from gpuprof.findings import Evidence, Finding
from gpuprof.rules.base import Option, Rule, RuleContext, event_refs, register
from gpuprof.rules.common import host_step_of
from gpuprof.trace.intervals import Intervals
from gpuprof.trace.model import Event

__all__ = ["ZeroGradFills"]

_ZERO_GRAD = "Optimizer.zero_grad#"
_FILLS = ("aten::zero_", "aten::_foreach_zero_", "aten::fill_", "aten::_foreach_fill_")


@register
class ZeroGradFills(Rule):
    """``optimizer.zero_grad()`` writes zeros into every gradient instead of dropping them.

    With ``set_to_none=False`` (or a custom loop calling ``p.grad.zero_()``)
    each step fills every gradient tensor with zeros: one kernel (or host
    loop) per parameter, and the next backward then adds into the zeroed
    tensors instead of writing them. ``set_to_none=True`` (PyTorch's default
    since 2.0) just drops the tensors. From the trace: ``aten::zero_``/
    ``aten::_foreach_zero_`` (or ``fill_``) operators inside
    ``Optimizer.zero_grad#...`` ranges in the steps; the cost is their host
    time per step (the union, so nested calls count once).
    """

    code = "GP840"
    name = "zero-grad-fills"
    title = "zero_grad() fills gradients with zeros (set_to_none=False)"
    options = (Option("min_fills_per_step", 1.0, "report from this many zero-fill operators per step"),)
    bad_example = """
        for x, y in loader:
            loss = loss_fn(model(x), y); loss.backward(); opt.step()
            opt.zero_grad(set_to_none=False)          # one fill per gradient tensor, every step
    """
    good_example = """
        for x, y in loader:
            loss = loss_fn(model(x), y); loss.backward(); opt.step()
            opt.zero_grad(set_to_none=True)           # the default since PyTorch 2.0: gradients dropped
    """

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        m = ctx.metrics
        if not m.steps:
            return
        ranges = [a for a in m.trace.annotations if a.name.startswith(_ZERO_GRAD) and host_step_of(m, a.ts) is not None]
        if not ranges:
            return
        by_thread: dict[tuple[object, object], list[tuple[float, float]]] = {}
        for a in ranges:
            by_thread.setdefault((a.pid, a.tid), []).append((a.ts, a.end))
        for spans in by_thread.values():
            spans.sort()

        def inside(o: Event) -> bool:
            spans = by_thread.get((o.pid, o.tid))
            if not spans:
                return False
            i = bisect_right(spans, (o.ts, float("inf"))) - 1
            return i >= 0 and o.ts <= spans[i][1]

        fills = [o for o in m.trace.ops if o.name.startswith(_FILLS) and inside(o)]
        per_step = len(fills) / m.num_steps
        if not fills or per_step < ctx.opt("min_fills_per_step"):
            return
        us_per_step = Intervals.from_pairs([(o.ts, o.end) for o in fills]).total() / m.num_steps
        optimizer = ranges[0].name[len(_ZERO_GRAD):].split(".", 1)[0]
        yield self.finding(
            ctx,
            f"{optimizer}.zero_grad() fills gradients with zeros: {per_step:.3g} fill operators per step",
            """
            Call optimizer.zero_grad(set_to_none=True) (model.zero_grad(set_to_none=True)), the default since
            PyTorch 2.0: gradients are dropped instead of zero-filled, and backward writes them fresh. Code that
            reads .grad before backward must then handle None.
            """,
            evidence=(Evidence("fills_per_step", round(per_step, 3), ctx.opt("min_fills_per_step"), "operators",
                               events=event_refs(fills), extra={"host_us_per_step": round(us_per_step, 1),
                                                                "optimizer": optimizer}),),
            cost_us_per_step=us_per_step, cost_label="host time filling gradients with zeros",
        )

"""GP840/GP841: host habits in the step seen in a trace (zero-filled gradients, gc.collect/torch.save)."""

from __future__ import annotations

import re
from bisect import bisect_right
from typing import Iterable

from gpuprof.findings import Evidence, Finding
from gpuprof.rules.base import Option, Rule, RuleContext, event_refs, register
from gpuprof.rules.common import host_step_of
from gpuprof.trace.intervals import Intervals
from gpuprof.trace.model import Event

__all__ = ["ZeroGradFills", "StepChores", "chore_of"]

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


# Python frames (with_stack=True) of chores that do not belong in every step: name -> what the user wrote.
_CHORES = (
    (re.compile(r"^<built-in function collect>$"), "gc.collect()"),
    (re.compile(r"^torch/serialization\.py\(\d+\): save$"), "torch.save(...)"),
)


def chore_of(name: str) -> str | None:
    """``gc.collect()`` / ``torch.save(...)`` when a Python frame name is that call, else None."""
    for rx, what in _CHORES:
        if rx.match(name):
            return what
    return None


@register
class StepChores(Rule):
    """``gc.collect()`` or ``torch.save`` called inside (most) training steps.

    A full garbage collection walks every Python object (tens to hundreds of
    milliseconds in a large process); ``torch.save`` serialises and writes a
    checkpoint, synchronising with the GPU to copy tensors to the host. Done
    every step they stall the loop; done every N steps, the steps that do
    them are outliers. From Python frames (traces with ``with_stack=True``):
    calls inside at least ``min_step_share`` of the steps; the cost is their
    time per step (union of the calls).
    """

    code = "GP841"
    name = "step-chores"
    title = "gc.collect() or torch.save inside most training steps"
    options = (Option("min_step_share", 0.5, "report a chore present in at least this share of the steps"),)
    bad_example = """
        for step, (x, y) in enumerate(loader):
            loss = loss_fn(model(x), y); loss.backward(); opt.step(); opt.zero_grad()
            gc.collect()                               # full collection every step
            torch.save(model.state_dict(), "last.pt")  # a checkpoint every step
    """
    good_example = """
        gc.freeze()                                    # after set-up: long-lived objects leave the collector
        for step, (x, y) in enumerate(loader):
            loss = loss_fn(model(x), y); loss.backward(); opt.step(); opt.zero_grad()
            if step % 1000 == 0:
                torch.save(model.state_dict(), "last.pt")
    """

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        m = ctx.metrics
        if not m.steps:
            return
        calls: dict[str, list[Event]] = {}
        for p in m.trace.python:
            what = chore_of(p.name) if p.name.startswith(("<built-in function collect>", "torch/serialization")) else None
            if what is not None and host_step_of(m, p.ts) is not None:
                calls.setdefault(what, []).append(p)
        for what, evs in sorted(calls.items()):
            steps_hit = {host_step_of(m, e.ts) for e in evs}
            share = len(steps_hit) / m.num_steps
            if share < ctx.opt("min_step_share"):
                continue
            us_per_step = Intervals.from_pairs([(e.ts, e.end) for e in evs]).total() / m.num_steps
            advice = ("Do it every N steps or at epoch ends; for the collector, call gc.freeze() after set-up "
                      "(or gc.disable() with an occasional gc.collect() between epochs)." if what.startswith("gc")
                      else "Checkpoint every N steps or per epoch, and asynchronously for large models "
                           "(torch.distributed.checkpoint.async_save, or copy the state to CPU and write it "
                           "from a thread).")
            yield self.finding(
                ctx, f"{what} runs in {len(steps_hit)} of {m.num_steps} steps ({len(evs) / m.num_steps:.3g} calls per step)",
                advice,
                evidence=(Evidence("steps_with_call", round(share, 3), ctx.opt("min_step_share"), "fraction",
                                   events=event_refs(evs), extra={"call": what, "us_per_step": round(us_per_step, 1)}),),
                cost_us_per_step=us_per_step, cost_label=f"time in {what}",
            )

"""GP840/GP841: host habits in the step seen in a trace (zero-filled gradients, gc.collect/torch.save/logging)."""

from __future__ import annotations

import re
from bisect import bisect_right
from collections import Counter
from typing import Iterable

from gpuprof.findings import Evidence, Finding, SourceLocation
from gpuprof.rules.base import Option, Rule, RuleContext, event_refs, register
from gpuprof.rules.common import count_of, host_step_of
from gpuprof.trace.intervals import Intervals
from gpuprof.trace.metrics import TraceMetrics
from gpuprof.trace.model import Event
from gpuprof.trace.vocab import LOGGING_FRAME_PREFIXES, logging_call_of

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
            location=_caller(m, ranges),
        )


# Python frames (with_stack=True) of chores that do not belong in every step: name -> what the user wrote.
_CHORES = (
    (re.compile(r"^<built-in function collect>$"), "gc.collect()"),
    (re.compile(r"^torch/serialization\.py\(\d+\): save$"), "torch.save(...)"),
)
_CHORE_PREFIXES = ("<built-in function collect>", "torch/serialization") + LOGGING_FRAME_PREFIXES


def chore_of(name: str) -> str | None:
    """``gc.collect()`` / ``torch.save(...)`` when a Python frame name is that call, else None."""
    for rx, what in _CHORES:
        if rx.match(name):
            return what
    return None


def _outermost(evs: list[Event]) -> list[Event]:
    """The calls not nested in another call of the same list on their thread (``logging.info`` calls
    ``Logger.info``: one call, two frames)."""
    out: list[Event] = []
    ends: dict[tuple[object, object], float] = {}
    for e in sorted(evs, key=lambda e: e.ts):
        key = (e.pid, e.tid)
        if e.ts < ends.get(key, float("-inf")):
            continue
        ends[key] = e.end
        out.append(e)
    return out


def _syncs_inside(m: TraceMetrics, calls: list[Event]) -> list[Event]:
    """The host-sync runtime calls (``m.syncs``) made inside ``calls`` on the same thread."""
    spans: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for c in calls:
        spans.setdefault((str(c.pid), str(c.tid)), []).append((c.ts, c.end))
    out = []
    for s in m.syncs:
        r = s.runtime
        mine = spans.get((str(r.pid), str(r.tid)))
        if not mine:
            continue
        i = bisect_right(mine, (r.ts, float("inf"))) - 1
        if i >= 0 and r.ts <= mine[i][1]:
            out.append(r)
    return out


def _caller(m: TraceMetrics, calls: list[Event]) -> SourceLocation | None:
    """The user function that made most of the calls (innermost user frame around each call)."""
    where: Counter[SourceLocation] = Counter()
    for c in calls[:200]:
        loc = m.stacks.location(c.pid, c.tid, c.ts)
        if loc is not None:
            where[loc] += 1
    return where.most_common(1)[0][0] if where else None


_LOGGING_ADVICE = (
    "Log every N steps (if step % 50 == 0), keeping running values on the device (total += loss.detach()) "
    "and reading them only then; for logging handlers that format or write slowly, a "
    "logging.handlers.QueueHandler moves that work off the training thread."
)
_GC_ADVICE = ("Do it every N steps or at epoch ends; for the collector, call gc.freeze() after set-up "
              "(or gc.disable() with an occasional gc.collect() between epochs).")
_SAVE_ADVICE = ("Checkpoint every N steps or per epoch, and asynchronously for large models "
                "(torch.distributed.checkpoint.async_save, or copy the state to CPU and write it from a thread).")


@register
class StepChores(Rule):
    """``gc.collect()``, ``torch.save`` or costly logging inside (most) training steps.

    A full garbage collection walks every Python object (tens to hundreds of
    milliseconds in a large process); ``torch.save`` serialises and writes a
    checkpoint, synchronising with the GPU to copy tensors to the host. Done
    every step they stall the loop; done every N steps, the steps that do
    them are outliers. Logging every step is normal while it is cheap; it is
    reported when its calls (``print``, ``logging``, ``SummaryWriter.add_*``,
    ``wandb.log``, ``mlflow.log_metric``) take at least ``min_logging_share``
    of the mean step. From Python frames (traces with ``with_stack=True``):
    calls inside at least ``min_step_share`` of the steps; the cost is their
    time per step (union of the calls). When a logged value is a CUDA tensor
    the call also waits for the GPU: that wait is GP203's cost (its finding
    names the logging call), so it is taken out of this cost while GP203 runs.
    The finding points at the user function that makes the calls (trace
    frames give the function's first line).
    """

    code = "GP841"
    name = "step-chores"
    title = "gc.collect(), torch.save or costly logging inside most training steps"
    options = (
        Option("min_step_share", 0.5, "report a chore present in at least this share of the steps"),
        Option("min_logging_share", 0.02, "report logging that costs at least this share of the mean step"),
    )
    bad_example = """
        for step, (x, y) in enumerate(loader):
            loss = loss_fn(model(x), y); loss.backward(); opt.step(); opt.zero_grad()
            gc.collect()                               # full collection every step
            torch.save(model.state_dict(), "last.pt")  # a checkpoint every step
            writer.add_histogram("w", model.weight, step)  # heavy logging every step
    """
    good_example = """
        gc.freeze()                                    # after set-up: long-lived objects leave the collector
        for step, (x, y) in enumerate(loader):
            loss = loss_fn(model(x), y); loss.backward(); opt.step(); opt.zero_grad()
            if step % 1000 == 0:
                torch.save(model.state_dict(), "last.pt")
            if step % 100 == 0:
                writer.add_histogram("w", model.weight, step)
    """

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        m = ctx.metrics
        if not m.steps:
            return
        calls: dict[str, list[Event]] = {}
        for p in m.trace.python:
            if not p.name.startswith(_CHORE_PREFIXES):
                continue
            what = chore_of(p.name) or logging_call_of(p.name)
            if what is not None and host_step_of(m, p.ts) is not None:
                calls.setdefault(what, []).append(p)
        n = m.num_steps
        for what, frames in sorted(calls.items()):
            evs = _outermost(frames)
            steps_hit = {host_step_of(m, e.ts) for e in evs}
            share = len(steps_hit) / n
            if share < ctx.opt("min_step_share"):
                continue
            spent = Intervals.from_pairs([(e.ts, e.end) for e in evs])
            is_chore = what in ("gc.collect()", "torch.save(...)")
            syncs = [] if is_chore else _syncs_inside(m, evs)
            extra: dict[str, object] = {"call": what}
            label = f"time in {what}"
            if syncs and ctx.runs("GP203") is not None:
                spent = spent.subtract(Intervals.from_pairs([(r.ts, r.end) for r in syncs]))
                label = f"time in {what} besides waiting for the GPU (GP203 counts that)"
            us_per_step = spent.total() / n
            if not is_chore:
                step_share = us_per_step / m.mean_step_time if m.mean_step_time > 0 else 0.0
                if step_share < ctx.opt("min_logging_share"):
                    continue
            extra["us_per_step"] = round(us_per_step, 1)
            message = f"{what} runs in {len(steps_hit)} of {n} steps ({count_of(len(evs) / n, 'call')} per step)"
            if syncs:
                extra["syncs_per_step"] = round(len(syncs) / n, 3)
                message += f" and waits for the GPU {len(syncs) / n:.3g} times per step"
            evidence = [Evidence("steps_with_call", round(share, 3), ctx.opt("min_step_share"), "fraction",
                                 events=event_refs(evs), extra=extra)]
            if syncs and ctx.runs("GP203") is not None:
                evidence.append(Evidence("cost_counted_in", "GP203", None, "",
                                         extra={"syncs_per_step": round(len(syncs) / n, 3)}))
            advice = _GC_ADVICE if what.startswith("gc") else _SAVE_ADVICE if is_chore else _LOGGING_ADVICE
            yield self.finding(
                ctx, message, advice, evidence=evidence, location=_caller(m, evs),
                cost_us_per_step=us_per_step, cost_label=label,
            )

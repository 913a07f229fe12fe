"""GP840/GP841/GP843: host habits in the step seen in a trace.

Zero-filled gradients (GP840), gc.collect/torch.save/costly logging in the steps (GP841),
evaluation with autograd on (GP843).
"""

from __future__ import annotations

import re
from bisect import bisect_right
from itertools import compress
from operator import attrgetter
from typing import Iterable

import numpy as np

from gpuprof.codespec import Option
from gpuprof.findings import Evidence, Finding
from gpuprof.rules.base import Rule, RuleContext, event_refs, register
from gpuprof.rules.common import ThreadSpans, count_of, host_step_of, host_steps_at
from gpuprof.rules.where import caller_location, in_module_ranges, model_call_location
from gpuprof.trace.columns import columns, named
from gpuprof.trace.intervals import Intervals
from gpuprof.trace.metrics import TraceMetrics
from gpuprof.trace.model import Event, Trace, op_records_autograd
from gpuprof.trace.vocab import LOGGING_FRAME_PREFIXES, logging_call_of

__all__ = ["ZeroGradFills", "StepChores", "EvalWithAutograd", "chore_of", "is_backward_op"]

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
    ``Optimizer.zero_grad#...`` ranges in the steps, each gradient counted once
    (``zero_`` calls ``fill_``: the outermost fill of a nest is the one
    gradient); the cost is their host time per step.
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
        zero_grad = ThreadSpans(ranges)

        # one fill per gradient: aten::zero_ calls aten::fill_, so a nested fill is the same gradient again
        fills = _outermost([o for o in m.trace.ops if o.name.startswith(_FILLS) and zero_grad.covering(o) is not None])
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
            location=caller_location(m, ranges),
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


# torch.compile's own machinery: Dynamo runs gc.collect(1) after each compilation
# (torch._dynamo.config.run_gc_after_compile) and Inductor's CUDA-graph trees collect too; a
# recompiling step then shows a collection the user never wrote (GP802/GP811 name the recompilation).
_TORCH_COMPILE_FRAMES = ("torch/_dynamo/", "torch/_inductor/")


def _is_torch_compile_frame(name: str) -> bool:
    return name.startswith(_TORCH_COMPILE_FRAMES) or "/torch/_dynamo/" in name or "/torch/_inductor/" in name


def _is_chore_frame(name: str) -> bool:
    return name.startswith(_CHORE_PREFIXES)


def _not_torchs_own(m: TraceMetrics, collects: list[Event]) -> list[Event]:
    """The ``gc.collect()`` frames not made by torch.compile's own code (inside a Dynamo/Inductor frame on their thread)."""
    torch_frames = ThreadSpans(named(m.trace.python, _is_torch_compile_frame, m.trace))
    if not torch_frames:
        return collects
    out = []
    for c in collects:
        span = torch_frames.covering(c)
        # strictly inside: a call that starts as a compile frame ends (touching) is the user's, after it
        if span is None or c.ts >= span[1]:
            out.append(c)
    return out


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


_LOGGING_ADVICE = (
    "Log every N steps (if step % 50 == 0), keeping running values on the device (total += loss.detach()) "
    "and reading them only then; for logging handlers that format or write slowly, a "
    "logging.handlers.QueueHandler moves that work off the training thread."
)
_GC_ADVICE = ("Do it every N steps or at epoch ends; for the collector, call gc.freeze() after set-up "
              "(or gc.disable() with an occasional gc.collect() between epochs).")
_SAVE_ADVICE = ("Checkpoint every N steps or per epoch, and asynchronously for large models "
                "(torch.distributed.checkpoint.async_save, or copy the state to CPU and write it from a thread).")
_SAVE_RANKS_ADVICE = (" In this multi-rank run, save on rank 0 only (if dist.get_rank() == 0: torch.save(...)): "
                      "the replicas are identical (GP845 names the other ranks that save).")


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
    The finding points at the line of the call in the user function that
    makes them, when the user's source file can be read where the trace is
    analysed (else at the function's line the trace records).
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
        for p in named(m.trace.python, _is_chore_frame, m.trace):
            what = chore_of(p.name) or logging_call_of(p.name)
            if what is not None and host_step_of(m, p.ts) is not None:
                calls.setdefault(what, []).append(p)
        if "gc.collect()" in calls:
            calls["gc.collect()"] = _not_torchs_own(m, calls["gc.collect()"])
            if not calls["gc.collect()"]:
                del calls["gc.collect()"]
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
            if what == "torch.save(...)" and (m.trace.world_size or 0) > 1:
                advice += _SAVE_RANKS_ADVICE
            yield self.finding(
                ctx, message, advice, evidence=evidence, location=caller_location(m, evs),
                cost_us_per_step=us_per_step, cost_label=label,
            )


# Operators that only a backward pass runs: the engine's per-node ranges (torch >= 1.10), the autograd
# nodes themselves (``AddmmBackward0``; 2021 traces: ``CudnnConvolutionBackward``, no engine range),
# gradient accumulation into .grad, and ATen's backward kernels (``aten::threshold_backward``).
_BACKWARD = re.compile(
    r"^autograd::engine::evaluate_function: |Backward\d*$|AccumulateGrad$|^aten::\w*_backward"
)


# Operators that carry a sequence number outside any forward pass: Module.to()/.half()/.cuda() call
# torch._has_compatible_shallow_copy_type per parameter with grad mode on (4 per parameter and
# conversion, checked on torch 2.13), and detach; a trace of model set-up alone is not evaluation.
_NOT_FORWARD = frozenset({"aten::_has_compatible_shallow_copy_type", "aten::detach", "aten::detach_"})


def is_backward_op(name: str) -> bool:
    """True for an operator name that only a backward pass runs (see ``_BACKWARD``)."""
    return _BACKWARD.search(name) is not None


def _backward_and_recording_forward(trace: Trace, ops: list[Event]) -> tuple[list[Event], list[Event], np.ndarray, np.ndarray]:
    """The backward operators of ``ops``, and its forward aten operators that recorded autograd, in order;
    then the start times of each.

    Names are classified once per distinct name (the shared columns' codes); autograd recording once per
    distinct payload object (the loader shares one per distinct payload; equal objects, equal answers).
    """
    oc = columns(trace, ops)
    kind = np.fromiter(
        (1 if is_backward_op(n) else 2 if n.startswith("aten::") and n not in _NOT_FORWARD else 0 for n in oc.names),
        np.int8, len(oc.names))[oc.name_code]
    is_backward = kind == 1
    backward = list(compress(ops, is_backward.tolist()))
    at = np.flatnonzero(kind == 2)
    aten = list(map(ops.__getitem__, at.tolist()))
    if not aten:
        return backward, [], oc.ts[is_backward], np.zeros(0)
    ids = np.fromiter(map(id, map(_extra_of, aten)), np.int64, len(aten))
    _, first, inv = np.unique(ids, return_index=True, return_inverse=True)
    records = np.fromiter(map(op_records_autograd, map(aten.__getitem__, first.tolist())), bool, len(first))[inv.reshape(-1)]
    return backward, list(compress(aten, records.tolist())), oc.ts[is_backward], oc.ts[at[records]]


_extra_of = attrgetter("extra")


@register
class EvalWithAutograd(Rule):
    """Forward passes record autograd graphs that no backward ever uses (evaluation without no_grad).

    Evaluation, inference or rollouts run without ``torch.no_grad()`` /
    ``torch.inference_mode()``: every operator whose inputs require grad
    records an autograd node and keeps the tensors its backward would need, for
    a backward that never comes. That is host time per operator (bookkeeping
    on every call) and activation memory held until the output is dropped
    (larger batches run out of memory, or the allocator works harder).

    From the trace: PyTorch writes an operator's autograd ``Sequence number``
    only when the operator recorded an autograd node (grad mode on and an
    input that requires grad); under ``no_grad``/``inference_mode`` no
    operator has one, nor does a frozen model's (all ``requires_grad=False``):
    neither is reported. A step is hit when at least ``min_ops_per_step``
    ``aten::`` operators (or ``min_module_ops_per_step`` inside ``nn.Module``
    ranges, which ``with_stack=True`` writes: a small model) recorded autograd and no backward operator ran in it
    (``autograd::engine::evaluate_function``, ``...Backward``,
    ``aten::*_backward``); the rule fires when at least ``min_step_share`` of
    the steps are hit. A trace without step markers counts as one step.
    Module set-up (``model.to(...)``: ``_has_compatible_shallow_copy_type``,
    ``detach``) does not count. Traces without the argument (the 2020/early
    2021 tb_plugin samples) report nothing.

    No cost: the time autograd's bookkeeping takes is spread inside every
    operator and the trace has no measure of the memory held, so any figure
    would be a guess. The finding is a warning without a cost; it points at
    the code that calls the model (the caller of the outermost ``nn.Module``
    range, which PyTorch's Python tracer writes with ``with_stack=True``),
    else the innermost user frame of the first such operator (its ``Call
    stack`` in 2021 traces); no location without Python stacks.
    """

    code = "GP843"
    name = "eval-with-autograd"
    title = "forward passes record autograd graphs with no backward (evaluation without no_grad)"
    options = (
        Option("min_ops_per_step", 10, "a step is hit from this many autograd-recording aten:: operators (and no backward)"),
        # 3: one nn.Linear alone records three (linear, t, addmm): the smallest model is reported, where the
        # trace shows it is a model (with_stack's nn.Module ranges); loose ops need more (older torch writes a
        # sequence number on every op under grad mode, even aten::item: micro-benchmarks would fire)
        Option("min_module_ops_per_step", 3,
               "a step is also hit from this many autograd-recording aten:: operators inside nn.Module ranges"),
        Option("min_step_share", 0.5, "report when at least this share of the steps is hit"),
    )
    bad_example = """
        model.eval()                                   # eval() switches dropout/batch norm, NOT autograd
        for x, y in val_loader:
            acc += (model(x).argmax(1) == y).sum()     # every op records a graph no backward uses
    """
    good_example = """
        model.eval()
        with torch.inference_mode():                   # or torch.no_grad(); or @torch.inference_mode() on evaluate()
            for x, y in val_loader:
                acc += (model(x).argmax(1) == y).sum()
    """

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        m = ctx.metrics
        ops = m.trace.ops
        if not ops:
            return
        recording: dict[int, list[Event]] = {}  # step index (0: the whole trace without markers) -> ops
        with_backward: set[int] = set()
        markers = m.has_step_markers
        backward, forward, backward_ts, forward_ts = _backward_and_recording_forward(m.trace, ops)
        if not forward:
            return  # the common case (no_grad evaluation, or a trace without sequence numbers): done
        if markers:
            b_step = host_steps_at(m, backward_ts)
            with_backward.update(b_step[b_step >= 0].tolist())
            f_step = host_steps_at(m, forward_ts)
            keep = f_step >= 0
            if with_backward:
                keep &= ~np.isin(f_step, np.fromiter(with_backward, np.int64, len(with_backward)))
            for o, step in zip(compress(forward, keep.tolist()), f_step[keep].tolist()):
                recording.setdefault(step, []).append(o)
        else:
            with_backward.update([0] if backward else [])
            if not backward:
                recording[0] = forward
        steps = m.num_steps if markers else 1
        if not steps:
            return
        least, least_in_module = ctx.opt("min_ops_per_step"), ctx.opt("min_module_ops_per_step")
        in_model = in_module_ranges(m)

        def is_hit(evs: list[Event]) -> bool:
            return len(evs) >= least or (in_model is not None and sum(map(in_model, evs)) >= least_in_module)

        hit = sorted(i for i, evs in recording.items() if i not in with_backward and is_hit(evs))
        share = len(hit) / steps
        if not hit or share < ctx.opt("min_step_share"):
            return
        per_step = sum(len(recording[i]) for i in hit) / len(hit)
        first = recording[hit[0]][0]
        where = (f"in {len(hit)} of {steps} steps: {per_step:.3g} autograd-recording aten operators per such step"
                 if markers else f"in the trace (no step markers): {per_step:.3g} autograd-recording aten operators")
        yield self.finding(
            ctx,
            f"forward passes record autograd graphs and no backward runs {where}",
            """
            Wrap evaluation/inference in `with torch.inference_mode():` (or `with torch.no_grad():`), or decorate
            the evaluation function with `@torch.inference_mode()`. model.eval() alone does not turn autograd off:
            it only switches dropout and batch norm. Tensors made under inference_mode cannot be used in autograd
            later; use no_grad where outputs feed training. A frozen model (requires_grad=False everywhere) is
            not reported: its operators record nothing.
            """,
            evidence=(Evidence("steps_without_backward", round(share, 3), ctx.opt("min_step_share"), "fraction",
                               events=event_refs(recording[hit[0]]),
                               extra={"steps_hit": len(hit), "steps": steps,
                                      "recording_ops_per_step": round(per_step, 1)}),),
            location=model_call_location(m, first),
        )

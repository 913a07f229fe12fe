"""GP403/GP844/GP845/GP852: tutorial pitfalls a trace shows although nothing is slow about them.

Peer copies between GPUs outside DataParallel (GP403), a model left in
``train()`` mode during evaluation (GP844), a checkpoint written by every
rank of a multi-rank run (GP845), and gradients clipped before
``GradScaler.unscale_`` (GP852). GP844 and GP852 are about correctness: the
run is not slower, its results are wrong, so they have no cost and stay
warnings.
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Iterable, Sequence

from gpuprof.codespec import Option
from gpuprof.findings import Evidence, Finding, SourceLocation
from gpuprof.rules.base import Rule, RuleContext, event_refs, register
from gpuprof.rules.common import ThreadSpans, count_of, host_steps_of
from gpuprof.rules.habits import is_backward_op
from gpuprof.rules.where import caller_location, is_module_range, model_call_location
from gpuprof.trace.columns import named
from gpuprof.trace.gpuwork import union_of
from gpuprof.trace.metrics import TraceMetrics
from gpuprof.trace.model import Event, op_records_autograd
from gpuprof.trace.stacks import is_user_frame
from gpuprof.units import fmt_bytes, fmt_us

__all__ = ["PeerCopies", "TrainModeInEval", "SaveOnEveryRank", "ClipBeforeUnscale"]


def _steps(m: TraceMetrics, events: Sequence[Event]) -> list[int | None]:
    """Each event's host step; the whole trace is step 0 when it has no step markers."""
    if m.has_step_markers:
        return host_steps_of(m, events)
    return [0] * len(events)


def _location(m: TraceMetrics, events: Sequence[Event], call: bool = False) -> SourceLocation | None:
    """The innermost user frame at the first of ``events`` that has one; ``call``: at the line of the call
    it was making (:meth:`~gpuprof.trace.stacks.StackIndex.call_location`) when the source tells it."""
    for e in events[:50]:
        loc = m.stacks.location(e.pid, e.tid, e.ts)
        if loc is not None:
            return m.stacks.call_location(e.pid, e.tid, e.ts) or loc if call else loc
    return None


# ------------------------------------------------------------------ GP403

_DP_MARKS = re.compile(r"^DataParallel\.forward$|^nn\.Module: DataParallel(?:_\d+)?$|torch/nn/parallel/(?:data_parallel|replicate|parallel_apply)\.py\(")


@register
class PeerCopies(Rule):
    """Tensors copied from one GPU to another inside the steps, outside ``nn.DataParallel``.

    ``Memcpy PtoP`` (peer-to-peer) copies move a tensor between two GPUs of
    one process: ``x.to("cuda:1")`` on a tensor of ``cuda:0``, a model split
    across devices by hand, a loss computed on another GPU than the outputs.
    Each is a copy over NVLink or PCIe that the receiving GPU waits for, and
    each step pays it again. Inside ``torch.nn.DataParallel`` they are that
    wrapper's replication (GP401 reports them with its overhead), so copies
    inside its ranges, or in a trace that shows DataParallel at all, are left
    to GP401. The cost is the copies' GPU time per step (union over devices),
    which the receiving device cannot overlap with the work that needs the
    data. Reported from ``min_bytes_per_step``.
    """

    code = "GP403"
    name = "peer-copies"
    title = "tensors copied between GPUs in every step (outside DataParallel)"
    options = (Option("min_bytes_per_step", 1 << 20, "report from this many bytes copied between GPUs per step"),)
    bad_example = """
        encoder.to("cuda:0"); decoder.to("cuda:1")        # split by hand
        for x, y in loader:
            h = encoder(x.to("cuda:0"))
            out = decoder(h.to("cuda:1"))                  # activations cross GPUs every step (and back in backward)
    """
    good_example = """
        # one model replica per GPU, one process each: torchrun --nproc_per_node=2 train.py
        model = DistributedDataParallel(model.to(local_rank), device_ids=[local_rank])
        # a model too big for one GPU: FSDP (fully_shard) or torch.distributed.pipelining, not hand-made hops
    """

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        m = ctx.metrics
        peer = [c for c in m.copies if c.kind.direction == "PtoP" and c.step is not None]
        if not peer:
            return
        t = ctx.trace
        if any(named(events, _DP_MARKS.search, t) for events in (t.annotations, t.python, t.ops)):
            return  # DataParallel's own replication: GP401's
        n = max(m.num_steps, 1)
        per_step = sum(c.gpu.nbytes for c in peer) / n
        if per_step < ctx.opt("min_bytes_per_step"):
            return
        us = union_of([c.gpu for c in peer]).total() / n
        devices = sorted({c.gpu.device for c in peer if c.gpu.device is not None})
        launches = [c.launch for c in peer if c.launch is not None]
        yield self.finding(
            ctx,
            f"{fmt_bytes(per_step)} per step copied between GPUs ({count_of(len(peer) / n, 'peer copy', 'peer copies')} "
            f"per step on device{'s' if len(devices) != 1 else ''} {', '.join(map(str, devices)) or '?'}, "
            f"{fmt_us(us)} of copy time)",
            """
            Keep each tensor on the GPU that uses it: create inputs, targets and loss modules on the model's device,
            and check .to("cuda:N") calls in the step. A model split across GPUs by hand pays these copies forward
            and backward, one GPU idle while the other works: use DistributedDataParallel for data parallelism,
            FSDP (torch.distributed.fsdp.fully_shard) when the model does not fit one GPU, or
            torch.distributed.pipelining to overlap the stages.
            """,
            evidence=(Evidence("peer_copy_bytes_per_step", int(per_step), ctx.opt("min_bytes_per_step"), "bytes",
                               events=event_refs([c.gpu for c in peer]),
                               extra={"copies_per_step": round(len(peer) / n, 3), "devices": devices,
                                      "copy_us_per_step": round(us, 1)}),),
            cost_us_per_step=us, cost_label="GPU time copying tensors between GPUs",
            location=_location(m, launches),
        )


# ------------------------------------------------------------------ GP844

_DROPOUT = frozenset({"aten::dropout", "aten::feature_dropout", "aten::alpha_dropout", "aten::feature_alpha_dropout"})
# What a dropout does only in training mode: draw the mask (CPU: bernoulli_; CUDA: the fused native_dropout).
_DROPOUT_WORK = frozenset({"aten::bernoulli_", "aten::native_dropout"})


@register
class TrainModeInEval(Rule):
    """Dropout still drops during evaluation: the model was left in ``train()`` mode.

    ``model.eval()`` switches dropout off (and batch norm to its running
    statistics); without it, evaluation or inference results are random and
    lower than they should be, and batch norm layers keep updating their
    running statistics from the evaluation data, changing the model. From
    the trace: in steps where no backward runs, dropout operators that draw
    a random mask (``aten::bernoulli_`` or ``aten::native_dropout`` inside
    ``aten::dropout``; in ``eval()`` mode dropout returns its input and
    draws nothing). Reported when at least ``min_step_share`` of the steps
    without backward do so. Evaluation inside a training step (a forward
    under ``no_grad``/``inference_mode`` after the step's backward) is found
    too, where the trace has the Python tracer's ``nn.Module`` ranges
    (``with_stack=True``) and autograd's sequence numbers: in a step with
    backward, a call of a model (an outermost module range) in which no
    operator recorded autograd, yet dropout drew masks; a model whose
    training forward records autograd anywhere (a frozen backbone under a
    trained head) is training, not evaluating. Reported when at least
    ``min_step_share`` of the training steps that run such a forward draw
    dropout masks in it. Deliberate Monte-Carlo dropout looks the same:
    ignore the code for that run (``--ignore GP844``). No cost: the run is
    not slower, its results are wrong.
    """

    code = "GP844"
    name = "train-mode-in-eval"
    title = "dropout active in evaluation (steps without backward, or no_grad forwards in training steps)"
    options = (Option("min_step_share", 0.5, "report when at least this share of the steps without backward drop"),)
    bad_example = """
        model.train()
        ...                                            # training loop
        with torch.no_grad():                          # evaluation, but still in train() mode
            for x, y in val_loader:
                acc += (model(x).argmax(1) == y).sum() # dropout drops, batch norm updates its statistics
    """
    good_example = """
        model.eval()                                   # dropout off, batch norm uses its running statistics
        with torch.inference_mode():
            for x, y in val_loader:
                acc += (model(x).argmax(1) == y).sum()
        model.train()                                  # back to training
    """

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        m = ctx.metrics
        dropouts = [o for o in m.trace.ops if o.name in _DROPOUT]
        if not dropouts:
            return
        spans = ThreadSpans(dropouts)
        drawing = [o for o in m.trace.ops if o.name in _DROPOUT_WORK and spans.covering(o) is not None]
        if not drawing:
            return
        backward = [o for o in m.trace.ops if is_backward_op(o.name)]
        with_backward = {s for s in _steps(m, backward) if s is not None}
        steps_all = range(m.num_steps) if m.has_step_markers else range(1)
        without = [s for s in steps_all if s not in with_backward]
        hit: dict[int, list[Event]] = defaultdict(list)
        for o, s in zip(drawing, _steps(m, drawing)):
            if s is not None and s not in with_backward:
                hit[s].append(o)
        share = len(hit) / len(without) if without else 0.0
        advice = """
            Call model.eval() before evaluating or serving (and model.train() before training again): dropout then
            passes its input through and batch norm uses its running statistics instead of updating them from the
            evaluation batches. torch.no_grad()/inference_mode() turn off autograd only, not dropout.
            """
        if hit and share >= ctx.opt("min_step_share"):
            first = hit[min(hit)]
            yield self.finding(
                ctx,
                f"dropout draws random masks in {len(hit)} of {len(without)} steps without backward "
                f"({count_of(sum(map(len, hit.values())) / len(hit), 'dropout')} per such step): "
                "the model is in train() mode while it evaluates",
                advice,
                evidence=(Evidence("steps_with_dropout", round(share, 3), ctx.opt("min_step_share"), "fraction",
                                   events=event_refs(first),
                                   extra={"steps_hit": len(hit), "steps_without_backward": len(without)}),),
                location=model_call_location(m, first[0]),
            )
            return
        yield from self._in_training_steps(ctx, drawing, with_backward, advice)

    def _in_training_steps(self, ctx: RuleContext, drawing: list[Event], with_backward: set[int],
                           advice: str) -> Iterable[Finding]:
        """Evaluation inside training steps: dropout drawing in a model call that recorded no autograd."""
        m = ctx.metrics
        candidates = [(o, s) for o, s in zip(drawing, _steps(m, drawing))
                      if s is not None and s in with_backward and not op_records_autograd(o)]
        if not candidates:
            return
        calls = ThreadSpans(named(m.trace.python, is_module_range, m.trace))  # merged outermost model calls
        if not calls:
            return  # no nn.Module ranges (with_stack=False): a forward without autograd cannot be told apart
        recording = [o for o in m.trace.ops
                     if o.name.startswith("aten::") and not is_backward_op(o.name) and op_records_autograd(o)]
        if not recording:
            return  # no sequence numbers in this trace: nothing says which forwards recorded autograd
        recorded_in = {calls.covering(o) for o in recording} - {None}
        evaluating: dict[int, set[tuple[float, float]]] = defaultdict(set)  # step -> model calls without autograd
        ops_in_steps = [o for o in m.trace.ops if o.name.startswith("aten::")]
        for o, s in zip(ops_in_steps, _steps(m, ops_in_steps)):
            span = calls.covering(o) if s is not None and s in with_backward else None
            if span is not None and span not in recorded_in:
                evaluating[s].add(span)  # type: ignore[index]
        hit: dict[int, list[Event]] = defaultdict(list)
        for o, s in candidates:
            span = calls.covering(o)
            if span is not None and span in evaluating.get(s, ()):
                hit[s].append(o)
        if not hit:
            return
        share = len(hit) / len(evaluating)
        if share < ctx.opt("min_step_share"):
            return
        first = hit[min(hit)]
        yield self.finding(
            ctx,
            f"dropout draws random masks in a forward pass without autograd (no_grad/inference_mode) inside "
            f"{len(hit)} of {len(with_backward)} training steps "
            f"({count_of(sum(map(len, hit.values())) / len(hit), 'dropout')} per such step): "
            "the model is in train() mode while it evaluates",
            advice,
            evidence=(Evidence("training_steps_with_dropout_in_eval", round(share, 3), ctx.opt("min_step_share"),
                               "fraction", events=event_refs(first),
                               extra={"training_steps_hit": len(hit), "training_steps_evaluating": len(evaluating),
                                      "training_steps": len(with_backward)}),),
            location=model_call_location(m, first[0]),
        )


# ------------------------------------------------------------------ GP845

_SAVE_FRAME = re.compile(r"^torch/serialization\.py\(\d+\): save$")


@register
class SaveOnEveryRank(Rule):
    """``torch.save`` called by the user's code on a rank other than 0 of a multi-rank run.

    Under DistributedDataParallel every rank holds the same weights and
    optimizer state, so a checkpoint written by each rank is the same file N
    times: N times the serialisation (each synchronising with its GPU to copy
    the tensors to the host) and the disk or network writes, ranks racing to
    write one path, and a slower step for every rank that saves. From a
    trace with the distributed info torch writes (``distributedInfo``: rank,
    world size > 1) and Python frames (``with_stack=True``): on a rank other
    than 0, ``torch.save`` frames whose caller is the user's code (a
    library's ``torch.save``, as ``torch.distributed.checkpoint`` or
    accelerate's ``save_state`` writing each rank's own part, is on purpose).
    Any number of calls: a per-epoch checkpoint written by every rank is the
    same mistake. Rank 0's trace alone cannot show what the others do: the
    finding comes from the other ranks' traces (``gpuprof analyze`` on the
    run's directory reads them all). The cost is the time in those calls per
    step on this rank.
    """

    code = "GP845"
    name = "save-on-every-rank"
    title = "torch.save called on every rank of a multi-rank run (save on rank 0 only)"
    options = (Option("min_calls", 1, "report from this many torch.save calls by the user's code on a rank other than 0"),)
    bad_example = """
        model = DistributedDataParallel(model.to(rank), device_ids=[rank])
        for epoch in range(n):
            train_one_epoch(model)
            torch.save(model.module.state_dict(), "ckpt.pt")   # every rank writes the same file
    """
    good_example = """
        for epoch in range(n):
            train_one_epoch(model)
            if dist.get_rank() == 0:
                torch.save(model.module.state_dict(), "ckpt.pt")
            dist.barrier()                                     # the others wait before anyone reads it
    """

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        m, t = ctx.metrics, ctx.trace
        if not t.world_size or t.world_size < 2 or t.rank is None or t.rank == 0:
            return
        saves = [p for p in named(t.python, _SAVE_FRAME.search, t)
                 if is_user_frame(m.stacks.parent_name(p) or "")]
        if len(saves) < ctx.opt("min_calls"):
            return
        n = max(m.num_steps, 1)
        us = union_of(saves).total() / n
        steps_hit = {s for s in _steps(m, saves) if s is not None}
        where = f"{len(steps_hit)} of {m.num_steps} steps" if m.has_step_markers else "the trace"
        yield self.finding(
            ctx,
            f"rank {t.rank} of {t.world_size} writes checkpoints with torch.save ({count_of(len(saves), 'call')} "
            f"in {where}): every rank saves what rank 0 saves (DDP keeps the replicas identical)",
            """
            Save on rank 0 only: `if dist.get_rank() == 0: torch.save(model.module.state_dict(), path)`, then
            `dist.barrier()` before any rank reads the file (Accelerate: `if accelerator.is_main_process`; Lightning
            and the HF Trainer save on rank 0 themselves). With FSDP or other sharded state, use
            torch.distributed.checkpoint, which writes each rank's shard once.
            """,
            evidence=(Evidence("save_calls", len(saves), ctx.opt("min_calls"), "calls", events=event_refs(saves),
                               extra={"rank": t.rank, "world_size": t.world_size, "us_per_step": round(us, 1),
                                      "steps_hit": len(steps_hit)}),),
            cost_us_per_step=us, cost_label="time in torch.save on a rank that need not save",
            location=caller_location(m, saves),
        )


# ------------------------------------------------------------------ GP852

_UNSCALE = "aten::_amp_foreach_non_finite_check_and_unscale_"
# clip_grad_norm_ (and clip_grad_value_) as torch writes them: the foreach norm it computes, or its Python frame.
_CLIP_OPS = frozenset({"aten::_foreach_norm"})
_CLIP_FRAME = re.compile(r"torch/nn/utils/clip_grad\.py\(\d+\): clip_grad_(?:norm|value)_$")


@register
class ClipBeforeUnscale(Rule):
    """Gradients clipped while still scaled by ``GradScaler`` (``unscale_`` missing before clipping).

    Under AMP with a ``GradScaler`` the gradients after ``backward()`` are
    multiplied by the loss scale (65536 to start with). ``clip_grad_norm_``
    called on them compares the *scaled* norm with ``max_norm``: it clips
    nearly every step, by a factor that changes whenever the scale does, so
    the effective learning rate is far smaller than intended and unstable.
    ``scaler.unscale_(optimizer)`` must come first (``scaler.step`` then
    knows not to unscale again). From the trace: in a step that runs
    GradScaler's unscale kernel (``aten::_amp_foreach_non_finite_check_and_unscale_``),
    the gradient norm of ``clip_grad_norm_`` (``aten::_foreach_norm``, or
    its Python frame with ``with_stack=True``) ran before it. Reported when
    at least ``min_step_share`` of such steps do. No cost: a correctness
    problem.
    """

    code = "GP852"
    name = "clip-before-unscale"
    title = "gradients clipped before GradScaler.unscale_ (clipping the scaled gradients)"
    options = (Option("min_step_share", 0.5, "report when at least this share of the steps clip first"),)
    bad_example = """
        scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)   # norm of the SCALED gradients
        scaler.step(opt); scaler.update()
    """
    good_example = """
        scaler.scale(loss).backward()
        scaler.unscale_(opt)                                       # gradients back to their true scale
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt); scaler.update()                          # step() does not unscale twice
    """

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        m = ctx.metrics
        unscales = named(m.trace.ops, _UNSCALE.__eq__, m.trace)  # the name test once per distinct name
        if not unscales:
            return
        clips = named(m.trace.ops, _CLIP_OPS.__contains__, m.trace)
        clips += named(m.trace.python, _CLIP_FRAME.search, m.trace)
        if not clips:
            return
        first_unscale: dict[int, float] = {}
        for o, s in zip(unscales, _steps(m, unscales)):
            if s is not None:
                first_unscale[s] = min(first_unscale.get(s, o.ts), o.ts)
        early: dict[int, list[Event]] = defaultdict(list)
        clipping_steps: set[int] = set()
        for c, s in zip(clips, _steps(m, clips)):
            if s is None or s not in first_unscale:
                continue
            clipping_steps.add(s)
            if c.ts < first_unscale[s]:
                early[s].append(c)
        if not early:
            return
        share = len(early) / len(clipping_steps)
        if share < ctx.opt("min_step_share"):
            return
        first = sorted(early[min(early)], key=lambda e: e.ts)
        yield self.finding(
            ctx,
            f"gradients are clipped before GradScaler unscales them in {len(early)} of {len(clipping_steps)} "
            "steps that clip under a GradScaler: the clipping sees gradients multiplied by the loss scale",
            """
            Call scaler.unscale_(optimizer) after scaler.scale(loss).backward() and before
            torch.nn.utils.clip_grad_norm_ (or clip_grad_value_, or anything that reads the gradients' size);
            scaler.step(optimizer) then skips its own unscale. See the PyTorch AMP examples, "Gradient clipping".
            """,
            evidence=(Evidence("steps_clipping_first", round(share, 3), ctx.opt("min_step_share"), "fraction",
                               events=event_refs(first),
                               extra={"steps_hit": len(early), "steps_clipping": len(clipping_steps)}),),
            location=_location(m, first, call=True),
        )

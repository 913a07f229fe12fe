"""GP842/GP860/GP861/GP862: optimizer and mixed-precision habits seen in a trace.

All three read the operators PyTorch records inside ``Optimizer.step#...``
ranges (every ``torch.optim`` optimizer emits one) and the operators' input
dtypes (traces recorded with ``record_shapes=True``; without them the dtype
rules stay quiet rather than guess).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import dataclass, field

from gpuprof.codespec import Option
from gpuprof.findings import Evidence, Finding, Severity
from gpuprof.rules.base import Rule, RuleContext, event_refs, register
from gpuprof.rules.common import host_step_of
from gpuprof.rules.precision import TC_OPS, device_capability
from gpuprof.trace.columns import columns, named
from gpuprof.trace.intervals import Intervals
from gpuprof.trace.metrics import TraceMetrics
from gpuprof.trace.model import DTYPE_BF16, DTYPE_FLOAT, DTYPE_FP16, DTYPE_HALF, Event, op_dtypes

__all__ = ["OptimizerOps", "optimizer_ops", "PerParameterOptimizer", "Fp16WithoutGradScaler", "HalfParameters",
           "Bf16Unused", "gradscaler_evidence"]

_STEP = "Optimizer.step#"
_MULTI_TENSOR = ("aten::_foreach_", "aten::_fused_")
# GradScaler's own operators: unscale_ (inside scaler.step) and update().
_SCALER_OPS = frozenset({
    "aten::_amp_foreach_non_finite_check_and_unscale_",
    "aten::_amp_non_finite_check_and_unscale_",
    "aten::_amp_update_scale_",
})
_BACKWARD = "autograd::engine::evaluate_function:"
# a range or Python frame of GradScaler's own code (with_stack: torch/amp/grad_scaler.py(...): unscale_)
_SCALER_FRAMES = ("gradscaler", "grad_scaler.py")


def gradscaler_evidence(m: TraceMetrics) -> str | None:
    """The first sign of a ``torch.amp.GradScaler`` in the trace (an operator of its own, or a range or Python frame
    of its code), None when there is none."""
    for o in m.trace.ops:
        if o.name in _SCALER_OPS:
            return o.name
    for kind in (m.trace.annotations, m.trace.python):
        for name in columns(m.trace, kind).names:
            if any(marker in name.lower() for marker in _SCALER_FRAMES):
                return str(name)
    return None


@dataclass
class OptimizerOps:
    """The outermost operators inside ``Optimizer.step#...`` ranges of the steps.

    Only operators not nested in another operator of the same range count:
    ``aten::_foreach_add_`` falls back to per-tensor ``aten::add_`` on CPU,
    and those inner calls are not the optimizer's choice.

    * ``optimizer``: the optimizer class of the first range (``SGD``).
    * ``per_parameter``: outermost ``aten::`` operators that are not
      multi-tensor (``_foreach_*``/``_fused_*``): one call per parameter.
    * ``multi_tensor``: ``aten::_foreach_*``/``aten::_fused_*`` operators.
    * ``multi_tensor_kernels``: ``multi_tensor_apply`` kernels launched inside
      the ranges, also by extensions that are no aten operator (apex's and
      DeepSpeed's ``FusedAdam``).
    """

    optimizer: str = ""
    per_parameter: list[Event] = field(default_factory=list)
    multi_tensor: list[Event] = field(default_factory=list)
    multi_tensor_kernels: list[Event] = field(default_factory=list)

    @property
    def all(self) -> list[Event]:
        return self.per_parameter + self.multi_tensor


def optimizer_ops(m: TraceMetrics) -> OptimizerOps:
    """Classify the operators of the optimizer steps inside the trace's steps (see :class:`OptimizerOps`)."""
    out = OptimizerOps()
    ranges = [a for a in m.trace.annotations if a.name.startswith(_STEP) and host_step_of(m, a.ts) is not None]
    if not ranges:
        return out
    out.optimizer = ranges[0].name[len(_STEP):].split(".", 1)[0]
    by_thread: dict[tuple[object, object], list[tuple[float, float]]] = {}
    for a in ranges:
        by_thread.setdefault((a.pid, a.tid), []).append((a.ts, a.end))
    for spans in by_thread.values():
        spans.sort()

    def within(e: Event) -> bool:
        spans = by_thread.get((e.pid, e.tid))
        if not spans:
            return False
        i = bisect_right(spans, (e.ts, float("inf"))) - 1
        return i >= 0 and e.end <= spans[i][1]

    inside: dict[tuple[object, object], list[Event]] = {}
    for o in m.trace.ops:
        if within(o):
            inside.setdefault((o.pid, o.tid), []).append(o)
    for k in m.trace.kernels:
        if "multi_tensor_apply" in k.name:
            launch = m.launch_by_corr.get(k.corr) if k.corr >= 0 else None
            if launch is not None and within(launch):
                out.multi_tensor_kernels.append(k)
    for ops in inside.values():
        ops.sort(key=lambda o: (o.ts, -o.dur))
        outer_end = float("-inf")
        for o in ops:
            if o.ts < outer_end:
                continue  # nested in the previous outermost operator
            outer_end = o.end
            if o.name.startswith(_MULTI_TENSOR):
                out.multi_tensor.append(o)
            elif o.name.startswith("aten::"):
                out.per_parameter.append(o)
    return out


@register
class PerParameterOptimizer(Rule):
    """The optimizer updates parameters one at a time (no ``foreach``/``fused``).

    PyTorch optimizers have three implementations: a Python loop over the
    parameters (``foreach=False``: a few small kernels per parameter, each
    launched from the host), multi-tensor ``_foreach_*`` kernels (the default
    on CUDA when every parameter is a CUDA tensor) and single ``_fused_*``
    kernels (``fused=True``, Adam/AdamW/SGD...). With many parameters the loop
    spends milliseconds launching tiny kernels. From the trace: outermost
    ``aten::`` operators inside ``Optimizer.step#...`` that are not
    ``_foreach_*``/``_fused_*``, in steps whose optimizer does no multi-tensor
    work at all (no such operator, no ``multi_tensor_apply`` kernel: apex's
    ``FusedAdam`` keeps a per-parameter step counter). GPU traces only: on CPU tensors the loop is
    PyTorch's default and ``foreach`` gains little. The cost is their host
    time per step (the part ``foreach``/``fused`` would mostly save).
    """

    code = "GP842"
    name = "per-parameter-optimizer"
    title = "optimizer steps parameters one by one (no foreach/fused)"
    options = (Option("min_ops_per_step", 64.0, "report from this many per-parameter optimizer operators per step"),)
    bad_example = """
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)   # a Python loop over parameters
        # (also the default when some parameters are not CUDA tensors, or with a hand-written update loop)
    """
    good_example = """
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)      # one fused kernel set per step
        # or foreach=True (the default when every parameter is on the GPU)
    """

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        m = ctx.metrics
        if not m.steps or not m.trace.kernels:
            return
        ops = optimizer_ops(m)
        per_step = len(ops.per_parameter) / m.num_steps
        if not ops.per_parameter or per_step < ctx.opt("min_ops_per_step"):
            return
        if ops.multi_tensor or ops.multi_tensor_kernels:
            return  # the update itself is multi-tensor; what is left per parameter is bookkeeping
        us_per_step = Intervals.from_pairs([(o.ts, o.end) for o in ops.per_parameter]).total() / m.num_steps
        names: dict[str, int] = {}
        for o in ops.per_parameter:
            names[o.name] = names.get(o.name, 0) + 1
        top = dict(sorted(names.items(), key=lambda kv: -kv[1])[:5])
        yield self.finding(
            ctx,
            f"{ops.optimizer}.step() runs {per_step:.3g} per-parameter operators per step and no "
            f"multi-tensor ones",
            """
            Create the optimizer with fused=True (Adam, AdamW, SGD, Adagrad... on CUDA) or foreach=True: one
            kernel (or a few) for all parameters instead of a few per parameter. foreach is the default only when
            every parameter is a CUDA tensor; a hand-written update loop can use torch._foreach_* the same way.
            """,
            evidence=(Evidence("per_parameter_ops_per_step", round(per_step, 2), ctx.opt("min_ops_per_step"),
                               "operators", events=event_refs(ops.per_parameter),
                               extra={"optimizer": ops.optimizer, "host_us_per_step": round(us_per_step, 1),
                                      "top_operators": top}),),
            cost_us_per_step=us_per_step, cost_label="host time in per-parameter optimizer operators",
        )


def _half_ops(opt: OptimizerOps) -> tuple[list[Event], list[Event]]:
    """(optimizer operators with 16-bit inputs, optimizer operators with float32 or 16-bit inputs)."""
    typed = [o for o in opt.all if op_dtypes(o) & (DTYPE_HALF | DTYPE_FLOAT)]
    return [o for o in typed if op_dtypes(o) & DTYPE_HALF], typed


def _fp16_gemms(m: TraceMetrics) -> list[Event]:
    return [o for o in named(m.trace.ops, TC_OPS.__contains__, m.trace) if op_dtypes(o) & DTYPE_FP16
            and host_step_of(m, o.ts) is not None]  # the name test once per distinct name


@register
class Fp16WithoutGradScaler(Rule):
    """Float16 autocast trains without a ``GradScaler``.

    Float16 keeps 5 exponent bits: small gradients (below about 6e-8) flush
    to zero and large ones overflow to inf, so float16 mixed precision needs
    loss scaling (``torch.amp.GradScaler``); bfloat16 has float32's range and
    does not. From the trace: matmul/convolution operators with float16
    inputs inside the steps, a backward pass (autograd engine operators), the
    optimizer stepping float32 parameters (float16 parameters are GP861's),
    and none of GradScaler's operators (``_amp_foreach_non_finite_check_and_unscale_``,
    ``_amp_update_scale_``) anywhere in the trace. Needs ``record_shapes=True``
    (input dtypes). A risk to the model's accuracy, not a time cost: reported
    as a warning without a cost.
    """

    code = "GP860"
    name = "fp16-without-gradscaler"
    title = "float16 autocast without GradScaler"
    severity = Severity.WARNING
    options = (Option("min_fp16_ops_per_step", 1.0, "report from this many float16 matmul/conv operators per step"),)
    bad_example = """
        for x, y in loader:
            with torch.autocast("cuda", dtype=torch.float16):
                loss = loss_fn(model(x), y)
            loss.backward()                    # small float16 gradients flush to zero
            opt.step(); opt.zero_grad()
    """
    good_example = """
        scaler = torch.amp.GradScaler("cuda")
        for x, y in loader:
            with torch.autocast("cuda", dtype=torch.float16):   # or dtype=torch.bfloat16, no scaler needed
                loss = loss_fn(model(x), y)
            scaler.scale(loss).backward()
            scaler.step(opt); scaler.update(); opt.zero_grad()
    """

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        m = ctx.metrics
        if not m.steps:
            return
        gemms = _fp16_gemms(m)
        per_step = len(gemms) / m.num_steps
        if not gemms or per_step < ctx.opt("min_fp16_ops_per_step"):
            return
        names = {o.name for o in m.trace.ops}
        if names & _SCALER_OPS or not any(n.startswith(_BACKWARD) for n in names):
            return
        opt = optimizer_ops(m)
        half, typed = _half_ops(opt)
        if typed and len(half) / len(typed) >= 0.5:
            return  # the parameters themselves are 16-bit: GP861's finding
        yield self.finding(
            ctx,
            f"{per_step:.3g} float16 matmul/conv operators per step with a backward pass and no GradScaler "
            f"operator in the trace",
            """
            Scale the loss: scaler = torch.amp.GradScaler("cuda"); scaler.scale(loss).backward();
            scaler.step(opt); scaler.update(). Or autocast to dtype=torch.bfloat16 (Ampere and later GPUs,
            recent CPUs), which has float32's exponent range and needs no scaler.
            """,
            evidence=(Evidence("fp16_gemm_ops_per_step", round(per_step, 2), ctx.opt("min_fp16_ops_per_step"),
                               "operators", events=event_refs(gemms),
                               extra={"gradscaler_ops": 0, "optimizer": opt.optimizer or None}),),
        )


@register
class HalfParameters(Rule):
    """Training with 16-bit parameters and no float32 master copy (``model.half()``).

    After ``model.half()`` (or ``.to(torch.bfloat16)``) the optimizer adds
    each update to 16-bit weights: an update smaller than the weight's
    rounding step (about 1/1000 of it in float16, 1/128 in bfloat16) is lost,
    so training stalls, and float16 gradients underflow without loss scaling.
    Mixed precision keeps float32 parameters and runs the forward in 16 bits
    under ``torch.autocast``. From the trace: at least ``min_half_share`` of
    the outermost operators inside ``Optimizer.step#...`` that take float
    tensors take 16-bit ones (with float32 parameters, AMP's case, none do;
    Adam's float32 step counters are the usual remainder). Needs
    ``record_shapes=True``. A risk to convergence, not a time cost: a warning
    without a cost.
    """

    code = "GP861"
    name = "half-parameters"
    title = "optimizer steps 16-bit parameters (model.half()) without float32 master weights"
    severity = Severity.WARNING
    options = (
        Option("min_ops_per_step", 1.0, "report from this many 16-bit optimizer operators per step"),
        Option("min_half_share", 0.5, "report when at least this share of the typed optimizer operators is 16-bit"),
    )
    bad_example = """
        model = Net().cuda().half()                         # parameters in float16
        opt = torch.optim.Adam(model.parameters())
        for x, y in loader:
            loss = loss_fn(model(x.half()), y); loss.backward(); opt.step(); opt.zero_grad()
    """
    good_example = """
        model = Net().cuda()                                # float32 parameters (the master weights)
        opt = torch.optim.Adam(model.parameters())
        for x, y in loader:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = loss_fn(model(x), y)
            loss.backward(); opt.step(); opt.zero_grad()
    """

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        m = ctx.metrics
        if not m.steps:
            return
        opt = optimizer_ops(m)
        half, typed = _half_ops(opt)
        if not half:
            return
        share = len(half) / len(typed)
        per_step = len(half) / m.num_steps
        if share < ctx.opt("min_half_share") or per_step < ctx.opt("min_ops_per_step"):
            return
        dtype = "float16" if any(op_dtypes(o) & DTYPE_FP16 for o in half) else "bfloat16"
        _, cc, _ = device_capability(m)
        autocast = ("under torch.autocast(device_type=..., dtype=torch.bfloat16), or float16 with torch.amp.GradScaler"
                    if cc is None or cc[0] >= 8 else  # Volta/Turing (V100, T4): no bfloat16 tensor cores
                    f'under torch.autocast(device_type="cuda", dtype=torch.float16) with torch.amp.GradScaler (this '
                    f"GPU, compute capability {cc[0]}.{cc[1]}, has no bfloat16 tensor cores)")
        advice = ("Keep the parameters in float32 (drop model.half()/.to(torch.bfloat16)) and run the forward "
                  f"{autocast}. If 16-bit weights are intended (memory), use an optimizer that keeps float32 master "
                  "weights or stochastic rounding.")
        yield self.finding(
            ctx,
            f"{opt.optimizer}.step() updates {dtype} parameters: {per_step:.3g} optimizer operators per step "
            f"take 16-bit inputs ({share:.0%} of those with float tensor inputs)",
            advice,
            evidence=(Evidence("half_optimizer_op_share", round(share, 3), ctx.opt("min_half_share"), "fraction",
                               events=event_refs(half),
                               extra={"dtype": dtype, "optimizer": opt.optimizer,
                                      "half_ops_per_step": round(per_step, 2)}),),
        )


@register
class Bf16Unused(Rule):
    """Float16 mixed precision on a GPU that has bfloat16 (Ampere and later).

    bfloat16 runs on the same tensor cores as float16 at the same speed from
    NVIDIA compute capability 8.0 (A100, RTX 30xx, H100) and on AMD Instinct
    MI100 and later, and keeps float32's exponent range: no loss scaling, no
    GradScaler unscale/update work and no skipped steps on overflow. From the
    trace: a bfloat16-capable device (``deviceProperties``, else kernel
    names; see GP302), matmul/convolution operators with float16 inputs in the
    steps and no operator with bfloat16 inputs anywhere. Needs
    ``record_shapes=True``. Float32 matmuls on such a GPU are GP302's. Said
    only where the trace shows a GradScaler (:func:`gradscaler_evidence`: its
    operators, or a range or Python frame of ``GradScaler``): the advice is to
    drop it, and an inference trace or float16 training without one (GP860)
    has none. The cost is the host time of GradScaler's operators per step,
    what switching saves for sure.
    """

    code = "GP862"
    name = "bf16-unused"
    title = "float16 mixed precision on a GPU with bfloat16"
    severity = Severity.INFO
    options = (
        Option("min_compute_capability", 8.0, "NVIDIA GPUs from this compute capability run bfloat16 on tensor cores"),
        Option("min_fp16_ops_per_step", 1.0, "report from this many float16 matmul/conv operators per step"),
    )
    bad_example = """
        scaler = torch.amp.GradScaler("cuda")                  # on an A100/H100
        with torch.autocast("cuda", dtype=torch.float16):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward(); scaler.step(opt); scaler.update()
    """
    good_example = """
        with torch.autocast("cuda", dtype=torch.bfloat16):     # same speed, float32's range, no scaler
            loss = loss_fn(model(x), y)
        loss.backward(); opt.step(); opt.zero_grad()
    """

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        m = ctx.metrics
        if not m.steps:
            return
        dev, cc, where = device_capability(m)
        if cc is None or cc[0] + cc[1] / 10 < ctx.opt("min_compute_capability"):
            return
        gemms = _fp16_gemms(m)
        per_step = len(gemms) / m.num_steps
        if not gemms or per_step < ctx.opt("min_fp16_ops_per_step"):
            return
        if any(op_dtypes(o) & DTYPE_BF16 for o in m.trace.ops):
            return
        evidence = gradscaler_evidence(m)
        if evidence is None:
            return  # no GradScaler to drop: inference, or float16 training without one (GP860's)
        scaler = [o for o in m.trace.ops if o.name in _SCALER_OPS and host_step_of(m, o.ts) is not None]
        scaler_us = Intervals.from_pairs([(o.ts, o.end) for o in scaler]).total() / m.num_steps if scaler else None
        yield self.finding(
            ctx,
            f"float16 autocast on {where}, which runs bfloat16 as fast: {per_step:.3g} float16 matmul/conv "
            f"operators per step, none in bfloat16",
            """
            Autocast to dtype=torch.bfloat16 and drop the GradScaler: bfloat16 has float32's exponent range, so
            gradients neither underflow nor overflow and no step is skipped. Keep float16 only where a kernel
            you need lacks bfloat16 support.
            """,
            evidence=(Evidence("fp16_gemm_ops_per_step", round(per_step, 2), ctx.opt("min_fp16_ops_per_step"),
                               "operators", events=event_refs(gemms),
                               extra={"compute_capability": f"{cc[0]}.{cc[1]}",
                                      "device": dev.name if dev is not None else None,
                                      "gradscaler_ops_per_step": round(len(scaler) / m.num_steps, 2),
                                      "gradscaler_evidence": evidence[:120]}),),
            cost_us_per_step=scaler_us,
            cost_label="host time in GradScaler operators (not needed with bfloat16)" if scaler else None,
        )

"""GP401/GP402: work placed on the wrong device or parallelised the slow way."""

from __future__ import annotations

import re
from bisect import bisect_left
from collections import defaultdict
from typing import Any, Iterable

import numpy as np

from gpuprof.codespec import Option
from gpuprof.findings import Evidence, Finding, Severity, SourceLocation
from gpuprof.rules.base import Rule, RuleContext, event_refs, register
from gpuprof.rules.common import count_of, host_step_of, kernel_idle_within, of_step
from gpuprof.trace.columns import columns, named
from gpuprof.trace.gpuwork import union_of
from gpuprof.trace.intervals import Intervals
from gpuprof.trace.metrics import TraceMetrics
from gpuprof.trace.model import Event
from gpuprof.trace.vocab import Kind, RuntimeClass, classify_runtime, step_number
from gpuprof.units import fmt_bytes, fmt_us

__all__ = ["DataParallelUsed", "CpuComputeWithGpu", "is_heavy_compute_op"]

# ------------------------------------------------------------------ GP401

# torch.nn.DataParallel leaves these marks (DistributedDataParallel leaves none of them:
# its annotation is "DistributedDataParallel.forward", its frames torch/nn/parallel/distributed.py).
_DP_ANNOTATION = "DataParallel.forward"
_DP_FRAME_RE = re.compile(
    r"(?:^|/)torch/nn/parallel/(?:data_parallel|replicate|parallel_apply)\.py\(|^nn\.Module: DataParallel(?:_\d+)?$"
)
# Autograd Functions of torch/nn/parallel/_functions.py, recorded under their class name.
_DP_STRONG_OPS = frozenset({"Broadcast", "ReduceAddCoalesced", "BroadcastBackward", "ReduceAddCoalescedBackward"})
_DP_WEAK_OPS = frozenset({"Scatter", "Gather"})  # common words: only count next to another mark
# Where DataParallel spends host time besides running the replicas.
_DP_OVERHEAD_FRAME_RE = re.compile(
    r"torch/nn/parallel/(?:replicate\.py|scatter_gather\.py|comm\.py)\(|torch/nn/parallel/data_parallel\.py\(\d+\): (?:replicate|scatter|gather)$"
)


_DP_OP_NAMES = _DP_STRONG_OPS | _DP_WEAK_OPS | {_DP_ANNOTATION}


def _is_dp_overhead(name: str) -> bool:
    return bool(_DP_OVERHEAD_FRAME_RE.search(name)) or name in _DP_STRONG_OPS or name in _DP_WEAK_OPS


def _same(e: Event, thread: tuple[object, object] | None) -> bool:
    return thread is not None and str(e.pid) == str(thread[0]) and str(e.tid) == str(thread[1])


@register
class DataParallelUsed(Rule):
    """The model is wrapped in ``torch.nn.DataParallel``.

    Detected from what DataParallel writes into a trace: the
    ``DataParallel.forward`` annotation, Python frames of
    ``torch/nn/parallel/data_parallel.py``, ``replicate.py``,
    ``parallel_apply.py`` or ``nn.Module: DataParallel_N``, and the
    ``Broadcast``/``ReduceAddCoalesced`` autograd functions that replicate the
    parameters (``Scatter``/``Gather`` only alongside another mark).
    DistributedDataParallel leaves none of these and is not reported.

    DataParallel is one process driving every GPU from one Python thread
    (the GIL serialises the replicas' launches); it copies the whole model
    from GPU 0 to the others in every forward and gathers the outputs back on
    GPU 0. Overhead per step = host time (union, main thread) in the
    replicate/broadcast/scatter/gather ranges + GPU time of the peer-to-peer
    copies (union over devices; the replicas cannot start before their
    parameters and inputs arrive); that is the cost.
    """

    code = "GP401"
    name = "dataparallel"
    title = "torch.nn.DataParallel in use"
    severity = Severity.WARNING
    options = ()
    bad_example = """
        model = torch.nn.DataParallel(model).cuda()       # one process, all GPUs
        for x, y in loader:
            loss = criterion(model(x.cuda()), y.cuda())
    """
    good_example = """
        # torchrun --nproc_per_node=NUM_GPUS train.py
        dist.init_process_group("nccl")
        torch.cuda.set_device(local_rank := int(os.environ["LOCAL_RANK"]))
        model = DistributedDataParallel(model.cuda(), device_ids=[local_rank])
        loader = DataLoader(ds, sampler=DistributedSampler(ds), ...)
    """

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        m = ctx.metrics
        t = ctx.trace
        marks: dict[str, list[Event]] = defaultdict(list)
        marks["annotation"] = named(t.annotations, _DP_ANNOTATION.__eq__, t)
        marks["python_frames"] = named(t.python, _DP_FRAME_RE.search, t)
        dp_ops = named(t.ops, _DP_OP_NAMES.__contains__, t)
        weak: list[Event] = []
        # keys in the order their first event was seen (annotations, frames, then the ops in trace order)
        for key in [k for k, v in marks.items() if not v]:
            del marks[key]
        for o in dp_ops:
            if o.name == _DP_ANNOTATION:  # 2021 traces write record_function ranges as operators
                marks["annotation"].append(o)
            elif o.name in _DP_STRONG_OPS:
                marks["autograd_functions"].append(o)
            else:
                weak.append(o)
        if not marks:
            return
        if weak:
            marks["autograd_functions"].extend(weak)
        n = max(m.num_steps, 1)
        forwards = marks.get("annotation") or [f for f in marks.get("python_frames", []) if f.name.endswith(": forward")]
        forwards_ps = len(forwards) / n if forwards else None

        overhead_ivs = [
            (e.ts, e.end)
            for e in named(t.python, _is_dp_overhead, t) + named(t.ops, _is_dp_overhead, t)
            if (m.main_thread is None or _same(e, m.main_thread))
            and host_step_of(m, e.ts) is not None
        ]
        host_overhead = Intervals.from_pairs(overhead_ivs).total() / n
        p2p = [c for c in m.copies if c.kind.direction == "PtoP" and c.step is not None]
        p2p_bytes = sum(c.gpu.nbytes for c in p2p) / n
        p2p_us = union_of([c.gpu for c in p2p]).total() / n
        overhead = (host_overhead + p2p_us) if (overhead_ivs or p2p) else None
        gpus = len(m.devices_active)
        single = gpus <= 1
        # a CPU run (no GPU work in the trace): DataParallel just calls the module; "on 0 GPUs" says nothing
        parts = [f"on {gpus} GPU{'s' if gpus != 1 else ''}"] if gpus else ["no GPU work in the trace"]
        if forwards_ps is not None:
            parts.append(f"{count_of(forwards_ps, 'DataParallel forward')} per step")
        if overhead_ivs:
            parts.append(f"{fmt_us(host_overhead)} per step replicating/scattering/gathering on the host")
        if p2p:
            parts.append(f"{fmt_bytes(p2p_bytes)} per step copied between GPUs in {fmt_us(p2p_us)}")
        first = min((e for evs in marks.values() for e in evs), key=lambda e: e.ts)
        loc = _user_location(m, marks)
        yield self.finding(
            ctx,
            ("torch.nn.DataParallel wraps the model " if not single
             else "torch.nn.DataParallel wraps a single GPU " if gpus else "torch.nn.DataParallel wraps a CPU model ")
            + "(" + ", ".join(parts) + ")",
            "Use DistributedDataParallel, one process per GPU, started with torchrun "
            "(torchrun --nproc_per_node=NUM_GPUS train.py; DistributedDataParallel(model, device_ids=[local_rank]); "
            "DistributedSampler for the data): no per-step model replication, no GIL contention, overlapped "
            "gradient all-reduce. Then `gpuprof analyze <run dir>` compares the ranks (stragglers, exposed "
            "communication, no_sync under gradient accumulation: GP701-GP704, docs/distributed.md)."
            + (" With one GPU, drop the wrapper altogether." if gpus == 1
               else " Without a GPU it does nothing but call the module: drop the wrapper." if single else ""),
            evidence=[Evidence(
                "dataparallel_marks", sum(len(v) for v in marks.values()), None, "events",
                events=event_refs(sorted((e for evs in marks.values() for e in evs), key=lambda e: e.ts)),
                extra={"marks": {k: len(v) for k, v in marks.items()}, "gpus_active": gpus,
                       "forwards_per_step": round(forwards_ps, 3) if forwards_ps is not None else None,
                       "overhead_us_per_step": round(overhead, 1) if overhead is not None else None,
                       "host_overhead_us_per_step": round(host_overhead, 1),
                       "peer_copy_bytes_per_step": int(p2p_bytes), "peer_copy_us_per_step": round(p2p_us, 1),
                       "first_mark": first.name})],
            cost_us_per_step=overhead,
            cost_label="DataParallel overhead: host time replicating/scattering/gathering plus GPU-to-GPU copy time",
            location=loc,
            severity=Severity.INFO if single else Severity.WARNING,
        )


def _user_location(m: TraceMetrics, marks: dict[str, list[Event]]) -> SourceLocation | None:
    for key in ("annotation", "python_frames", "autograd_functions"):
        for e in marks.get(key, ())[:20]:
            loc = m.stacks.location(e.pid, e.tid, e.ts, op=e if e.kind == Kind.CPU_OP else None)
            if loc is not None:
                return loc
    return None


# ------------------------------------------------------------------ GP402

_HEAVY_PREFIXES = (
    "aten::conv", "aten::_conv", "aten::mkldnn_conv", "aten::slow_conv", "aten::_slow_conv", "aten::thnn_conv",
    "aten::linear", "aten::mkldnn_linear", "aten::matmul", "aten::mm", "aten::bmm", "aten::addmm",
    "aten::_addmm_activation", "aten::baddbmm", "aten::addbmm", "aten::einsum", "aten::scaled_dot_product_attention",
    "aten::_scaled_dot_product", "aten::addmv", "aten::mv", "aten::tensordot", "aten::linear_backward",
)
_HEAVY_EXCLUDE = ("aten::convert", "aten::mm_", "aten::mvlgamma")


def is_heavy_compute_op(name: str) -> bool:
    """Matmul/convolution/attention operators, forward and backward (``aten::conv2d``, ``aten::addmm``, ...)."""
    return name.startswith(_HEAVY_PREFIXES) and not name.startswith(_HEAVY_EXCLUDE)


def _gpu_launches_by_thread(m: TraceMetrics) -> dict[tuple[Any, ...], list[float]]:
    """Start times of runtime calls that put work on a GPU (launch, copy, memset), per host thread."""
    out: dict[tuple[Any, ...], list[float]] = {}
    for key, calls in m.threads.runtime.items():  # from each thread's shared columns; per distinct name, once
        c = columns(m.trace, calls)
        work = np.fromiter((classify_runtime(n) in _GPU_WORK_CALLS for n in c.names), bool, len(c.names))
        out[key] = c.ts[work[c.name_code]].tolist()  # in time order
    return out


_GPU_WORK_CALLS = (RuntimeClass.LAUNCH, RuntimeClass.MEMCPY, RuntimeClass.MEMSET)


def _launched_ext(m: TraceMetrics) -> set[int]:
    """External ids of the operators that GPU activity is linked to (through its launch call, or directly)."""
    out: set[int] = set()
    for g in m.trace.gpu_events():
        launch = m.launch_by_corr.get(g.corr)
        ext = launch.ext if launch is not None else g.ext
        if ext >= 0:
            out.add(ext)
    return out


@register
class CpuComputeWithGpu(Rule):
    """Heavy compute operators run on the CPU while the trace shows a GPU at work.

    A heavy operator is a matmul, convolution or attention operator
    (``aten::conv2d``, ``aten::linear``, ``aten::addmm``, ``aten::bmm``...). It
    ran on the CPU when nothing was put on a GPU while it ran: no kernel
    launch, copy or memset on its thread inside its time range, and no GPU
    activity linked to it through its External id. Reported when the trace
    has GPU activity and such operators take at least ``min_us_per_step`` and
    ``min_share`` of the step (host time, union of the outermost such
    operators inside steps). Usual cause: the model, part of it, or the input
    was never moved to the GPU. The cost is the part of that CPU time when the
    main GPU ran no kernel.
    """

    code = "GP402"
    name = "cpu-compute-with-gpu"
    title = "Heavy compute on the CPU while a GPU is available"
    severity = Severity.WARNING
    options = (
        Option("min_us_per_step", 1000.0, "report when CPU matmul/conv time per step is at least this (µs)"),
        Option("min_share", 0.05, "and at least this share of the step"),
    )
    bad_example = """
        model = Net().cuda()
        head = torch.nn.Linear(4096, 1000)             # never moved: runs on the CPU
        for x, y in loader:
            feats = model(x.cuda()).cpu()
            loss = criterion(head(feats), y)           # aten::linear on the CPU every step
    """
    good_example = """
        device = torch.device("cuda")
        model = torch.nn.Sequential(Net(), torch.nn.Linear(4096, 1000)).to(device)
        for x, y in loader:
            loss = criterion(model(x.to(device, non_blocking=True)), y.to(device, non_blocking=True))
    """

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        m = ctx.metrics
        t = ctx.trace
        if m.main_device is None or not m.steps:
            return
        heavy = {s.name for s in m.op_stats if is_heavy_compute_op(s.name) and step_number(s.name) is None}
        if not heavy:
            return
        candidates = named(t.ops, heavy.__contains__, t)
        if not candidates:
            return
        launches = _gpu_launches_by_thread(m)
        launched_ext: set[int] | None = None  # built only if some op put nothing on a GPU from its thread

        cpu_ops: list[Event] = []
        last_end: dict[tuple[Any, ...], float] = {}
        for o in candidates:  # sorted by start: skip heavy ops nested in an already-taken one
            key = (o.pid, o.tid)
            starts = launches.get(key, [])
            i = bisect_left(starts, o.ts)
            if i < len(starts) and starts[i] <= o.end:
                continue  # put work on a GPU
            if o.ext >= 0:
                if launched_ext is None:
                    launched_ext = _launched_ext(m)
                if o.ext in launched_ext:
                    continue  # GPU work linked to it (launched from another thread)
            if host_step_of(m, o.ts) is None:
                continue
            if o.end <= last_end.get(key, float("-inf")):
                continue
            last_end[key] = o.end
            cpu_ops.append(o)
        if not cpu_ops:
            return
        n = m.num_steps
        time_ps = union_of(cpu_ops).total() / n
        share = time_ps / m.mean_step_time if m.mean_step_time > 0 else 0.0
        if time_ps < ctx.opt("min_us_per_step") or share < ctx.opt("min_share"):
            return
        by_name: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
        for o in cpu_ops:
            a = by_name[o.name]
            a[0] += 1
            a[1] += o.dur
        top = sorted(by_name.items(), key=lambda kv: -kv[1][1])
        listing = ", ".join(f"{k} ×{v[0] / n:.3g} ({fmt_us(v[1] / n)})" for k, v in top[:4])
        cost = kernel_idle_within(m, [(o.ts, o.end) for o in cpu_ops]) / n
        biggest = max(cpu_ops, key=lambda o: o.dur)
        yield self.finding(
            ctx,
            f"Matmul/conv operators run on the CPU for {of_step(m, time_ps)} although "
            f"GPU {m.main_device} is in use: {listing} per step",
            "Move the model and its inputs to the GPU: model.to('cuda') after building every submodule (including "
            "heads, losses with weights and layers created later), inputs with .to('cuda', non_blocking=True); check "
            "with next(module.parameters()).device.",
            evidence=[Evidence("cpu_compute_us_per_step", round(time_ps, 1), ctx.opt("min_us_per_step"), "us",
                               events=event_refs(sorted(cpu_ops, key=lambda o: -o.dur)),
                               extra={"share_of_step": round(share, 4),
                                      "ops_per_step": {k: round(v[0] / n, 3) for k, v in top[:10]},
                                      "op_us_per_step": {k: round(v[1] / n, 1) for k, v in top[:10]},
                                      "kernel_idle_us_per_step": round(cost, 1)})],
            cost_us_per_step=cost,
            cost_label="time in these CPU operators with no kernel running on the GPU",
            location=m.stacks.location(biggest.pid, biggest.tid, biggest.ts, op=biggest),
        )

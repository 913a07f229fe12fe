"""GP203: the host stops and waits for the GPU inside the training step."""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Iterable

import numpy as np

from gpuprof.codespec import Option
from gpuprof.findings import Evidence, Finding, Severity, SourceLocation
from gpuprof.rules.base import Rule, RuleContext, event_refs, register
from gpuprof.rules.cause import CauseFigure, idle_part_per_step
from gpuprof.rules.common import copy_wait_calls, count_of, host_step_of, kernel_busy
from gpuprof.rules.copies import pageable_copies
from gpuprof.rules.whatif import ReplayContext, WhatIf
from gpuprof.trace.columns import columns, named
from gpuprof.trace.critpath.graph import WAIT_DATA
from gpuprof.trace.critpath.replay import Removal
from gpuprof.trace.metrics import TraceMetrics
from gpuprof.trace.model import op_call_stack
from gpuprof.trace.phase import trace_phase
from gpuprof.trace.syncs import SyncPoint
from gpuprof.trace.vocab import logging_call_of
from gpuprof.units import fmt_us

__all__ = ["HostSync"]

# Python frames that mean "a tensor is being turned into text" (print, str, f-strings, repr).
_FORMAT_FRAME_RE = re.compile(r"torch/_tensor_str\.py\(|torch/_tensor\.py\(\d+\): (?:__repr__|__format__|__str__)$")
_PRINT_CAUSE = "print(tensor) / f-string of a tensor"
_AUTOTUNE_CAUSE = "cuDNN autotuning (cudnn.benchmark=True)"
_LOGGED = " of a CUDA tensor"  # the cause of a sync inside a logging call ends so
_CONV_OPS = ("aten::conv", "aten::_convolution", "aten::cudnn_convolution")

_ADVICE = {
    ".item()": "Keep the value on the GPU (accumulate loss.detach() into a GPU tensor, compare with torch.where) and "
    "read it with .item() only every N steps or at the end of the epoch.",
    ".cpu() / .to('cpu')": "Move results to the CPU only when needed, every N steps; for logging, copy into a pinned "
    "buffer with non_blocking=True and read it after a later synchronisation.",
    "event.synchronize()": "Wait on an event only when its result is needed: stream.wait_event(e) orders GPU work "
    "without blocking the host; read timings (elapsed_time) once, after the loop.",
    "torch.cuda.synchronize()": "Remove torch.cuda.synchronize() from the training loop; time GPU work with "
    "torch.cuda.Event(enable_timing=True) and read the events once, later.",
    _PRINT_CAUSE: "Printing or formatting a CUDA tensor copies it to the host and waits for the GPU: log every N "
    "steps, or log loss.detach() accumulated on the GPU.",
    _AUTOTUNE_CAUSE: "cudnn.benchmark times candidate kernels on the first iterations with each new input shape; "
    "profile after warm-up (torch.profiler.schedule(wait=..., warmup=...)) and keep input shapes fixed.",
}
_LOGGING_ADVICE = (
    "Logging a CUDA tensor copies it to the host and waits for the GPU: log every N steps, keep running values "
    "on the GPU (total += loss.detach()) and pass plain numbers read once then (total.item() / N)."
)
_GENERIC_ADVICE = (
    "Avoid data-dependent host decisions in the step: keep tensors on the GPU, use torch.where/masking instead of "
    "boolean indexing or nonzero, pass output_size to repeat_interleave, and read values (.item(), .tolist(), "
    "bool(tensor)) only every N steps."
)


def _cause_frames(m: TraceMetrics) -> dict[tuple[str, str], list[tuple[float, float, str]]]:
    """Per host thread, the Python frames that name a sync's cause (cached): logging calls
    (``SummaryWriter.add_scalar``, ``logger.info``, ``wandb.log``, ...) and frames that format a tensor
    as text (print, str, f-strings, repr)."""
    cached = getattr(m, "_gp203_cause_frames", None)
    if cached is None:
        cached = defaultdict(list)
        causes: dict[str, str | None] = {}  # per distinct frame name, once
        for name in columns(m.trace, m.trace.python).names:
            what = logging_call_of(name)
            if what is not None and what != "print(...)":  # print is named by its formatting frames
                causes[name] = f"{what}{_LOGGED}"
            elif _FORMAT_FRAME_RE.search(name):
                causes[name] = _PRINT_CAUSE
        if causes:
            for fr in named(m.trace.python, causes.__contains__, m.trace):
                cached[(str(fr.pid), str(fr.tid))].append((fr.ts, fr.end, causes[fr.name]))
        cached = dict(cached)
        object.__setattr__(m, "_gp203_cause_frames", cached)
    return cached


def _cause(m: TraceMetrics, s: SyncPoint) -> str:
    r = s.runtime
    found = [(lo, cause) for lo, hi, cause in _cause_frames(m).get((str(r.pid), str(r.tid)), ()) if lo <= r.ts <= hi]
    if found:
        logged = [c for c in found if c[1] != _PRINT_CAUSE]
        return min(logged or found)[1]  # the outermost logging call: what the user wrote
    for o in s.ops[:1]:  # 2021 traces: the Python stack is the outermost operator's "Call stack"
        stack = op_call_stack(o)
        if stack is not None and _FORMAT_FRAME_RE.search(stack):
            return _PRINT_CAUSE
    if "EventSynchronize" in r.name and any(o.name.startswith(_CONV_OPS) for o in s.ops):
        return _AUTOTUNE_CAUSE
    if not s.ops and s.cause == r.name:  # a bare runtime call: name what the user called
        for marker, what in (("EventSynchronize", "event.synchronize()"), ("StreamSynchronize", "stream.synchronize()")):
            if marker in r.name:
                return what
    return s.cause


def _idle_after(m: TraceMetrics, t: float, limit: float) -> float:
    """Time from ``t`` until the next kernel starts on the main device (0 if none starts before ``limit``).

    The GPU has nothing queued after a sync, so this is the bubble the sync leaves."""
    busy = kernel_busy(m)
    i = busy.next_start(t)
    if i > 0 and busy.ends[i - 1] > t:
        return 0.0  # a kernel is still running when the host returns
    if i >= len(busy) or busy.starts[i] > limit:
        return 0.0
    return float(busy.starts[i]) - t


def _is_profiler_own(m: TraceMetrics, s: SyncPoint, last_op_end: float) -> bool:
    """The device sync the profiler issues when it stops: no operator, no user frame, after the last operator."""
    return not s.ops and s.location is None and "Device" in s.runtime.name and s.runtime.ts >= last_op_end


def site_syncs(ctx: ReplayContext, f: Finding) -> Removal:
    """GP203's what-if: the waits of the finding's site (its source line; without one, the sync points without one):
    each sync point's outermost operator (``.item()`` is a device→host copy *and* a stream sync: both go), less the
    waits of host→device copies (GP202's)."""
    g = ctx.graph
    spans = sorted((s.ops[0].ts, s.ops[0].end) if s.ops else (s.runtime.ts, s.runtime.end)
                   for s in ctx.metrics.syncs if s.location == f.location)
    if not spans:
        return Removal()
    lo = np.array([a for a, _ in spans])
    hi = np.maximum.accumulate(np.array([b for _, b in spans]))
    out = []
    for w in ctx.replayer.waits.tolist():
        if g.w_kind[w] == WAIT_DATA or g.w_tag[w] == "HtoD":
            continue
        i = int(np.searchsorted(lo, g.w_ts[w], side="right")) - 1
        if i >= 0 and g.w_end[w] <= hi[i] + 1e-6:
            out.append(int(w))
    return Removal(drop=frozenset(out))


@register
class HostSync(Rule):
    """The host waits for the GPU in the middle of a step (a host sync point).

    Sync points come from ``gpuprof.trace.metrics``: synchronising runtime
    calls (``cudaStreamSynchronize``, ``cudaDeviceSynchronize``,
    ``cudaEventSynchronize``) and blocking device→host copies on the main
    thread. Each is attributed to what the user wrote, from the operator
    chain (``aten::item`` > ``aten::_local_scalar_dense`` is ``.item()``,
    ``aten::nonzero``, ``aten::copy_`` to the CPU is ``.cpu()``, Python frames
    in ``torch/_tensor_str.py`` are ``print(tensor)``, a sync inside a logging
    call's frame (``SummaryWriter.add_scalar``, ``logger.info``, ``wandb.log``,
    see ``gpuprof.trace.vocab.logging_call_of``) is that call logging a CUDA
    tensor, no operator at all is ``torch.cuda.synchronize()``) and to the user's source line (Python frames
    with ``with_stack=True``, or the 2021 ``Call stack``). One finding per
    (cause, source line). Syncs outside the steps' host ranges (the
    profiler's own closing ``cudaDeviceSynchronize``) and the waits of
    blocking host→device copies (GP202) are left out. A sync that waits for a
    pageable device→host copy GP201 reports (``.cpu()`` into pageable memory)
    is charged to GP201: this finding names it in a ``cost_counted_in``
    evidence and keeps only the rest of its cost.

    After a sync the GPU queue is empty, so the GPU idles until the host has
    queued new work. The cost of one sync = min(host time blocked in it, time
    from its end until the next kernel starts on the main GPU): the bubble the
    sync created, but never more than the time the host lost.
    """

    code = "GP203"
    name = "host-sync"
    title = "Host waits for the GPU inside the step"
    what_if = WhatIf("the site's syncs gone", site_syncs)
    cause = CauseFigure("GPU idle while the host synchronises", idle_part_per_step("sync"))
    severity = Severity.WARNING
    options = (
        Option("min_cost_us_per_step", 50.0, "report a sync site costing at least this much per step (µs)"),
        Option("min_share", 0.005, "and at least this share of the step"),
    )
    # severity follows cost by the one policy (gpuprof.codespec.severity_for_cost); a sync site under 3% of
    # the step is info (--option GP203.info_below_share, formerly GP203.warn_share)
    info_below_share = 0.03
    bad_example = """
        for x, y in loader:
            loss = model(x.cuda()).sum()
            loss.backward(); opt.step()
            total += loss.item()                  # host waits for the whole step's GPU work
            if (y.cuda() > 0).any():              # bool(tensor): another sync
                print(loss)                       # printing a CUDA tensor: another sync
    """
    good_example = """
        total = torch.zeros((), device="cuda")
        for i, (x, y) in enumerate(loader):
            loss = model(x.cuda(non_blocking=True)).sum()
            loss.backward(); opt.step()
            total += loss.detach()                # no sync
            if i % 100 == 0:
                print(total.item() / 100)         # one sync every 100 steps
    """

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        m = ctx.metrics
        if not m.steps or not m.syncs:
            return
        if trace_phase(m) is not None:
            return  # a graph capture pass (gpuprof.trace.phase): its syncs belong to recording, not to the steps
        copy_waits = {
            id(w)
            for c in m.copies
            if c.blocking and c.kind.direction == "HtoD"
            for w in copy_wait_calls(m, c)
        }
        main_ops = m.host_intervals["cpu_ops"]  # merged operator time of the main thread
        last_op_end = float(main_ops.ends[-1]) if main_ops else float("-inf")
        groups: dict[tuple[str, SourceLocation | None], list[SyncPoint]] = defaultdict(list)
        for s in m.syncs:
            if host_step_of(m, s.runtime.ts) is None or id(s.runtime) in copy_waits:
                continue
            if _is_profiler_own(m, s, last_op_end):
                continue
            groups[(_cause(m, s), s.location)].append(s)

        # Cost shared with GP201: a sync that is the wait of a pageable device→host copy GP201 reports
        # (`.cpu()` into pageable memory) is charged there, once; this finding keeps the rest.
        gp201 = ctx.runs("GP201")
        owned_waits = {
            id(w) for c in (pageable_copies(m, gp201["min_bytes_per_step"]).get("DtoH", []) if gp201 is not None else [])
            for w in copy_wait_calls(m, c)
        }
        n = m.num_steps
        for (cause, loc), syncs in groups.items():
            # one occurrence = one outermost operator (.item() is a copy *and* a stream sync)
            occ: dict[int, list[SyncPoint]] = defaultdict(list)
            for s in syncs:
                occ[id(s.ops[0]) if s.ops else id(s.runtime)].append(s)
            blocked_total = 0.0
            cost_total = 0.0
            shared_total = 0.0
            shared_n = 0
            for parts in occ.values():
                blocked = sum(p.runtime.dur for p in parts)
                last = max(p.runtime.end for p in parts)
                blocked_total += blocked
                # the bubble often spans into the next step (.item() at the end of a step)
                idle = _idle_after(m, last, m.steps[-1].end)
                one = min(blocked, idle) if m.main_device is not None else blocked
                cost_total += one
                if any(id(p.runtime) in owned_waits for p in parts):
                    shared_total += one
                    shared_n += 1
            count = len(occ) / n
            cost = cost_total / n
            blocked_ps = blocked_total / n
            share = cost / m.mean_step_time if m.mean_step_time > 0 else 0.0
            if cost < ctx.opt("min_cost_us_per_step") or share < ctx.opt("min_share"):
                continue
            shared = []
            label = "GPU left idle after these syncs (at most the blocked time)"
            if shared_n:
                shared_us = shared_total / n
                shared = [Evidence("cost_counted_in", "GP201", None, "",
                                   extra={"kernel_idle_us_per_step": round(shared_us, 3), "syncs": shared_n})]
                label = (f"GPU left idle after these syncs (at most the blocked time), less the {fmt_us(shared_us)} "
                         f"per step counted in GP201 (its pageable device→host copies)")
                cost = max(cost - shared_us, 0.0)
            chain = _chain(syncs[0])
            runtime_names = sorted({s.runtime.name for s in syncs})
            where = f" at {loc}" if loc else ""
            yield self.finding(
                ctx,
                f"{cause}{where}: {count_of(count, 'host sync')} per step, host blocked {fmt_us(blocked_ps)} per step",
                _ADVICE.get(cause, _LOGGING_ADVICE if cause.endswith(_LOGGED) else _GENERIC_ADVICE),
                evidence=[Evidence("sync_cost_us_per_step", round(cost, 1), ctx.opt("min_cost_us_per_step"), "us",
                                   events=event_refs(s.runtime for s in syncs),
                                   extra={"cause": cause, "count_per_step": round(count, 3),
                                          "host_blocked_us_per_step": round(blocked_ps, 1), "op_chain": chain,
                                          "runtime_calls": runtime_names,
                                          "steps_with_sync": len({host_step_of(m, s.runtime.ts) for s in syncs})}),
                          *shared],
                cost_us_per_step=cost, cost_label=label, location=loc,
            )


def _chain(s: SyncPoint) -> str:
    """``aten::item > aten::_local_scalar_dense > cudaMemcpyAsync`` (innermost four operators)."""
    names = [o.name for o in s.ops[-4:]] + [s.runtime.name]
    return " > ".join(names)

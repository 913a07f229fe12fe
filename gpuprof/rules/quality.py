"""GP901-GP903: is the trace itself fit for analysis and viewing?"""

from __future__ import annotations

import math
import statistics
from typing import Iterable

import numpy as np

from gpuprof.codespec import Option
from gpuprof.findings import EventRef, Evidence, Finding, Severity
from gpuprof.rules.base import Rule, RuleContext, event_refs, register
from gpuprof.rules.cause import CauseFigure, step_time_per_step
from gpuprof.trace.breakdown import BREAKDOWN_KEYS
from gpuprof.trace.columns import columns
from gpuprof.trace.intervals import Intervals
from gpuprof.trace.metrics import TraceMetrics
from gpuprof.trace.model import op_dtypes
from gpuprof.trace.phase import compile_phase_ops
from gpuprof.trace.steps import Step
from gpuprof.trace.vocab import RuntimeClass, classify_runtime
from gpuprof.units import fmt_bytes, fmt_us

__all__ = ["StepOutliers", "GpuActivityMissing", "TraceTooLarge"]

_MIB = 1 << 20

_BREAKDOWN_WORDS = {
    "kernel": "GPU kernels",
    "communication": "collectives",
    "memcpy": "copies",
    "memset": "memsets",
    "runtime": "CUDA runtime calls",
    "data_loading": "data loading",
    "cpu_exec": "CPU operators",
    "other": "untraced host time (Python, GC, I/O)",
}


def _step_ref(s: Step) -> EventRef:
    return EventRef(name=f"ProfilerStep#{s.id}", ts=s.start, dur=s.dur)


def _extra_cause(m: TraceMetrics, i: int, baseline: dict[str, float]) -> tuple[str, float]:
    """The breakdown part that grew most in step ``i`` over the baseline, and by how much (µs)."""
    b = m.breakdown_per_step[i]
    key = max(BREAKDOWN_KEYS, key=lambda k: b.get(k, 0.0) - baseline.get(k, 0.0))
    return key, b.get(key, 0.0) - baseline.get(key, 0.0)


def _step_times(steps: list[Step]) -> list[float]:
    """Step times as the training loop sees them: each step's window, except the last one's host time.

    The last step's window also holds the GPU draining the work queued by
    earlier steps when the host ran ahead, which makes it look slow in any
    healthy GPU-bound loop; its host time is the comparable figure.
    """
    out = [s.dur for s in steps]
    if out:
        last = steps[-1]
        out[-1] = min(last.dur, max(last.cpu_end - last.start, 0.0))
    return out


@register
class StepOutliers(Rule):
    """Some profiled steps take much longer than the others.

    Two patterns, both against the median step time: **warm-up** (the first
    profiled step(s) are ``warmup_factor`` times slower: cuDNN autotuning,
    lazy CUDA init, allocator growth or torch.compile were still running, so
    the profiler schedule's ``warmup`` was too short and the averages are
    skewed) and **outliers** later on (single steps ``outlier_factor`` times
    slower: garbage collection, checkpoint saving, evaluation, logging or a
    data-loading stall). The last step is measured by its host time (see
    ``_step_times``). For each slow step the finding names the part of the
    step-time breakdown that grew most compared with a median step.
    """

    code = "GP901"
    name = "step-outliers"
    title = "Step-time outliers or warm-up inside the profiled window"
    cause = CauseFigure("step time (its mean: outlier steps weigh in it)", step_time_per_step, statistic="mean")
    severity = Severity.WARNING
    options = (
        Option("min_steps", 3, "need at least this many steps to judge"),
        Option("warmup_factor", 1.5, "leading steps slower than this times the median are warm-up"),
        Option("outlier_factor", 1.5, "later steps slower than this times the median are outliers"),
    )
    bad_example = """
        prof = torch.profiler.profile(schedule=torch.profiler.schedule(wait=0, warmup=0, active=5), ...)
        for i, batch in enumerate(loader):
            train_step(batch)
            if i % 3 == 0:
                torch.save(model.state_dict(), "ckpt.pt")   # one slow step in every three
            prof.step()
    """
    good_example = """
        prof = torch.profiler.profile(schedule=torch.profiler.schedule(wait=1, warmup=3, active=5), ...)
        for i, batch in enumerate(loader):
            train_step(batch)
            prof.step()
        torch.save(model.state_dict(), "ckpt.pt")          # outside the profiled steps
    """

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        m = ctx.metrics
        steps = m.steps
        if not m.has_step_markers or len(steps) < ctx.opt("min_steps"):
            return
        times = _step_times(steps)
        # Warm-up: leading steps slower than the median of the steps after them.
        n_warm = 0
        while n_warm < len(steps) - 2:
            rest = statistics.median(times[n_warm + 1 :])
            if rest > 0 and times[n_warm] > ctx.opt("warmup_factor") * rest:
                n_warm += 1
            else:
                break
        steady = list(range(n_warm, len(steps)))
        median = statistics.median(times[i] for i in steady)
        if median <= 0:
            return
        baseline = {k: statistics.median(m.breakdown_per_step[i].get(k, 0.0) for i in steady) for k in BREAKDOWN_KEYS}
        if n_warm:
            warm = steps[:n_warm]
            excess = sum(s.dur - median for s in warm)
            key, grew = _extra_cause(m, 0, baseline)
            ids = ", ".join(f"#{s.id} {fmt_us(s.dur)}" for s in warm)
            yield self.finding(
                ctx,
                f"Warm-up inside the profiled window: step{'s' if n_warm > 1 else ''} {ids} "
                f"vs a median of {fmt_us(median)} ({warm[0].dur / median:.1f}x); step #{warm[0].id} spent "
                f"{fmt_us(grew)} more in {_BREAKDOWN_WORDS[key]}",
                f"Lengthen the profiler schedule's warm-up so these steps are not recorded, e.g. "
                f"torch.profiler.schedule(wait=1, warmup={n_warm + 2}, active={max(len(steps) - n_warm, 3)}); "
                "the figures of this report are skewed by them until then.",
                evidence=[Evidence("warmup_step_ratio", round(warm[0].dur / median, 2), ctx.opt("warmup_factor"),
                                   "x median", events=tuple(_step_ref(s) for s in warm),
                                   extra={"step_ids": [s.id for s in warm], "step_us": [round(s.dur, 1) for s in warm],
                                          "median_step_us": round(median, 1), "grew": key})],
                cost_us_per_step=excess / len(steps),
                cost_label="time of the warm-up steps above the median, spread over all steps",
                severity=Severity.INFO,
            )
        slow = [i for i in steady if times[i] > ctx.opt("outlier_factor") * median]
        if not slow:
            return
        worst = max(slow, key=lambda i: times[i])
        key, grew = _extra_cause(m, worst, baseline)
        ids = ", ".join(f"#{steps[i].id} {fmt_us(times[i])}" for i in slow[:5]) + (" ..." if len(slow) > 5 else "")
        excess = sum(times[i] - median for i in slow)
        yield self.finding(
            ctx,
            f"{len(slow)} of {len(steady)} steps take over {ctx.opt('outlier_factor'):g}x the median "
            f"{fmt_us(median)}: {ids}; the slowest (#{steps[worst].id}, {times[worst] / median:.1f}x) spent "
            f"{fmt_us(grew)} more in {_BREAKDOWN_WORDS[key]}",
            "Find what runs only in those steps: periodic checkpoint saving, evaluation or logging (move it out of "
            "the training step, or save asynchronously), Python garbage collection (gc.freeze() after setup, or "
            "gc.disable() with periodic gc.collect()), or DataLoader stalls (more workers, prefetch_factor). "
            "Open the slow steps in the trace viewer (`gpuprof analyze --annotate`).",
            evidence=[Evidence("slow_step_ratio", round(times[worst] / median, 2), ctx.opt("outlier_factor"),
                               "x median", events=tuple(_step_ref(steps[i]) for i in slow[:20]),
                               extra={"step_ids": [steps[i].id for i in slow], "step_us": [round(times[i], 1) for i in slow],
                                      "median_step_us": round(median, 1), "grew": key, "grew_us": round(grew, 1)})],
            cost_us_per_step=excess / len(steps),
            cost_label="time of the slow steps above the median, spread over all steps",
        )


@register
class GpuActivityMissing(Rule):
    """The trace shows a GPU but not one kernel, copy or memset ran on it.

    A GPU was there (the trace lists ``deviceProperties``) or the host called
    the CUDA/HIP runtime, yet no GPU activity was recorded. Either
    ``ProfilerActivity.CUDA`` was left out of ``activities``, or CUPTI could
    not record (another profiler such as Nsight or DCGM held it, a CUPTI
    range/counter session replaced activity tracing, insufficient
    permissions). Every GPU-side diagnosis is then impossible. With launch
    calls in the trace this is certain (warning); with only
    ``deviceProperties`` the model may simply have run on the CPU (info).
    """

    code = "GP902"
    name = "gpu-activity-missing"
    title = "No GPU activity recorded"
    severity = Severity.WARNING
    options = ()
    bad_example = """
        with torch.profiler.profile(activities=[ProfilerActivity.CPU]) as prof:   # no CUDA activity
            train_step(model.cuda(), batch)
    """
    good_example = """
        with torch.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            train_step(model.cuda(), batch)
    """

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        t = ctx.trace
        if t.has_gpu_activity:
            return
        launches = [r for r in t.runtime if classify_runtime(r.name) is RuntimeClass.LAUNCH]
        if not t.devices and not t.runtime:
            return  # a CPU-only run
        gpus = ", ".join(sorted({d.name for d in t.devices if d.name})) or f"{len(t.devices)} GPU(s)"
        if t.runtime:
            what = f"{len(t.runtime)} CUDA runtime calls ({len(launches)} kernel launches)"
            sev = Severity.WARNING
            why = "the host launched GPU work but CUPTI recorded none of it"
        else:
            what = "no CUDA runtime calls either"
            sev = Severity.INFO
            why = "either the model ran on the CPU, or GPU activity was not requested"
        yield self.finding(
            ctx,
            f"No kernel, memcpy or memset events although the trace lists {gpus} and has {what}: {why}",
            "Profile with activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]. If CUDA was already listed, "
            "CUPTI could not trace: close other profilers (Nsight Systems/Compute, DCGM profiling) that hold it, "
            "check for 'CUPTI_ERROR_INSUFFICIENT_PRIVILEGES' (set NVreg_RestrictProfilingToAdminUsers=0 or run "
            "with the needed capability), and do not mix the CUPTI range profiler with activity tracing.",
            evidence=[Evidence("gpu_events", 0, None, "events", events=event_refs(launches or t.runtime),
                               extra={"devices": len(t.devices), "runtime_calls": len(t.runtime),
                                      "launch_calls": len(launches)})],
            severity=sev,
        )


@register
class TraceTooLarge(Rule):
    """The trace file is too large to open comfortably in a browser trace viewer.

    Perfetto UI and chrome://tracing parse the whole JSON in the browser:
    above a few hundred MB of JSON or a few million events they slow to a
    crawl or run out of memory (chrome://tracing fails far earlier than
    Perfetto). The size grows with the number of active steps and with
    ``record_shapes``/``with_stack``/``profile_memory``. gpuprof itself reads
    any size; this is about looking at the trace.
    """

    code = "GP903"
    name = "trace-too-large"
    title = "Trace too large for a browser viewer"
    severity = Severity.INFO
    options = (
        Option("max_json_mib", 300.0, "JSON text above this many MiB is reported"),
        Option("max_events", 2_000_000, "more events than this are reported"),
        Option("warn_json_mib", 1000.0, "above this many MiB the finding is a warning (browser viewers usually fail)"),
    )
    bad_example = """
        prof = torch.profiler.profile(schedule=torch.profiler.schedule(wait=1, warmup=1, active=50),
                                      record_shapes=True, with_stack=True, profile_memory=True, ...)
    """
    good_example = """
        prof = torch.profiler.profile(schedule=torch.profiler.schedule(wait=1, warmup=2, active=3, repeat=1),
                                      on_trace_ready=torch.profiler.tensorboard_trace_handler("./log"))
    """

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        t = ctx.trace
        m = ctx.metrics
        size = t.json_bytes or t.file_bytes
        max_bytes = ctx.opt("max_json_mib") * _MIB
        too_big = size > max_bytes
        too_many = t.num_events > ctx.opt("max_events")
        if not (too_big or too_many):
            return
        n = max(m.num_steps, 1)
        per_step_bytes = size / n
        per_step_events = t.num_events / n
        # Steps that fit both limits (at least one).
        fit = min(max_bytes / per_step_bytes if per_step_bytes > 0 else math.inf,
                  ctx.opt("max_events") / per_step_events if per_step_events > 0 else math.inf)
        active = max(int(fit), 1)
        heavy = []
        if t.with_stack:
            heavy.append("with_stack=True")
        if any(op_dtypes(o) for o in t.ops[:5000]):  # only record_shapes=True writes input types
            heavy.append("record_shapes=True")
        if t.profile_memory or t.memory:
            heavy.append("profile_memory=True")
        advice = (f"Record fewer steps: at about {fmt_bytes(per_step_bytes)} and {per_step_events:,.0f} events per "
                  f"step, torch.profiler.schedule(wait=1, warmup=2, active={active}, repeat=1) keeps the file under "
                  f"{fmt_bytes(max_bytes)}")
        if heavy:
            advice += f"; turn off {', '.join(heavy)} unless needed (each adds events or arguments to every op)"
        compiling = _share_in_compilation(m)
        if compiling >= 0.5:
            advice = (
                f"{compiling:.0%} of the host events are torch.compile compiling inside the recorded steps "
                "(Dynamo and Inductor's own operators and Python frames): start recording after compilation "
                "settles (a later schedule wait/warmup), and see GP811/GP802 for why it compiled there. "
            ) + advice
        advice += (
            ". To look at this trace anyway, run `gpuprof analyze --annotate out.pt.trace.json.gz` and open it in "
            "Perfetto UI (ui.perfetto.dev, which copes with larger files than chrome://tracing), jumping to the "
            "findings' track."
        )
        sev = Severity.WARNING if size > ctx.opt("warn_json_mib") * _MIB else Severity.INFO
        yield self.finding(
            ctx,
            f"Trace too large for a browser viewer: {fmt_bytes(size)} of JSON, {t.num_events:,} events over "
            f"{m.num_steps} step{'s' if m.num_steps != 1 else ''} ({fmt_bytes(per_step_bytes)} and "
            f"{per_step_events:,.0f} events per step)",
            advice,
            evidence=[
                Evidence("json_bytes", size, int(max_bytes), "bytes", extra={"per_step_bytes": round(per_step_bytes),
                                                                             "share_in_compilation": round(compiling, 3)}),
                Evidence("num_events", t.num_events, ctx.opt("max_events"), "events",
                         extra={"per_step_events": round(per_step_events), "suggested_active": active}),
            ],
            severity=sev,
        )


def _share_in_compilation(m: TraceMetrics) -> float:
    """Share of the host events (operators and Python frames) that start inside a torch.compile phase."""
    t = m.trace
    phases = Intervals.from_pairs([(op.ts, op.end) for op in compile_phase_ops(m)])
    total = len(t.ops) + len(t.python)
    if not phases or not total:
        return 0.0
    starts = np.concatenate([columns(t, t.ops).ts, columns(t, t.python).ts])
    return float(phases.covers(starts).sum()) / total

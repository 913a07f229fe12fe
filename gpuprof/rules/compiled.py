"""GP810/GP811: torch.compile seen in a trace (compiled regions per step, compiling inside steps).

What the trace holds of ``torch.compile`` (torch >= 2.1): each call into
Dynamo-compiled code is a ``Torch-Compiled Region: F/V`` operator, where F
numbers the compiled frame (a function, or the resume function Dynamo makes
after a graph break) and V its version (V > 0: a recompilation); with
``with_stack=True`` the resume functions appear as Python frames named
``torch_dynamo_resume_in_<function>_at_<line>``. Compilation itself shows as
Dynamo's timed phases (``entire_frame_compile``, ``... (dynamo_timed)``).
"""

from __future__ import annotations

import re
from collections import Counter
from statistics import median
from typing import Iterable

from gpuprof.codespec import Option
from gpuprof.findings import Evidence, Finding, Severity, SourceLocation
from gpuprof.rules.base import Rule, RuleContext, event_refs, register
from gpuprof.rules.common import host_step_of
from gpuprof.trace.columns import named
from gpuprof.trace.intervals import Intervals
from gpuprof.trace.metrics import TraceMetrics
from gpuprof.trace.model import Event
from gpuprof.trace.phase import compile_phase_ops, compile_time, inductor_recording, trace_phase

__all__ = ["CompiledRegions", "CompileInSteps", "compiled_region"]

_REGION = re.compile(r"^Torch-Compiled Region: (\d+)/(\d+)$")
_RESUME = re.compile(r"^(.*)\((\d+)\): torch_dynamo_resume_in_(.+)_at_(\d+)$")


def _is_resume_frame(name: str) -> bool:
    return "torch_dynamo_resume_in_" in name


def compiled_region(name: str) -> tuple[int, int] | None:
    """(frame, version) of a ``Torch-Compiled Region: F/V`` operator, else None."""
    m = _REGION.match(name)
    return (int(m.group(1)), int(m.group(2))) if m else None


def _regions_by_step(m: TraceMetrics) -> dict[int, list[Event]]:
    out: dict[int, list[Event]] = {}
    # the region test asked once per distinct operator name (named), not once per operator
    for op in named(m.trace.ops, _is_region, m.trace):
        s = host_step_of(m, op.ts)
        if s is not None:
            out.setdefault(s, []).append(op)
    return out


def _is_region(name: str) -> bool:
    return name.startswith("Torch-Compiled Region") and compiled_region(name) is not None


@register
class CompiledRegions(Rule):
    """torch.compile code split into several compiled regions per step: graph breaks.

    A graph break makes Dynamo compile the code before it and after it as
    separate graphs, with the unsupported Python (a ``print``, ``.item()``,
    numpy, a data-dependent ``if``) run eagerly in between: no fusion across
    the break, more guards to check, and each part recompiled on its own.
    From the trace: per recorded step, the distinct compiled frames run
    (``Torch-Compiled Region: F/V`` operators, F distinct). Reported when a
    resume function after a graph break is seen (Python frames
    ``torch_dynamo_resume_in_<fn>_at_<line>``, with ``with_stack=True``),
    naming the line, or when the median step runs at least ``min_regions``
    compiled frames. Capture (``gpuprof.profile``) also reports each break
    with its reason (GP801).
    """

    code = "GP810"
    name = "compiled-regions"
    title = "torch.compile code split into several regions per step (graph breaks)"
    options = (
        Option("min_regions", 3, "report when the median step runs at least this many compiled frames "
                                 "(without resume frames in the trace)"),
    )
    bad_example = """
        model = torch.compile(model)
        # in model.forward:
        h = self.encoder(x)
        print("h", h.shape)                       # graph break: two compiled graphs per call
        return self.head(h)
    """
    good_example = """
        model = torch.compile(model)
        # in model.forward: no Python side effects inside the compiled code
        return self.head(self.encoder(x))
    """

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        m = ctx.metrics
        by_step = _regions_by_step(m)
        if not by_step:
            return
        frames_per_step = [len({compiled_region(e.name)[0] for e in evs}) for evs in by_step.values()]  # type: ignore[index]
        calls_per_step = [len(evs) for evs in by_step.values()]
        med_frames = median(frames_per_step)
        resumes: Counter[tuple[str, int, str]] = Counter()
        for p in named(m.trace.python, _is_resume_frame, m.trace):
            r = _RESUME.match(p.name)
            if r and host_step_of(m, p.ts) is not None:
                resumes[(r.group(1), int(r.group(4)), r.group(3))] += 1
        if not resumes and med_frames < ctx.opt("min_regions"):
            return
        sites = sorted(resumes)
        where = "; ".join(f"{fn} in `{func}` at line {line}" for fn, line, func in sites[:5])
        first = sites[0] if sites else None
        msg = (f"each step runs {med_frames:g} compiled frames (median; {median(calls_per_step):g} calls into "
               f"compiled regions)")
        msg += f": graph breaks at {where}" if sites else ": graph breaks or several separately compiled functions"
        yield self.finding(
            ctx, msg,
            """
            Each graph break splits the compiled code: the parts are compiled, guarded and run separately,
            with eager Python in between, and nothing is fused across the break. Capture the run with
            gpuprof.profile to get each break's reason (GP801), or run torch._dynamo.explain(model)(x);
            then move the unsupported call (print/logging, .item(), numpy, data-dependent control flow) out
            of the compiled code or wrap it in torch.compiler.disable. fullgraph=True turns breaks into errors.
            """,
            evidence=(Evidence("compiled_frames_per_step", med_frames, ctx.opt("min_regions"), "frames",
                               events=event_refs(e for evs in by_step.values() for e in evs),
                               extra={"graph_break_sites": [f"{fn}:{line} ({func})" for fn, line, func in sites[:20]],
                                      "calls_per_step": median(calls_per_step)}),),
            location=SourceLocation(first[0], first[1], first[2]) if first else None,
        )


_COMPILE_ADVICE = """
    Compiling inside the profiled window means the code recompiled (shapes or Python values that
    Dynamo guards on changed) or took a new path late. Capture with gpuprof.profile to get the guard
    that failed (GP802); keep shapes stable (drop_last=True, padding), mark dynamic dimensions
    (torch._dynamo.mark_dynamic or dynamic=True), and start recording after compilation settles.
"""
_RECORD_ADVICE = """
    Recording CUDA graphs on the first calls of each shape is what mode="reduce-overhead" needs: keep
    it, and start the profile after those calls (a new shape records again: keep shapes stable).
"""


@register
class CompileInSteps(Rule):
    """torch.compile compiling inside the recorded steps (recompilations, or warm-up traced).

    Dynamo's compilation phases (``entire_frame_compile``, ``... (dynamo_timed)``
    operators) inside ``ProfilerStep`` ranges: the step stopped to trace and
    compile. Inside a window after warm-up this means recompilations (a
    ``Torch-Compiled Region: F/V`` with V > 0 names the recompiled version) or
    code paths first taken late. The time is the union of those phases inside
    the steps; the cost per step is that time divided by the steps.

    A trace without ``ProfilerStep#`` markers (a bare ``torch.profiler.profile()``
    around the first calls, or a serving engine's capture pass) has no steps to
    be inside: there the phases are looked for in the whole trace, lead-in
    included, and reported as info: the trace records warm-up, compilation is a
    one-off (no per-step cost), and the advice is to record steady-state calls,
    never to remove the compilation or the CUDA/HIP graph recording that
    ``mode="reduce-overhead"`` and serving engines need.
    """

    code = "GP811"
    name = "compile-in-steps"
    title = "torch.compile compiling inside the recorded steps"
    options = (Option("min_us_per_step", 1000.0, "report compile time from this much per step (µs)"),)
    bad_example = """
        model = torch.compile(model)
        for x, y in loader:                       # last batch smaller, lengths vary: recompiles
            loss = loss_fn(model(x), y); loss.backward(); opt.step()
    """
    good_example = """
        model = torch.compile(model, dynamic=True) # or torch._dynamo.mark_dynamic(x, 0)
        loader = DataLoader(ds, batch_size=64, drop_last=True)
        for x, y in loader:
            loss = loss_fn(model(x), y); loss.backward(); opt.step()
    """

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        m = ctx.metrics
        if not m.steps:
            return
        if not m.has_step_markers:
            yield from self._warmup_trace(ctx)
            return
        compiling = [op for op in compile_phase_ops(m) if host_step_of(m, op.ts) is not None]
        recording = [e for e in inductor_recording(m) if host_step_of(m, e.ts) is not None]
        phases = compiling + recording
        if not phases:
            return
        spent = Intervals.from_pairs([(op.ts, op.end) for op in phases]).total()
        per_step = spent / m.num_steps
        if per_step < ctx.opt("min_us_per_step"):
            return
        steps_hit = sorted({host_step_of(m, op.ts) for op in phases})  # type: ignore[type-var]
        versions = sorted({op.name.split(": ", 1)[1] for op in m.trace.ops
                           if (r := compiled_region(op.name)) is not None and r[1] > 0})
        ids = ", ".join(str(m.steps[i].id) for i in steps_hit[:8] if i is not None)
        what = "Dynamo compiled" if compiling else "Inductor recorded CUDA graphs"
        msg = f"{what} inside {len(steps_hit)} of {m.num_steps} recorded steps (ProfilerStep# {ids})"
        if compiling and recording:
            msg += f"; Inductor also recorded CUDA graphs ({_ms(recording)} ms)"
        if versions:
            msg += f"; recompiled regions run: {', '.join(versions[:6])}"
        advice = " ".join((_COMPILE_ADVICE * bool(compiling) + _RECORD_ADVICE * bool(recording)).split())
        yield self.finding(
            ctx, msg, advice,
            evidence=(Evidence("compile_us_per_step", round(per_step, 1), ctx.opt("min_us_per_step"), "us",
                               events=event_refs(phases), extra={"steps": [m.steps[i].id for i in steps_hit if i is not None],
                                                                 "recompiled_versions": versions[:20]}),),
            cost_us_per_step=per_step, cost_label="host time compiling inside the steps",
        )

    def _warmup_trace(self, ctx: RuleContext) -> Iterable[Finding]:
        """A trace without step markers: compilation anywhere in it (class docstring)."""
        m = ctx.metrics
        compiling, recording = compile_phase_ops(m), inductor_recording(m)
        phases = [*compiling, *recording]
        spent = compile_time(m)
        if not phases or spent < ctx.opt("min_us_per_step"):
            return
        start = m.lead_in[0] if m.lead_in is not None else m.steps[0].start
        span = m.steps[-1].end - start
        share = min(spent / span, 1.0) if span > 0 else None
        capture = trace_phase(m)
        parts = [f"compiling {_ms(compiling)} ms"] * bool(compiling) + \
            [f"Inductor recording CUDA graphs {_ms(recording)} ms"] * bool(recording)
        msg = (f"no ProfilerStep# markers, and the trace records torch.compile's warm-up: {spent / 1000:.3g} ms"
               + (f" ({share:.0%} of the trace)" if share is not None else "") + f" ({', '.join(parts)})"
               + (f", beside a CUDA/HIP graph capture pass ({capture.marker})" if capture is not None else "")
               + ": a warm-up trace, whose step figures are not those of steady-state steps")
        yield self.finding(
            ctx, msg,
            """
            Compilation (and the CUDA/HIP graph recording that mode="reduce-overhead" and serving engines do on
            their first calls) is a one-off warm-up cost: keep it, and record steady-state calls instead. Call the
            compiled model a few times before profiling, or profile with
            torch.profiler.schedule(wait=1, warmup=2, active=3) and prof.step() once per iteration (which also
            writes the ProfilerStep# markers that per-step figures need).
            """,
            evidence=(Evidence("compile_us", round(spent, 1), ctx.opt("min_us_per_step"), "us",
                               events=event_refs(phases),
                               extra={"trace_share": round(share, 4) if share is not None else None,
                                      "step_markers": False,
                                      "graph_capture": capture.marker if capture is not None else None}),),
            severity=Severity.INFO,
        )


def _ms(events: list[Event]) -> str:
    """The time ``events`` cover (their union), in ms, 3 significant digits."""
    return f"{Intervals.from_pairs([(e.ts, e.ts + e.dur) for e in events]).total() / 1000:.3g}"

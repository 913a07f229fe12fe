"""GP101: the GPU sits idle for much of each step."""

from __future__ import annotations

from typing import Iterable

from gpuprof.codespec import Option
from gpuprof.findings import Evidence, Finding, Severity
from gpuprof.rules.base import Rule, RuleContext, register
from gpuprof.rules.cause import CauseFigure, gpu_idle_per_step
from gpuprof.trace.breakdown import IDLE_KEYS
from gpuprof.trace.idleparts import IdlePart, idle_parts
from gpuprof.trace.phase import trace_phase
from gpuprof.units import fmt_us

__all__ = ["LowGpuUtilization"]

_IDLE_LABELS = {
    "sync": "waiting in synchronisations",
    "blocking_copy": "in blocking copies",
    "runtime": "in CUDA runtime calls",
    "data_loading": "loading data",
    "optimizer": "in the optimizer step",
    "cpu_other": "in other Python/CPU work",
}


@register
class LowGpuUtilization(Rule):
    """The main GPU is busy (kernels, copies or memsets running) for only part of each step.

    GPU utilisation is busy time / step time (see gpuprof.trace.metrics). The
    finding names what the host thread was doing while the GPU waited, from
    the GPU idle breakdown, and the largest **idle parts** by name: the
    runtime calls (``cudaFree``), the user's Python functions (from the
    ``python_function`` stacks of ``with_stack=True``) or, without stacks, the
    operators that held the idle time. A part another finding explains is
    marked with that finding's code; the others are named here, so the finding
    never stands alone. Traces without step markers are judged over the whole
    trace after its lead-in (the time before the first GPU work).
    """

    code = "GP101"
    name = "low-gpu-utilization"
    title = "GPU idle for a large part of each step"
    cause = CauseFigure("GPU idle time", gpu_idle_per_step)
    severity = Severity.WARNING
    options = (
        Option("min_utilization", 0.80, "utilisation below this fraction is reported"),
        Option("error_below", 0.40, "utilisation below this fraction is an error"),
        Option("max_parts", 4, "name at most this many idle parts"),
        Option("min_part_share", 0.05, "name an idle part only when it holds at least this share of the idle time"),
    )
    bad_example = """
        for x, y in loader:                 # num_workers=0, batch built in the main process
            loss = model(x.cuda()).sum()    # GPU waits while the next batch is prepared
            print(loss.item())              # and again on every .item()
    """
    good_example = """
        loader = DataLoader(ds, batch_size=256, num_workers=8, pin_memory=True)
        for x, y in loader:
            loss = model(x.cuda(non_blocking=True)).sum()
            loss.backward(); opt.step()
    """

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        m = ctx.metrics
        util = m.gpu_utilization
        if util is None or not m.steps:
            return
        if trace_phase(m) is not None:
            return  # a graph capture pass records kernels instead of running them: idle by design (the summary says so)
        if util >= ctx.opt("min_utilization"):
            return
        idle = m.mean_idle()
        idle_total = sum(idle.values())
        top = sorted(IDLE_KEYS, key=lambda k: -idle[k])[:3]
        parts = [f"{_IDLE_LABELS[k]} {idle[k] / 1000:.1f} ms" for k in top if idle[k] > 0]
        sev = Severity.ERROR if util < ctx.opt("error_below") else Severity.WARNING
        n = max(m.num_steps, 1)
        named = [p for p in idle_parts(m) if p.us >= ctx.opt("min_part_share") * idle_total * n][: ctx.opt("max_parts")]
        per = "per step" if m.has_step_markers else "over the trace"
        if m.has_step_markers:
            head = (f"GPU {m.main_device} busy {util:.0%} of the step time ({fmt_us(m.gpu_busy_total() / n)} "
                    f"of the {fmt_us(m.mean_step_time)} mean step)")
        else:
            head = (f"GPU {m.main_device} busy {util:.0%} of the trace ({fmt_us(m.gpu_busy_total())} of "
                    f"{fmt_us(m.total_time)}{_lead_in_words(m.lead_in_us)})")
        yield self.finding(
            ctx,
            head
            + (f"; while it was idle the host was {', '.join(parts)} {per}" if parts else "")
            + (f"; largest idle parts {per}: {', '.join(part_label(p, n) for p in named)}" if named else ""),
            "Fix the causes reported below in order of cost; the idle parts name the calls and functions that held "
            "the GPU's idle time (a part marked with a code is explained by that finding).",
            evidence=[
                Evidence("gpu_utilization", round(util, 4), ctx.opt("min_utilization"), "fraction"),
                Evidence("gpu_idle_us_per_step", round(idle_total, 1), None, "us", extra={k: round(v, 1) for k, v in idle.items()}),
                Evidence("idle_parts_us_per_step", round(sum(p.us for p in named) / n, 1), None, "us",
                         extra={"parts": [{"kind": p.kind, "name": p.name, "label": part_label(p, n),
                                           "us_per_step": round(p.us / n, 1),
                                           "share_of_idle": round(p.us / n / idle_total, 4) if idle_total else 0.0,
                                           "explained_by": []} for p in named]}),
            ],
            cost_us_per_step=idle_total,
            cost_label="GPU idle time, all causes (it includes the costs of the other findings: do not add them)",
            severity=sev,
        )


_KIND_WORDS = {"runtime": "", "python": "Python ", "operator": "operator ", "none": ""}


def part_label(p: IdlePart, n: int) -> str:
    """``cudaFree 6.55 s``, ``Python train.py(12): load 1.2 ms``: an idle part with its time per step."""
    return f"{_KIND_WORDS.get(p.kind, '')}{p.name} {fmt_us(p.us / n)}"


def _lead_in_words(lead_in_us: float | None) -> str:
    return f", after a lead-in of {fmt_us(lead_in_us)} before the first GPU work" if lead_in_us else ""

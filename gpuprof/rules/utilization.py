"""GP101: the GPU sits idle for much of each step."""

from __future__ import annotations

from typing import Iterable

from gpuprof.findings import Evidence, Finding, Severity
from gpuprof.rules.base import Option, Rule, RuleContext, register
from gpuprof.trace.metrics import IDLE_KEYS
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
    the GPU idle breakdown, so the cause is the next finding to read.
    """

    code = "GP101"
    name = "low-gpu-utilization"
    title = "GPU idle for a large part of each step"
    severity = Severity.WARNING
    options = (
        Option("min_utilization", 0.80, "utilisation below this fraction is reported"),
        Option("error_below", 0.40, "utilisation below this fraction is an error"),
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
        if util >= ctx.opt("min_utilization"):
            return
        idle = m.mean_idle()
        idle_total = sum(idle.values())
        top = sorted(IDLE_KEYS, key=lambda k: -idle[k])[:3]
        parts = [f"{_IDLE_LABELS[k]} {idle[k] / 1000:.1f} ms" for k in top if idle[k] > 0]
        sev = Severity.ERROR if util < ctx.opt("error_below") else Severity.WARNING
        yield self.finding(
            ctx,
            f"GPU {m.main_device} busy {util:.0%} of the step time ({fmt_us(m.gpu_busy_total() / max(m.num_steps, 1))} "
            f"of the {fmt_us(m.mean_step_time)} mean step)"
            + (f"; while it was idle the host was {', '.join(parts)} per step" if parts else ""),
            "Fix the causes reported below in order of cost; the idle breakdown shows where the host spent "
            "the GPU's idle time.",
            evidence=[
                Evidence("gpu_utilization", round(util, 4), ctx.opt("min_utilization"), "fraction"),
                Evidence("gpu_idle_us_per_step", round(idle_total, 1), None, "us", extra={k: round(v, 1) for k, v in idle.items()}),
            ],
            cost_us_per_step=idle_total,
            cost_label="GPU idle time, all causes (it includes the costs of the other findings: do not add them)",
            severity=sev,
        )

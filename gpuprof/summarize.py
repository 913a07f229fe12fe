"""The report's headline summary of one trace, from its metrics.

Lives outside ``gpuprof.trace`` so that the trace model and its metrics do
not depend on the report types. Every figure is defined in the module named
in :mod:`gpuprof.trace.metrics`; this only picks and averages them.
"""

from __future__ import annotations

from dataclasses import replace

from gpuprof.report import TraceSummary
from gpuprof.rules.flopwork import step_mfu
from gpuprof.trace.critpath.path import critical_path
from gpuprof.trace.metrics import TraceMetrics
from gpuprof.trace.stats import copy_stats, sync_stats
from gpuprof.trace.viewrows import Mfu, ModuleMfu, TraceViews
from gpuprof.views.build import trace_views

__all__ = ["trace_summary"]


def trace_summary(m: TraceMetrics) -> TraceSummary:
    """The :class:`~gpuprof.report.TraceSummary` of one trace (per-step figures are means over its steps)."""
    t = m.trace
    views = trace_views(m)
    return TraceSummary(
        path=t.path,
        devices=list(t.devices),
        has_gpu_activity=t.has_gpu_activity,
        num_steps=m.num_steps,
        step_ids=[s.id for s in m.steps],
        step_time_us=m.median_step_time,
        step_time_mean_us=m.mean_step_time,
        lead_in_us=m.lead_in_us,
        gpu_busy_us=m.gpu_busy_total() / max(m.num_steps, 1),
        gpu_utilization=m.gpu_utilization,
        breakdown_us=m.mean_breakdown(),
        idle_breakdown_us=m.mean_idle(),
        top_kernels=m.kernel_stats[:10],
        top_ops=m.op_stats[:10],
        copies=copy_stats(m.copies),
        syncs=sync_stats(m.syncs)[:10],
        rank=t.rank,
        world_size=t.world_size,
        num_events=t.num_events,
        file_bytes=t.file_bytes,
        step_times_us=m.step_times,
        views=views,
        data_loading_share=m.data_loading_share if m.num_steps else None,
        mfu=_mfu(m, views),
        critical_path=critical_path(m),
        cause_per_step=cause_per_step(m),
    )


def cause_per_step(m: TraceMetrics) -> dict[str, list[float]]:
    """Every trace rule's declared cause figure (``Rule.cause``) for each step, by code, where the trace measures
    it: computed whether or not the rule fired, since `gpuprof diff` needs it most in the run without the finding."""
    from gpuprof.rules.base import all_rules

    out: dict[str, list[float]] = {}
    for rule in all_rules():
        if rule.cause is not None:
            got = rule.cause.values(m)
            if got is not None:
                out[rule.code] = [round(x, 6 if rule.cause.unit == "fraction" else 3) for x in got]
    return out


PER_MODULE = 20  # modules listed in traces[].mfu.per_module


def _mfu(m: TraceMetrics, views: TraceViews) -> Mfu | None:
    """The steps' MFU with the modules view's figures of the modules with the most GPU time (None: no GPU)."""
    if m.main_device is None:
        return None
    rows = sorted((r for r in views.modules if r.gpu_total_us > 0), key=lambda r: -r.gpu_total_us)[:PER_MODULE]
    return replace(step_mfu(m), per_module=[ModuleMfu(r.name, r.gpu_total_us, r.mfu, r.known_flops_share,
                                                          r.peak_precision, r.reference_mfu) for r in rows])

"""GP102/GP103: the DataLoader holds up training."""

from __future__ import annotations

from typing import Iterable

from gpuprof.codespec import Option
from gpuprof.findings import Evidence, Finding, Severity
from gpuprof.rules.base import Rule, RuleContext, event_refs, register
from gpuprof.rules.cause import CauseFigure, data_wait_per_step
from gpuprof.rules.common import of_step
from gpuprof.rules.loaderfix import loader_fix_without_gpu
from gpuprof.rules.whatif import WhatIf, data_waits
from gpuprof.units import fmt_us

__all__ = ["DataLoaderMainProcess", "DataLoadingShare"]


# The cost is less than the loading time when kernels queued before the loading still ran during it.
_COST_LABEL = "the part of that loading when the GPU was idle (kernels queued earlier ran during the rest)"


def _gpu_idle_loading(ctx: RuleContext) -> float:
    """Data-loading time per step during which the GPU had nothing to do (the cost)."""
    m = ctx.metrics
    if m.main_device is None:
        return sum(m.data_loading_per_step) / max(m.num_steps, 1)
    return m.mean_idle()["data_loading"]


@register
class DataLoaderMainProcess(Rule):
    """The DataLoader fetches batches in the training process (``num_workers=0``).

    Detected with certainty from the iterator the trace names:
    ``enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__``. Loading,
    decoding and augmenting then run serially with the training step, on the
    thread that should be launching GPU work.
    """

    code = "GP102"
    name = "dataloader-single-process"  # the trace names _SingleProcessDataLoaderIter; GP601 has the old name
    aliases = ("dataloader-main-process",)
    superseded_by = ("GP601",)  # capture measures the same loader's share over every step
    title = "DataLoader runs in the main process (num_workers=0)"
    cause = CauseFigure("time waiting for the batch", data_wait_per_step)
    what_if = WhatIf("data wait gone (loading overlapped by DataLoader workers)", data_waits,
                     without_gpu=loader_fix_without_gpu)
    severity = Severity.WARNING
    options = (Option("min_share", 0.02, "report only when data loading takes at least this share of the step"),)
    bad_example = """
        loader = DataLoader(dataset, batch_size=32, shuffle=True)   # num_workers defaults to 0
    """
    good_example = """
        loader = DataLoader(dataset, batch_size=32, shuffle=True,
                            num_workers=4, pin_memory=True, persistent_workers=True)
    """

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        m = ctx.metrics
        if not m.dataloader_single_process or not m.steps:
            return
        share = m.data_loading_share
        if share < ctx.opt("min_share"):
            return
        per_step = sum(m.data_loading_per_step) / m.num_steps
        ev0 = m.dataloader_events[0] if m.dataloader_events else None
        loc = m.stacks.location(ev0.pid, ev0.tid, ev0.ts) if ev0 is not None else None
        yield self.finding(
            ctx,
            f"DataLoader runs in the main process (num_workers=0): {of_step(m, per_step)} "
            "spent building batches on the training thread",
            "Set DataLoader(num_workers=N) with N around the number of CPU cores per GPU (start with 4-8), "
            "and pin_memory=True, persistent_workers=True so workers survive between epochs.",
            evidence=[Evidence("data_loading_share", round(share, 4), ctx.opt("min_share"), "fraction",
                               events=event_refs(m.dataloader_events),
                               extra={"iterator": "_SingleProcessDataLoaderIter",
                                      "data_loading_us_per_step": round(per_step, 1)})],
            cost_us_per_step=_gpu_idle_loading(ctx), cost_label=_COST_LABEL, location=loc,
        )


@register
class DataLoadingShare(Rule):
    """A large share of each step goes to waiting for the next batch.

    Data-loading share = time in the DataLoader's ``__next__`` on the main
    thread / step time. With worker processes this is the time the training
    loop waited for workers that could not keep up.
    """

    code = "GP103"
    name = "data-loading-share"
    # the capture's watch measures why the workers cannot keep up (their CPU use), over every step
    superseded_by = ("GP605", "GP606", "GP607")
    title = "Data loading takes a large share of the step"
    cause = CauseFigure("time waiting for the batch", data_wait_per_step)
    what_if = WhatIf("data wait gone", data_waits, without_gpu=loader_fix_without_gpu)
    severity = Severity.WARNING
    options = (
        Option("max_share", 0.10, "data-loading share above this is reported"),
        Option("error_above", 0.40, "data-loading share above this is an error"),
    )
    bad_example = """
        loader = DataLoader(ds, batch_size=64, num_workers=2)   # heavy JPEG decode + augment per sample
    """
    good_example = """
        loader = DataLoader(ds, batch_size=64, num_workers=12, pin_memory=True,
                            prefetch_factor=4, persistent_workers=True)
    """

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        m = ctx.metrics
        if not m.steps or not m.dataloader_events or m.dataloader_single_process:
            return  # num_workers=0 is GP102's finding; this one is about workers that fall behind
        share = m.data_loading_share
        if share <= ctx.opt("max_share"):
            return
        per_step = sum(m.data_loading_per_step) / m.num_steps
        yield self.finding(
            ctx,
            f"Data loading takes {of_step(m, per_step)} waiting for DataLoader workers "
            f"(mean step {fmt_us(m.mean_step_time)})",
            "Workers cannot keep up: raise num_workers and prefetch_factor, make per-sample transforms cheaper "
            "(decode on the GPU, e.g. torchvision.io.decode_jpeg(device='cuda') or DALI), or cache preprocessed data.",
            evidence=[Evidence("data_loading_share", round(share, 4), ctx.opt("max_share"), "fraction",
                               events=event_refs(m.dataloader_events),
                               extra={"data_loading_us_per_step": round(per_step, 1)})],
            cost_us_per_step=_gpu_idle_loading(ctx), cost_label=_COST_LABEL,
            severity=Severity.ERROR if share > ctx.opt("error_above") else Severity.WARNING,
        )

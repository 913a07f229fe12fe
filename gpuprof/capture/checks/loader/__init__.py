"""DataLoaders (GP601-GP607): every batch timed, each loader's settings read at its first iteration; the loader
verdicts (GP605-GP607) from the watch's samples of the workers' CPU and I/O; the cores free beside the trainer over
the steps outside recorded windows (:mod:`gpuprof.capture.checks.loader.freecores`), which cap GP601's what-if on
a run without GPU work."""

from __future__ import annotations

from collections.abc import Callable

from gpuprof.capture.checks.base import Live, MonitorBase, cuda_used
from gpuprof.capture.checks.loader import dataloader as dlmod
from gpuprof.capture.checks.loader.freecores import FreeCores
from gpuprof.findings import Finding


class LoaderCheck(MonitorBase):
    part = "DataLoader monitor"
    consequence = "no data-loading numbers"

    def __init__(self, on_fetch: Callable[[float], None], max_signatures: int) -> None:
        self.monitor = dlmod.LoaderMonitor(on_fetch, max_signatures=max_signatures)
        self.free = FreeCores()

    per_step = True  # the cores measurement's clock (gpuprof.capture.checks.loader.freecores: one clock read a step)

    def first_step(self, live: Live) -> None:
        self.free.start()

    def step(self, live: Live) -> None:
        self.free.tick()

    def recording(self, live: Live, on: bool, span: int | None) -> None:
        # a recorded window is gpuprof's own work (the profiler, then the trace's export in the step it ends): its
        # steps are left out of the cores measured
        if on:
            self.free.stop()
        else:
            self.free.start_next_step()

    def install(self, live: Live) -> None:
        dlmod.install(self.monitor)  # also without checks: the data-loading share is a measurement

    def uninstall(self, live: Live) -> None:
        self.free.stop(at_last_tick=True)  # the run's end: the measurement ends with the steps
        dlmod.uninstall(self.monitor)

    def findings(self, live: Live) -> list[Finding]:
        records = list(self.monitor.records.values())
        total, steps = sum(live.step_s), len(live.step_s)
        cores, lws = dlmod.available_cores(), live.ranks.local_world_size or 1
        on_cuda = live.cuda and cuda_used()
        out = dlmod.dataloader_findings(
            records, total_step_s=total, num_steps=steps, on_cuda=on_cuda, cores=cores,
            local_world_size=lws, options=live.config.options, core_use=self.free.result())
        # GP605-GP607 read the watch's CPU samples (none with watch=False)
        from gpuprof.capture.checks.watch import WatchCheck

        watch = live.find(WatchCheck)
        sampler = watch.sampler if watch is not None else None
        if sampler is not None:
            from gpuprof.capture.checks.loader.loaderverdicts import loader_verdicts

            out += loader_verdicts(records, sampler.snapshot(), total_step_s=total, num_steps=steps,
                                   cores=cores, local_world_size=lws, options=live.config.options,
                                   io=sampler.io.snapshot(), on_cuda=on_cuda)
        return out

"""DataLoaders (GP601-GP604): every batch timed, each loader's settings read at its first iteration."""

from __future__ import annotations

from collections.abc import Callable

from gpuprof.capture import dataloader as dlmod
from gpuprof.capture.checks.base import Live, MonitorBase, cuda_used
from gpuprof.findings import Finding


class LoaderCheck(MonitorBase):
    part = "DataLoader monitor"
    consequence = "no data-loading numbers"

    def __init__(self, on_fetch: Callable[[float], None], max_signatures: int) -> None:
        self.monitor = dlmod.LoaderMonitor(on_fetch, max_signatures=max_signatures)

    def install(self, live: Live) -> None:
        dlmod.install(self.monitor)  # also without checks: the data-loading share is a measurement

    def uninstall(self, live: Live) -> None:
        dlmod.uninstall(self.monitor)

    def findings(self, live: Live) -> list[Finding]:
        return dlmod.dataloader_findings(
            list(self.monitor.records.values()), total_step_s=sum(live.step_s), num_steps=len(live.step_s),
            on_cuda=live.cuda and cuda_used(), cores=dlmod.available_cores(),
            local_world_size=live.ranks.local_world_size or 1, options=live.config.options)

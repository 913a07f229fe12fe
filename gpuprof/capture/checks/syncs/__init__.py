"""Host syncs (GP630): ``torch.cuda.set_sync_debug_mode("warn")`` during recorded steps, counted by line."""

from __future__ import annotations

from gpuprof.capture.checks.base import Live, MonitorBase
from gpuprof.capture.checks.syncs.syncs import SyncLocator
from gpuprof.findings import Finding


class SyncCheck(MonitorBase):
    part = "host-sync locator"
    consequence = "no host-sync findings"

    def __init__(self) -> None:
        self.locator: SyncLocator | None = None

    def install(self, live: Live) -> None:
        cfg = live.config
        if live.cuda and cfg.sync_debug and cfg.checks:
            self.locator = SyncLocator()

    def recording(self, live: Live, on: bool, span: int | None) -> None:
        loc = self.locator
        if loc is None:
            return
        if on and not loc.installed:
            loc.install()
        elif not on and loc.installed:
            loc.uninstall()

    def uninstall(self, live: Live) -> None:
        if self.locator is not None and self.locator.installed:
            self.locator.uninstall()

    def findings(self, live: Live) -> list[Finding]:
        if self.locator is None:
            return []
        self.locator.steps = live.recorded_steps
        return self.locator.findings(live.config.options)

"""Mixed precision (GP660-GP662): PyTorch's AMP warnings, located at the user's line."""

from __future__ import annotations

from gpuprof.capture.checks.amp.amp import AmpWarningWatcher
from gpuprof.capture.checks.base import Live, MonitorBase
from gpuprof.findings import Finding


class AmpCheck(MonitorBase):
    part = "mixed-precision check"
    consequence = "no mixed-precision findings"

    def __init__(self) -> None:
        self.watcher: AmpWarningWatcher | None = None

    def install(self, live: Live) -> None:
        if live.config.checks:
            self.watcher = AmpWarningWatcher()
            self.watcher.install()

    def uninstall(self, live: Live) -> None:
        if self.watcher is not None:
            self.watcher.uninstall()

    def findings(self, live: Live) -> list[Finding]:
        if self.watcher is None:
            return []
        for err in self.watcher.errors[:1]:
            live.guard.fail(self.part, "mixed-precision findings may be incomplete", err)
            return []  # the part is marked failed: as before the split, its findings are dropped
        return self.watcher.findings()

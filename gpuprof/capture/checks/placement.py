"""Device placement (GP610-GP612): modules and inputs on different devices, checked during step 0."""

from __future__ import annotations

from collections.abc import Iterable

from gpuprof.capture.checks.base import Live, MonitorBase
from gpuprof.capture.placement import PlacementMonitor
from gpuprof.findings import Finding


class PlacementCheck(MonitorBase):
    part = "placement check"
    consequence = "no device-placement findings"

    def __init__(self, max_modules: int) -> None:
        self.monitor = PlacementMonitor(max_modules)  # exists before start: Profiler.watch() feeds it

    def watch(self, modules: Iterable[object]) -> None:
        self.monitor.watch(modules)

    def roots(self) -> list[object]:
        """The watched and the discovered top-level modules."""
        return list(self.monitor.roots())

    def install(self, live: Live) -> None:
        if live.config.checks:
            self.monitor.watch(live.config.models)
            self.monitor.install()

    def first_step(self, live: Live) -> None:
        self.monitor.uninstall()  # step 0 ran: its placement is known

    def uninstall(self, live: Live) -> None:
        self.monitor.uninstall()

    def findings(self, live: Live) -> list[Finding]:
        return self.monitor.findings()

"""torch.compile (GP650-GP655): graph breaks, recompilations and compile time, from Dynamo's callbacks."""

from __future__ import annotations

from gpuprof.capture.checks.base import Live, MonitorBase
from gpuprof.capture.checks.compile.compiled import CompileMonitor, compile_findings
from gpuprof.findings import Finding


class CompileCheck(MonitorBase):
    part = "torch.compile diagnostics"
    consequence = "no torch.compile findings"
    per_step = True  # a compilation in this step: its events are read now (a flag test otherwise)

    def __init__(self) -> None:
        self.monitor: CompileMonitor | None = None

    def install(self, live: Live) -> None:
        if live.config.checks:
            self.monitor = CompileMonitor(lambda: live.step_num)
            self.monitor.install()

    def first_step(self, live: Live) -> None:
        if self.monitor is not None and not self.monitor.installed:  # torch._dynamo was imported in step 0
            self.monitor.install()

    def step(self, live: Live) -> None:
        comp = self.monitor
        if comp is not None and comp.compiled_since_drain:
            comp.drain()

    def uninstall(self, live: Live) -> None:
        if self.monitor is not None:
            self.monitor.uninstall()

    def findings(self, live: Live) -> list[Finding]:
        comp = self.monitor
        if comp is None:
            return []
        for err in comp.errors[:1]:
            live.guard.fail(self.part, "torch.compile findings may be incomplete", err)
            return []  # the part is marked failed: as before the split, its findings are dropped
        return compile_findings(comp, sum(live.step_s), len(live.step_s), live.config.options.compile_min_share)

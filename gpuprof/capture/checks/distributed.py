"""Distributed setup (GP710, GP711): a DataLoader without DistributedSampler, the wrong backend."""

from __future__ import annotations

from gpuprof.capture import distcheck
from gpuprof.capture.checks.base import Live, MonitorBase, cuda_used
from gpuprof.capture.checks.loader import LoaderCheck
from gpuprof.findings import Finding


class DistributedCheck(MonitorBase):
    part = "distributed check"
    consequence = "no GP710/GP711 findings"

    def findings(self, live: Live) -> list[Finding]:
        group = distcheck.process_group()
        loaders = live.find(LoaderCheck)
        if group is None or loaders is None:
            return []
        records = list(loaders.monitor.records.values())
        return distcheck.distributed_findings(records, group[0], group[1], live.cuda and cuda_used())

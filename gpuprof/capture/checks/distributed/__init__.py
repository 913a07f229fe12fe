"""Distributed setup (GP710-GP712): a DataLoader without DistributedSampler, the wrong backend,
a DistributedSampler whose set_epoch() is never called (also without a process group)."""

from __future__ import annotations

from gpuprof.capture.checks.base import Live, MonitorBase, cuda_used
from gpuprof.capture.checks.distributed import distcheck
from gpuprof.capture.checks.loader import LoaderCheck
from gpuprof.findings import Finding


class DistributedCheck(MonitorBase):
    part = "distributed check"
    consequence = "no GP710-GP712 findings"

    def findings(self, live: Live) -> list[Finding]:
        loaders = live.find(LoaderCheck)
        if loaders is None:
            return []
        records = list(loaders.monitor.records.values())
        out = distcheck.sampler_epoch_findings(records)
        group = distcheck.process_group()
        if group is None:
            return out
        return out + distcheck.distributed_findings(records, group[0], group[1], live.cuda and cuda_used())

"""Global torch settings (GP620-GP622): cudnn.benchmark, TF32, anomaly detection left on."""

from __future__ import annotations

from gpuprof.capture.checks.base import Live, MonitorBase
from gpuprof.capture.settings import TorchSettings, anomaly_finding, read_settings
from gpuprof.findings import Finding


class SettingsCheck(MonitorBase):
    part = "settings checks"
    consequence = "no settings findings"

    def __init__(self) -> None:
        self.settings: TorchSettings | None = None  # read after the first step
        self._anomaly_steps = 0
        self._anomaly_checked = 0

    def first_step(self, live: Live) -> None:
        self._check_anomaly()
        self.settings = read_settings()

    def recorded_step(self, live: Live) -> None:
        self._check_anomaly()

    def _check_anomaly(self) -> None:
        import torch

        self._anomaly_checked += 1
        if torch.is_anomaly_enabled():
            self._anomaly_steps += 1

    def findings(self, live: Live) -> list[Finding]:
        a = anomaly_finding(self._anomaly_steps, self._anomaly_checked)
        return [a] if a else []

    def roots_have_conv(self, live: Live) -> bool:
        """A watched module holds a convolution (GP620 without a trace that ran one)."""
        from torch.nn.modules.conv import _ConvNd

        from gpuprof.capture.checks.placement import PlacementCheck

        placement = live.find(PlacementCheck)
        roots = placement.roots() if placement is not None else []
        return any(isinstance(m, _ConvNd) for root in roots for m in root.modules())  # type: ignore[attr-defined]

    def shapes_stable(self, live: Live) -> bool | None:
        """True when the first batches (of a DataLoader, or the step's arguments) all had one shape.

        A different last batch (``drop_last=False``) does not count against it.
        """
        from gpuprof.capture.checks.loader import LoaderCheck

        loaders = live.find(LoaderCheck)
        series: list[list[object]] = [list(r.signatures) for r in loaders.monitor.records.values()
                                      if r.signatures] if loaders is not None else []
        if live.step_signatures:
            series.append(live.step_signatures)
        if not series:
            return None
        for sigs in series:
            head = sigs[:-1] if len(sigs) > 2 else sigs
            if any(s != head[0] for s in head):
                return False
        return True

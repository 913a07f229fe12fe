"""``placement_from_traceback``: the step-0 placement check, run on the frames of an error's traceback (what
``gpuprof run`` has when a script fails before its first optimizer step), against the hook's own record."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from gpuprof.capture.placement import PlacementMonitor, placement_from_traceback  # noqa: E402


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(8, 16), nn.ReLU())
        self.head = nn.Linear(16, 2)

    def forward(self, x: Any) -> Any:
        return self.head(self.encoder(x))


def _mismatch_fields(monitor: PlacementMonitor) -> list[tuple[str, ...]]:
    return [(m.module_type, m.arg, m.arg_shape, m.arg_device, m.param_kind, m.param_name, m.param_shape,
             m.param_device) for m in monitor.mismatches]


def test_the_traceback_gives_what_the_hook_saw() -> None:
    model = Net()
    x = torch.randn(4, 8, device="meta")
    hooked = PlacementMonitor(4096)
    hooked.install()  # the decorator's step 0: a forward pre-hook on every module call
    try:
        with pytest.raises(RuntimeError) as info:
            model(x)
    finally:
        hooked.uninstall()
    seen = placement_from_traceback(info.value)
    assert _mismatch_fields(seen) == _mismatch_fields(hooked) == [
        ("Linear", "input 0", "(4, 8)", "meta", "parameter", "weight", "(16, 8)", "cpu")]
    assert seen.roots() == [model]  # the outermost module of the traceback: findings say Net.encoder.0
    (finding,) = [f for f in seen.findings() if f.code == "GP612"]
    assert "`Net.encoder.0` (Linear)" in finding.message
    assert finding.location is not None and finding.location.file == __file__


def test_an_error_without_modules_gives_nothing() -> None:
    with pytest.raises(ValueError) as info:
        int("x")
    seen = placement_from_traceback(info.value)
    assert seen.mismatches == [] and seen.roots() == [] and seen.findings() == []

"""DataLoaders iterated before the first @profile_step call (the usual ``for x, y in loader: step(x, y)``)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import gpuprof  # noqa: E402

from .conftest import quick_schedule, report_json, run_dir, tiny_model, train_step  # noqa: E402


class _SlowData(torch.utils.data.Dataset):  # type: ignore[misc]
    def __len__(self) -> int:
        return 96

    def __getitem__(self, i: int) -> Any:
        time.sleep(0.01)  # data loading dominates the step, even when a loaded machine stretches the training step
        return torch.randn(16), i % 4


def _decorated(logdir: Path) -> Any:
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    @gpuprof.profile_step(logdir, schedule=quick_schedule(), tensorboard=False, print_report=False)
    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return train_step(model, opt, x, y)

    return step


def test_loader_iterated_before_the_first_decorated_call_is_seen(tmp_path: Path) -> None:
    loader = torch.utils.data.DataLoader(_SlowData(), batch_size=4)
    step = _decorated(tmp_path)
    for x, y in loader:  # the iterator exists before step() starts the capture
        step(x, y)
    result = step.finish()
    report = step.report
    assert result is not None and report is not None
    sec = report.sections[0]
    assert sec.data_loading_share is not None and sec.data_loading_share > 0.1
    assert result.data_loading_share == sec.data_loading_share  # the result carries the same figure
    gp601 = [f for f in report.findings if f.code == "GP601"]
    assert len(gp601) == 1 and "DataLoader(_SlowData)" in gp601[0].message
    # one definition of the data-loading share: GP601's figure is the report's (one loader here)
    assert gp601[0].evidence[0].value == round(sec.data_loading_share, 4)
    assert f"{sec.data_loading_share:.0%} of step time" in gp601[0].message
    assert gp601[0].location is not None and gp601[0].location.function == \
        "test_loader_iterated_before_the_first_decorated_call_is_seen"
    assert report_json(run_dir(tmp_path))["sections"][0]["data_loading_share"] == sec.data_loading_share


def test_iterator_made_before_decoration_is_seen_too(tmp_path: Path) -> None:
    loader = torch.utils.data.DataLoader(_SlowData(), batch_size=4)
    it = iter(loader)  # before gpuprof patched anything
    step = _decorated(tmp_path)
    for x, y in it:
        step(x, y)
    assert step.finish() is not None
    report = step.report
    assert report is not None and report.sections[0].data_loading_share is not None
    assert [f.source for f in report.findings if f.code == "GP601"] == ["DataLoader(_SlowData)"]


@pytest.mark.parametrize("sharded", [True, False])
def test_sampler_of_an_iterator_made_before_the_capture_is_known(sharded: bool) -> None:
    """GP710 reads the sampler of a loader whose iterator predates the capture (no DataLoader patch then)."""
    from gpuprof.capture.checks.distributed.distcheck import distributed_findings
    from gpuprof.capture.checks.loader import dataloader as dlmod

    data = torch.utils.data.TensorDataset(torch.randn(16, 4))
    for batch_size in (4, None):  # batching (a BatchSampler holds the sampler) and not
        sampler = (torch.utils.data.DistributedSampler(data, num_replicas=2, rank=0, shuffle=False) if sharded
                   else torch.utils.data.RandomSampler(data))
        loader = torch.utils.data.DataLoader(data, batch_size=batch_size, sampler=sampler)
        it = iter(loader)  # made before any monitor is installed: the monitor adopts it at its first batch
        mon = dlmod.LoaderMonitor(lambda s: None)
        dlmod.install(mon)
        try:
            next(it)
        finally:
            dlmod.uninstall(mon)
        [rec] = mon.records.values()
        assert rec.sampler == type(sampler).__name__
        codes = [f.code for f in distributed_findings([rec], 2, "gloo", on_cuda=False)]
        assert codes == ([] if sharded else ["GP710"]), (batch_size, codes)

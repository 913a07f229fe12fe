"""What docs/integrations.md says about a plain Accelerate loop, with the real accelerate package on CPU."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.frameworks

pytest.importorskip("torch")
accelerate = pytest.importorskip("accelerate")

import torch  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

import gpuprof  # noqa: E402
from gpuprof.capture import GpuprofWarning, Schedule  # noqa: E402

from .conftest import codes, report_json  # noqa: E402

SCHEDULE = Schedule(wait=1, warmup=1, active=2)


def _parts(accelerator: Any) -> tuple[Any, Any, Any]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = TensorDataset(torch.randn(96, 16), torch.randint(0, 4, (96,)))
    return accelerator.prepare(model, opt, DataLoader(data, batch_size=8))


def _train(accelerator: Any, model: Any, opt: Any, loader: Any, prof: Any) -> int:
    steps = 0
    for x, y in loader:
        with accelerator.accumulate(model):
            loss = torch.nn.functional.cross_entropy(model(x), y)
            accelerator.backward(loss)
            opt.step()
            opt.zero_grad()
        if accelerator.sync_gradients:
            prof.step()  # one gpuprof step per optimizer step
            steps += 1
    return steps


def test_plain_accelerate_loop_one_step_per_optimizer_step(tmp_path: Path) -> None:
    accelerator = accelerate.Accelerator(cpu=True, gradient_accumulation_steps=3)
    model, opt, loader = _parts(accelerator)
    with gpuprof.profile(tmp_path, run="r", schedule=SCHEDULE, print_report=False) as prof:
        steps = _train(accelerator, model, opt, loader, prof)
    assert steps == 4 and prof.result is not None and prof.result.steps == 4
    # accelerate's DataLoaderShard iterates a torch DataLoader: the monitor sees it
    assert "GP601" in codes(report_json(tmp_path / "r")) or prof.result.data_loading_share is not None


def test_accelerate_profile_running_first_gpuprof_records_nothing(tmp_path: Path) -> None:
    accelerator = accelerate.Accelerator(cpu=True)
    model, opt, loader = _parts(accelerator)
    out = tmp_path / "accelerate_traces"
    handler = accelerate.utils.ProfileKwargs(activities=["cpu"], output_trace_dir=str(out))
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        with accelerator.profile(handler) as theirs, gpuprof.profile(tmp_path / "g", run="r", schedule=SCHEDULE,
                                                                     print_report=False) as prof:

            class Both:
                def step(self) -> None:
                    theirs.step()
                    prof.step()

            _train(accelerator, model, opt, loader, Both())
    ours = [str(w.message) for w in got if issubclass(w.category, GpuprofWarning)]
    assert len(ours) == 1 and "records nothing" in ours[0]
    assert prof.result is not None and prof.result.inactive
    traces = list(out.glob("*.json"))
    assert len(traces) == 1  # accelerate's own trace is written, undisturbed: `gpuprof analyze` reads it
    from gpuprof.analysis import analyze

    report = analyze([str(traces[0])])
    assert len(report.traces) == 1 and report.traces[0].num_events > 1000  # the training steps, recorded by accelerate

"""A training test held to limits by gpuprof's pytest plugin (docs/pytest.md; README, "Performance in CI").

    python3 -m pytest examples/pytest_ci --gpuprof-dir perf_runs

The test body is a plain training loop: the marker counts one step per optimizer step, records five of them,
and fails the test when the median step is over 500 ms or a finding at or above ``warning`` remains
(GP901, step-time outliers, is ignored: on a shared CI runner they are the neighbours' load, not the code).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="the training test needs torch (pip install torch)")


@pytest.mark.gpuprof(max_step_ms=500, fail_on="warning", ignore=["GP901"])
def test_training_step_stays_fast() -> None:
    torch.manual_seed(0)
    # layers wide enough that the step is compute (a few ms of matrix products), not the framework's dispatch of a
    # toy model's tiny operators (GP308, a true warning for a 64-wide MLP on a CPU)
    model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    batches = [(torch.randn(256, 512), torch.randint(0, 10, (256,))) for _ in range(12)]
    for x, y in batches:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    assert loss.item() > 0

"""torch.compile under capture (issue 13): gpuprof never causes a recompilation.

Compile tests are slow: tiny models, backend="eager", few steps.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

torch = pytest.importorskip("torch")

import gpuprof  # noqa: E402
from gpuprof.capture import Schedule  # noqa: E402

from .conftest import tiny_model  # noqa: E402


@pytest.fixture(autouse=True)
def _fresh_dynamo() -> Iterator[None]:
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    yield
    torch._dynamo.reset()  # forgets the backends too: later tests see "torch.compile not in use"
    counters.clear()


def _dynamo_counts() -> dict[str, int]:
    from torch._dynamo.utils import counters

    return {"frames": counters["frames"]["total"], "graphs": counters["stats"]["unique_graphs"],
            "recompiles": sum(counters["recompiles"].values())}


Maker = Callable[[], Callable[[Any], Any]]


def _run(make_step: Maker, prof: Any, steps: int = 4) -> None:
    x = torch.randn(8, 16)
    step = make_step()
    for _ in range(steps):
        step(x).backward()
        if prof is not None:
            prof.step()


def _counts_with_and_without(tmp_path: Path, before: Callable[[], Maker]) -> tuple[Any, Any, Any]:
    """Dynamo's counts for the same loop without and with a capture; ``before()`` runs before the capture."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    _run(before(), None)
    plain = _dynamo_counts()
    torch._dynamo.reset()
    counters.clear()
    make_step = before()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with gpuprof.profile(tmp_path, run="r", schedule=Schedule(wait=0, warmup=1, active=2), print_report=False,
                             tensorboard=False) as prof:
            _run(make_step, prof)
    hooks = [str(w.message) for w in seen if "global hooks" in str(w.message)]
    return plain, _dynamo_counts(), (prof, hooks)


def test_compiled_module_is_not_recompiled_by_gpuprof(tmp_path: Path) -> None:
    def before() -> Maker:
        compiled = torch.compile(tiny_model(), backend="eager")  # before the capture starts: the usual order
        return lambda: lambda x: compiled(x).sum()

    plain, profiled, (prof, hooks) = _counts_with_and_without(tmp_path, before)
    assert plain == {"frames": 1, "graphs": 1, "recompiles": 0}
    assert profiled == plain
    assert hooks == []  # OptimizedModule warns when a global module hook exists: gpuprof installs none
    assert prof.placement.unhooked_for == "torch.compile"


def test_compiled_inside_the_first_step_is_not_recompiled(tmp_path: Path) -> None:
    model = tiny_model()
    # torch.compile called inside the loop, after the capture started: the hook is already installed and
    # must be gone before Dynamo traces (it would be part of the guards, and removed after step 0)
    plain, profiled, (prof, _) = _counts_with_and_without(
        tmp_path, lambda: lambda: torch.compile(lambda x: model(x).sum(), backend="eager"))
    assert plain["graphs"] == 1 and plain["recompiles"] == 0
    assert profiled == plain
    assert prof.placement.unhooked_for == "torch.compile"

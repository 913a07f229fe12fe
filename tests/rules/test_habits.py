"""GP840 zero-grad-fills: synthetic traces and a real CPU capture of both zero_grad spellings."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuprof.analysis import analyze
from gpuprof.testing.tracegen import TraceBuilder


def _gp840(path: Path) -> list:
    return list(analyze(path, select=["GP840"]).findings)


def _loop(tmp_path: Path, fills: int, steps: int = 4) -> Path:
    tb = TraceBuilder()
    for _ in range(steps):
        with tb.step():
            tb.gemm(us=500)
            tb.optimizer(ms=0.2)
            with tb.annotate("Optimizer.zero_grad#SGD.zero_grad"):
                for _ in range(fills):
                    with tb.op("aten::zero_", input_types=["float"], us=5):
                        pass
            with tb.op("aten::zero_", input_types=["float"], us=5):  # outside zero_grad: the user's own buffer
                pass
    return tb.write(tmp_path / f"zero_{fills}.json")


def test_gp840_bad(tmp_path: Path) -> None:
    (f,) = _gp840(_loop(tmp_path, fills=12))
    assert f.evidence[0].value == 12 and f.evidence[0].extra["optimizer"] == "SGD"
    assert 60 <= f.cost_us_per_step <= 70  # 12 fills of 5 µs (the zero_ outside zero_grad is not counted)
    assert "set_to_none=True" in f.advice


def test_gp840_good(tmp_path: Path) -> None:
    assert _gp840(_loop(tmp_path, fills=0)) == []


@pytest.mark.parametrize("set_to_none", [False, True])
def test_gp840_real_capture(tmp_path: Path, set_to_none: bool) -> None:
    torch = pytest.importorskip("torch")
    import gpuprof
    from gpuprof.capture import Schedule

    model = torch.nn.Sequential(*[torch.nn.Linear(16, 16) for _ in range(4)])
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with gpuprof.profile(tmp_path, run="r", schedule=Schedule(wait=0, warmup=1, active=2), print_report=False,
                         tensorboard=False, analyze=False, with_stack=False) as prof:
        for _ in range(3):
            model(torch.randn(4, 16)).sum().backward()
            opt.step()
            opt.zero_grad(set_to_none=set_to_none)
            prof.step()
    found = _gp840(prof.traces[0].path)
    if set_to_none:
        assert found == []
    else:
        (f,) = found
        assert f.evidence[0].value == 8  # 4 weights + 4 biases zero-filled each step


# ---------------------------------------------------------------------- GP841 step-chores


def _chores(tmp_path: Path, every: int, steps: int = 4) -> Path:
    tb = TraceBuilder()
    for i in range(steps):
        with tb.step():
            with tb.frames(("train.py", 40, "main")):
                tb.gemm(us=500)
                if i % every == 0:
                    with tb.python("<built-in function collect>"):
                        tb.cpu(us=2000)
                    with tb.python("torch/serialization.py", 944, "save"):
                        tb.cpu(us=800)
    return tb.write(tmp_path / f"chores_{every}.json")


def test_vocabulary() -> None:
    from gpuprof.rules.habits import chore_of

    assert chore_of("<built-in function collect>") == "gc.collect()"
    assert chore_of("torch/serialization.py(944): save") == "torch.save(...)"
    assert chore_of("torch/serialization.py(1183): _save") is None and chore_of("train.py(3): collect") is None


def test_gp841_bad(tmp_path: Path) -> None:
    found = {f.evidence[0].extra["call"]: f for f in analyze(_chores(tmp_path, every=1), select=["GP841"]).findings}
    assert set(found) == {"gc.collect()", "torch.save(...)"}
    assert found["gc.collect()"].evidence[0].value == 1.0 and found["gc.collect()"].cost_us_per_step >= 2000
    assert "gc.freeze()" in found["gc.collect()"].advice and "every N steps" in found["torch.save(...)"].advice


def test_gp841_good(tmp_path: Path) -> None:
    # once in 4 steps (a periodic checkpoint) is under min_step_share: not this rule's business (GP901's outliers)
    assert list(analyze(_chores(tmp_path, every=4), select=["GP841"]).findings) == []

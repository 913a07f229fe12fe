"""GP852, GP841, GP843, GP844 and GP840 point at the call's line, not the function's first line (issue 37
item 7): real CPU captures of a function making each mistake on a marked line, and the source read
(gpuprof.trace.callsite) to find that line; without the source, the function's first line as before."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import pytest

from gpuprof.analysis import analyze
from gpuprof.findings import Finding

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.slow  # two captures with Python stacks: a few seconds of CPU


def _line(fn: Any, marker: str) -> int:
    src, first = inspect.getsourcelines(fn)
    return first + next(i for i, s in enumerate(src) if marker in s)


def training(tmp_path: Path) -> Path:
    """Training steps with four mistakes, each call on a line of its own."""
    import gpuprof
    from gpuprof.capture import Schedule

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Dropout(0.2), torch.nn.Linear(16, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu")
    with gpuprof.profile(tmp_path, run="train", schedule=Schedule(wait=0, warmup=1, active=3), print_report=False,
                         tensorboard=False, analyze=False, with_stack=True) as prof:
        for _ in range(4):
            loss = model(torch.randn(8, 16)).pow(2).mean()
            scaler.scale(loss).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # GP852-CALL
            scaler.step(opt)
            scaler.update()
            opt.zero_grad(set_to_none=False)  # GP840-CALL
            torch.save(model.state_dict(), tmp_path / "last.pt")  # GP841-CALL
            with torch.no_grad():
                model(torch.randn(8, 16))  # GP844-CALL: evaluated in train() mode
            prof.step()
    return prof.traces[0].path


def evaluation(tmp_path: Path) -> Path:
    """Evaluation steps with autograd on (GP843)."""
    import gpuprof
    from gpuprof.capture import Schedule

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2)).eval()
    with gpuprof.profile(tmp_path, run="eval", schedule=Schedule(wait=0, warmup=1, active=3), print_report=False,
                         tensorboard=False, analyze=False, with_stack=True) as prof:
        for _ in range(4):
            x = torch.randn(8, 16)
            out = model(x)  # GP843-CALL
            out.argmax(1)
            prof.step()
    return prof.traces[0].path


def _by_code(path: Path, codes: tuple[str, ...]) -> dict[str, Finding]:
    return {f.code: f for f in analyze(path, select=list(codes)).findings}


def test_findings_point_at_the_call(tmp_path: Path) -> None:
    found = _by_code(training(tmp_path / "t"), ("GP840", "GP841", "GP844", "GP852"))
    assert set(found) == {"GP840", "GP841", "GP844", "GP852"}
    for code, f in found.items():
        assert f.location is not None and f.location.file.endswith("test_call_lines.py"), code
        assert f.location.function == "training"
        assert f.location.line == _line(training, f"# {code}-CALL"), (code, f.location)
    (f,) = _by_code(evaluation(tmp_path / "e"), ("GP843",)).values()
    assert f.location is not None and f.location.line == _line(evaluation, "# GP843-CALL")


def test_without_the_source_the_function_line_is_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import gpuprof.trace.callsite as callsite

    trace = training(tmp_path)
    monkeypatch.setattr(callsite, "_read_source", lambda path: None)  # as on another machine: no file
    monkeypatch.setattr(callsite, "_CACHE", type(callsite._CACHE)())
    found = _by_code(trace, ("GP840", "GP852"))
    # the line torch recorded in the frame's name: the function was running when the profiler started,
    # so the line it was at then (a frame entered later records its first line)
    from gpuprof.trace.load import load_trace

    (recorded,) = {int(p.name.split("(")[1].split(")")[0]) for p in load_trace(trace).python
                   if "test_call_lines.py(" in p.name and p.name.endswith(": training")}
    assert {f.location.line for f in found.values() if f.location is not None} == {recorded}

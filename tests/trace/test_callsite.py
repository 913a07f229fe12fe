"""gpuprof.trace.callsite: the call a user function was making, matched between its trace frames and its
source (synthetic traces naming a script written here; the real captures are in tests/rules/test_call_lines.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuprof.trace import callsite
from gpuprof.trace.callsite import callee_name
from gpuprof.trace.load import load_trace
from gpuprof.trace.stacks import StackIndex
from gpuprof_testing.tracegen import TraceBuilder

SOURCE = """import torch


def train(model, loss_fn, x, y):
    for _ in range(3):
        out = model(torch.randn(8, 16))
        loss = loss_fn(out, y)
        loss.backward()
        torch.save(model, "a.pt")
"""


@pytest.fixture(autouse=True)
def _no_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(callsite, "_CACHE", type(callsite._CACHE)())


def _trace(tmp_path: Path, source: str = SOURCE) -> tuple[StackIndex, list, list]:
    script = tmp_path / "loop.py"
    script.write_text(source)
    tb = TraceBuilder()
    for _ in range(2):
        with tb.step(), tb.frames((str(script), 4, "train")):
            with tb.python("<built-in method randn of type object at 0x7f00>"):
                tb.cpu(us=5)
            with tb.python("nn.Module: Net_0"), tb.python("torch/nn/modules/module.py", 1782, "_call_impl"):
                tb.cpu(us=50)
            with tb.python("nn.Module: CrossEntropyLoss_0"):
                tb.cpu(us=10)
            with tb.python("torch/_tensor.py", 566, "backward"):
                tb.cpu(us=80)
            with tb.python("torch/serialization.py", 944, "save"):
                tb.cpu(us=30)
    t = load_trace(tb.write(tmp_path / "t.json"))
    modules = [p for p in t.python if p.name.startswith("nn.Module: ")]
    saves = [p for p in t.python if p.name.endswith(": save")]
    return StackIndex(t), modules, saves


def test_callee_names() -> None:
    assert callee_name("torch/optim/optimizer.py(1023): zero_grad") == "zero_grad"
    assert callee_name("<built-in function collect>") == "collect"
    assert callee_name("<built-in method randn of type object at 0x7f>") == "randn"
    assert callee_name("nn.Module: Net_0") == callsite.MODULE
    assert callee_name("garbage") is None


def test_named_and_module_calls_are_found_by_their_neighbours(tmp_path: Path) -> None:
    st, modules, saves = _trace(tmp_path)
    where = [st.call_location(p.pid, p.tid, p.ts) for p in modules]
    # the model between randn and the loss module; the loss module between the model and backward
    assert [w.line for w in where if w is not None] == [6, 7, 6, 7]
    s = saves[0]
    loc = st.call_location(s.pid, s.tid, s.ts)
    assert loc is not None and (loc.line, loc.function) == (9, "train")


def test_ambiguous_or_missing_source_keeps_the_recorded_line(tmp_path: Path) -> None:
    # two module calls on separate lines between the same neighbours: not decided
    st, modules, _ = _trace(tmp_path, SOURCE.replace("out = model(torch.randn(8, 16))",
                                                     "out = model(torch.randn(8, 16))\n        aux = head(out)"))
    p = modules[0]
    assert st.call_location(p.pid, p.tid, p.ts) == st.location(p.pid, p.tid, p.ts)
    # another file at that path (no function "train" at line 4): nothing decided
    st, modules, _ = _trace(tmp_path, "def other():\n    pass\n")
    loc = st.call_location(modules[0].pid, modules[0].tid, modules[0].ts)
    assert loc is not None and loc.line == 4

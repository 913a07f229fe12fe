"""docs/architecture.md stays true: its layer table is the one tests/test_layers.py holds, and its example
rule runs, with its figure checked against a plain walk over the trace's kernels."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

import gpuprof.rules.base as base
from gpuprof.rules.base import RuleContext
from gpuprof.trace.load import load_trace
from gpuprof.trace.metrics import compute_metrics
from gpuprof_testing.tracegen import TraceBuilder

REPO = Path(__file__).resolve().parents[2]
DOC = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")


def _layers_test() -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location("layers_test", REPO / "tests" / "test_layers.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_layer_table_is_the_one_the_layer_test_holds() -> None:
    rows = re.findall(r"^\| (\d+) \| (.+?) \|", DOC, re.M)
    documented = {int(n): set(re.findall(r"`(\w+)`", parts)) for n, parts in rows}
    assert documented, "the layer table was not found"
    layers = _layers_test().LAYERS
    held = {i: set(units) - {"data"} for i, units in enumerate(layers)}  # data: package files, no module
    assert documented == held


def _example_rule(monkeypatch: pytest.MonkeyPatch) -> type[base.Rule]:
    block = re.search(r"```python\n(.*?)```", DOC[DOC.index("## Adding a rule"):], re.S)
    assert block is not None
    monkeypatch.setattr(base, "register", lambda cls: cls)  # the example is not one of gpuprof's rules
    namespace: dict[str, Any] = {}
    exec(compile(block.group(1), "docs/architecture.md", "exec"), namespace)  # noqa: S102 - our own doc
    rule = namespace["TinyKernels"]
    rule.validate()  # as @register would: code, name, docstring, both examples
    return rule  # type: ignore[no-any-return]


def _trace(tmp_path: Path, tiny: int, big: int) -> Path:
    b = TraceBuilder()
    for _ in range(3):
        with b.step():
            b.kernels("elementwise_small", tiny, us=2.0)
            b.kernels("gemm_large", big, us=80.0)
    return b.write(tmp_path / "t.json")


def test_the_example_rule_runs_and_its_figure_is_the_kernels_own(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    rule = _example_rule(monkeypatch)
    trace = load_trace(_trace(tmp_path, tiny=30, big=10))
    ctx = RuleContext(trace, compute_metrics(trace), rule.defaults())
    found = list(rule().check(ctx))
    assert len(found) == 1 and found[0].code == "GPnnn"
    # independently: the share of kernels under 5 µs, walking the Events
    share = sum(e.dur < 5.0 for e in trace.kernels) / len(trace.kernels)
    assert share == pytest.approx(0.75)
    assert found[0].evidence[0].value == round(share, 4)
    assert "elementwise_small" in found[0].message


def test_the_example_rule_is_quiet_below_its_share(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rule = _example_rule(monkeypatch)
    trace = load_trace(_trace(tmp_path, tiny=5, big=20))
    assert list(rule().check(RuleContext(trace, compute_metrics(trace), rule.defaults()))) == []

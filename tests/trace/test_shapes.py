"""Static or changing shapes across steps (gpuprof.trace.shapes), on real traces and real captures."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from gpuprof.trace.load import load_trace
from gpuprof.trace.metrics import compute_metrics
from gpuprof.trace.model import op_shape_key
from gpuprof.trace.shapes import step_shapes
from gpuprof.trace.vocab import SHAPE_KEY_OPS
from gpuprof_testing.realtraces import shared_path

NW0 = ("tbplugin", "samples", "resnet50_num_workers_0", "worker0.1623143089861.pt.trace.json.gz")
SAMPLED = ("hta", "HolisticTraceAnalysis", "tests", "data", "timeline_analysis", "sampled_rank-0.json.gz")


def test_shape_keys_match_the_raw_input_dims() -> None:
    path = shared_path(*NW0)
    with gzip.open(path, "rt") as fh:
        raw = json.load(fh)["traceEvents"]
    want = {(e["name"], json.dumps(e["args"]["Input Dims"])) for e in raw
            if e.get("ph") == "X" and e.get("name") in SHAPE_KEY_OPS and "Input Dims" in e.get("args", {})}
    got = {(o.name, json.dumps(json.loads(k))) for o in load_trace(path).ops if o.name in SHAPE_KEY_OPS
           for k in (op_shape_key(o),) if k is not None}
    assert len(want) > 10 and got == want  # the text of every distinct (operator, dims): none altered, none lost


@pytest.mark.slow  # whole real traces analysed: out of the README's fast command
def test_resnet50_v100_steps_have_static_shapes() -> None:
    s = step_shapes(compute_metrics(load_trace(shared_path(*NW0))))
    assert s.static is True and s.ratio == 1.0 and s.steps == 6 and s.distinct >= 40


def test_windows_that_split_iterations_are_unknown_not_changing() -> None:
    # HTA's sampled ranking-model trace: the same layers, but some matmuls fall into the next step's window
    s = step_shapes(compute_metrics(load_trace(shared_path(*SAMPLED))))
    assert s.static is None and 1.05 < s.ratio < 1.5


@pytest.mark.parametrize("batches,static", [((16, 16, 16, 16), True), ((16, 9, 12, 5), False)])
def test_real_capture(tmp_path: Path, batches: tuple[int, ...], static: bool) -> None:
    torch = pytest.importorskip("torch")
    import gpuprof
    from gpuprof.capture import Schedule

    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    with gpuprof.profile(tmp_path, run="r", schedule=Schedule(wait=0, warmup=0, active=4), print_report=False,
                         tensorboard=False, analyze=False, with_stack=False) as prof:
        for b in batches:
            model(torch.randn(b, 32)).sum().backward()
            prof.step()
    s = step_shapes(compute_metrics(load_trace(prof.traces[0].path)))
    assert s.static is static and s.steps == 4
    if not static:
        assert s.ratio == 4.0  # four batch sizes, the same layers

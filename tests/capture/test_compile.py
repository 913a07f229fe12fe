"""torch.compile under capture (issue 13): gpuprof never causes a recompilation.

Compile tests are slow: tiny models, backend="eager", few steps.
"""

from __future__ import annotations

import gzip
import os
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


def test_names_torch_writes_unescaped_are_repaired_not_a_warning(tmp_path: Path) -> None:
    # torch 2.13's export leaves quotes in names unescaped (invalid JSON). Dynamo's lazy imports
    # inside a window write such Python frame names, e.g. `dce_extra_outputs.py(0):     """`, in
    # about 1 run in 3 (so these tests once imported sympy.tensor.tensor first, which avoided only
    # one of them); a record_function name with quotes is the same bug, every time. The loader
    # repairs it: the trace's findings stay, with a note, and no warning.
    from torch.profiler import record_function

    model = tiny_model()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with gpuprof.profile(tmp_path, run="q", schedule=Schedule(wait=0, warmup=0, active=1), print_report=False,
                             tensorboard=False) as prof:
            with record_function('step "one"'):
                model(torch.randn(8, 16)).sum().backward()
            prof.step()
    assert [str(w.message) for w in seen if "gpuprof" in str(w.message)] == []
    (trace,) = (tmp_path / "q").glob("*.pt.trace.json*")
    text = gzip.decompress(trace.read_bytes()) if trace.suffix == ".gz" else trace.read_bytes()
    assert b'"name": "step "one"",' in text  # torch's bug, as written
    (summary,) = prof.report.traces
    assert "1 event name with unescaped quotes (a torch 2.13 export bug) repaired" in summary.notes


# ---------------------------------------------------------------------- graph breaks and recompilations (GP80x)

class _Net(torch.nn.Module):
    def __init__(self, chatty: bool) -> None:
        super().__init__()
        self.a = torch.nn.Linear(16, 32)
        self.b = torch.nn.Linear(32, 4)
        self.chatty = chatty

    def forward(self, x: Any) -> Any:
        h = self.a(x).relu()
        if self.chatty:
            print("hidden", tuple(h.shape))  # BREAK-LINE: a graph break
        return self.b(h)


BREAK_LINE = next(i for i, ln in enumerate(Path(__file__).read_text().splitlines(), 1) if "# BREAK-LINE" in ln)


def _compiled_run(tmp_path: Path, bad: bool, capsys: Any, backend: str = "eager") -> Any:
    """4 steps of a compiled model; the bad twin prints inside forward and changes the batch size at step 2."""
    net = _Net(chatty=bad)
    model = torch.compile(net, backend=backend)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    sizes = [8, 8, 4, 4] if bad else [8, 8, 8, 8]
    # the clean twin needs no Python stacks (no resume frames to find): its trace is much smaller to analyse
    with gpuprof.profile(tmp_path, run="bad" if bad else "good", schedule=Schedule(wait=1, warmup=1, active=2),
                         print_report=False, tensorboard=False, with_stack=bad) as prof:
        for n in sizes:
            model(torch.randn(n, 16)).sum().backward()
            opt.step()
            opt.zero_grad()
            prof.step()
    capsys.readouterr()  # the model's own prints
    return prof


def _has_c_compiler() -> bool:
    import shutil

    return any(shutil.which(cc) for cc in ("cc", "gcc", "clang"))


@pytest.mark.slow  # torch.compile in this process: ~10 s of CPU a backend
@pytest.mark.parametrize("backend", [
    "eager",
    "aot_eager",  # AOTAutograd: the backward is compiled too, lazily, inside the first backward
    # Inductor compiles C++ on CPU: about a minute here, too long for CI's 10-minute suite; opt in with
    # GPUPROF_TEST_INDUCTOR=1 (run and passing on the development machine, gcc 12, torch 2.13.0)
    pytest.param("inductor", marks=[pytest.mark.slow, pytest.mark.skipif(
        not (_has_c_compiler() and os.environ.get("GPUPROF_TEST_INDUCTOR") == "1"),
        reason="Inductor on CPU: set GPUPROF_TEST_INDUCTOR=1 (needs a C compiler; about a minute)")]),
])
def test_graph_break_and_recompilation_named_clean_twin_has_neither(tmp_path: Path, capsys: Any, backend: str) -> None:
    bad = _compiled_run(tmp_path, True, capsys, backend)
    by = {}
    for f in bad.report.findings:
        by.setdefault(f.code, []).append(f)
    (gb,) = by["GP801"]
    assert gb.location.file == __file__ and gb.location.line == BREAK_LINE and gb.location.function == "forward"
    assert "print" in gb.message and f"{__file__}:{BREAK_LINE}" in gb.message
    # the batch size changed once: `forward` and the code after the break (a resume function) recompile
    rec = by["GP802"]
    assert {f.evidence[0].value for f in rec} == {1}
    assert any("size mismatch at index 0. expected 8, actual 4" in f.message and "`forward`" in f.message
               for f in rec)
    assert any(f"after the graph break at line {BREAK_LINE}" in f.message for f in rec)
    assert "mark_dynamic" in rec[0].advice
    # compiled again at step 2 (the recompilation), inside the recorded window
    (late,) = by["GP803"]
    assert late.evidence[0].extra["steps"] == [2]
    # the trace alone: two compiled frames per step with the resume frame at the break, compilation in a step
    (regions,) = by["GP810"]
    assert regions.evidence[0].value == 2 and regions.location.line == BREAK_LINE
    (traced,) = by["GP811"]
    assert "0/1" in traced.message and traced.evidence[0].extra["steps"] == [2]

    if backend == "aot_eager":
        return  # the clean twin's silence does not depend on the backend: checked with eager (CI time)
    import torch._dynamo

    torch._dynamo.reset()  # the twin runs as if in its own process: `forward` was compiled above
    good = _compiled_run(tmp_path, False, capsys, backend)
    codes = {f.code for f in good.report.findings}
    assert not codes & {"GP801", "GP802", "GP803", "GP810", "GP811"}, codes


def test_cudagraph_skip_and_compile_time_findings_from_metrics() -> None:
    """GP804 needs CUDA (Inductor never tries CUDA graphs on CPU): fed Dynamo's metrics records directly."""
    from types import SimpleNamespace

    from gpuprof.capture.checks.compile.compiled import CompileMonitor, compile_findings

    mon = CompileMonitor(lambda: 0)
    rec = dict(co_name="forward", co_filename="model.py", co_firstlineno=7, recompile_reason=None)
    mon.add_metrics(SimpleNamespace(**rec, cudagraph_skip_reason="skipping cudagraphs due to mutated inputs (1 instances)"))
    mon.add_metrics(SimpleNamespace(**rec, cudagraph_skip_reason=None))
    mon.compile_s_by_step = {0: 3.0, 5: 0.5}
    found = {f.code: f for f in compile_findings(mon, total_step_s=10.0, steps=20, min_compile_share=0.01)}
    assert set(found) == {"GP803", "GP804"}
    assert "mutated inputs" in found["GP804"].message and found["GP804"].location.line == 7
    assert found["GP803"].evidence[0].value == 0.5 and "5%" in found["GP803"].message
    # compiling in step 0 only, or under the share: nothing
    mon.compile_s_by_step = {0: 3.0, 5: 0.05}
    assert not [f for f in compile_findings(mon, 10.0, 20, 0.01) if f.code == "GP803"]


def test_cudagraph_skips_logged_while_running_reach_gp804(tmp_path: Path) -> None:
    """Skips found while the graphs run (mutated inputs, re-recording limit) are only logged: inductor's own
    logging function, called inside a captured step as cudagraph trees would call it on a GPU."""
    from torch._inductor.cudagraph_utils import log_cudagraph_skip_and_bump_counter

    logger = __import__("logging").getLogger("torch._inductor.cudagraph_utils.__cudagraphs")
    level, propagate = logger.level, logger.propagate
    msg = ("skipping cudagraphs due to mutated inputs (1 instances). Found from : \n"
           f'   File "{__file__}", line 321, in forward\n    self.count.add_(1)\n')
    model = torch.compile(tiny_model(), backend="eager")
    with gpuprof.profile(tmp_path, run="r", schedule=Schedule(wait=0, warmup=1, active=2), print_report=False,
                         tensorboard=False) as prof:
        for _ in range(4):
            model(torch.randn(8, 16)).sum().backward()
            log_cudagraph_skip_and_bump_counter(msg)
            log_cudagraph_skip_and_bump_counter("skipping cudagraph due to function 0 exceeding max re-recording "
                                                "limit (=50) on cudagraph node 3 due to tensor size mismatch.")
            prof.step()
    found = [f for f in prof.report.findings if f.code == "GP804"]
    by_line = {f.location.line if f.location else None: f for f in found}
    assert set(by_line) == {321, None}, [f.message for f in found]
    assert "mutated inputs (1 instances)" in by_line[321].message and by_line[321].location.function == "forward"
    assert by_line[321].evidence[0].value == 4 and "re-recording limit" in by_line[None].message
    assert "pad or bucket" in by_line[None].advice
    assert (logger.level, logger.propagate) == (level, propagate)  # the log is given back as it was


# ---------------------------------------------------------------------- mixed precision (GP850/GP851)

def test_amp_spellings_flagged_at_the_users_line(tmp_path: Path) -> None:
    if torch.cuda.is_available():
        pytest.skip("GP851 needs a machine without CUDA")
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("default")  # PyTorch's warnings shown once per line, as in a plain run
        with gpuprof.profile(tmp_path, run="amp", schedule=Schedule(wait=0, warmup=1, active=1), print_report=False,
                             tensorboard=False, analyze=False) as prof:
            for _ in range(2):
                with torch.cuda.amp.autocast():  # AMP-LINE: deprecated, and off on this CPU machine
                    loss = model(torch.randn(4, 16)).sum()
                loss.backward()
                opt.step()
                prof.step()
    line = next(i for i, ln in enumerate(Path(__file__).read_text().splitlines(), 1) if "# AMP-LINE" in ln)
    found = {f.code: f for f in prof.report.findings if f.code in ("GP850", "GP851")}
    assert set(found) == {"GP850", "GP851"}
    assert found["GP850"].location.line == line and "torch.amp.autocast('cuda', args...)" in found["GP850"].message
    assert found["GP851"].location.line == line and "FP32" in found["GP851"].message
    assert warnings.showwarning.__module__ == "warnings"  # gpuprof's watcher is gone after the capture


def test_torch_amp_autocast_on_the_right_device_is_clean(tmp_path: Path) -> None:
    model = tiny_model()
    with gpuprof.profile(tmp_path, run="ok", schedule=Schedule(wait=0, warmup=1, active=1), print_report=False,
                         tensorboard=False, analyze=False) as prof:
        for _ in range(2):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model(torch.randn(4, 16)).float().sum()
            loss.backward()
            prof.step()
    assert not {f.code for f in prof.report.findings} & {"GP850", "GP851"}

"""GP840 zero-grad-fills, GP841 step-chores, GP843 eval-with-autograd: synthetic traces, real CPU captures and
the real shared traces."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuprof.analysis import analyze
from gpuprof.findings import Severity
from gpuprof.trace.load import load_trace
from gpuprof.trace.model import op_records_autograd
from gpuprof_testing.realtraces import shared_path, v100_samples
from gpuprof_testing.tracegen import TraceBuilder


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


def test_gp840_counts_each_gradient_once_when_zero_calls_fill(tmp_path: Path) -> None:
    # aten::zero_ runs aten::fill_ inside it (as on CUDA): one gradient, two operators
    tb = TraceBuilder()
    for _ in range(4):
        with tb.step():
            tb.gemm(us=500)
            with tb.annotate("Optimizer.zero_grad#SGD.zero_grad"):
                for _ in range(6):
                    with tb.op("aten::zero_", input_types=["float"], us=6):
                        with tb.op("aten::fill_", input_types=["float", "Scalar"], us=4):
                            pass
    (f,) = _gp840(tb.write(tmp_path / "nested.json"))
    assert f.evidence[0].value == 6
    assert 30 <= f.cost_us_per_step <= 40  # the outer calls' time, once


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
    from gpuprof.trace.vocab import logging_call_of

    assert logging_call_of("<built-in function print>") == "print(...)"
    assert logging_call_of("logging/__init__.py(1479): info") == "logger.info(...)"
    assert logging_call_of("torch/utils/tensorboard/writer.py(347): add_scalar") == "SummaryWriter.add_scalar(...)"
    assert logging_call_of("wandb/sdk/wandb_run.py(1800): log") == "wandb.log(...)"
    assert logging_call_of("mlflow/tracking/fluent.py(900): log_metrics") == "mlflow.log_metrics(...)"
    # frames inside the libraries, and the user's own functions of the same name, are not logging calls
    assert logging_call_of("logging/__init__.py(1610): _log") is None
    assert logging_call_of("train.py(3): info") is None and logging_call_of("mylogging/__init__.py(3): info") is None


def test_gp841_bad(tmp_path: Path) -> None:
    found = {f.evidence[0].extra["call"]: f for f in analyze(_chores(tmp_path, every=1), select=["GP841"]).findings}
    assert set(found) == {"gc.collect()", "torch.save(...)"}
    assert found["gc.collect()"].evidence[0].value == 1.0 and found["gc.collect()"].cost_us_per_step >= 2000
    assert "gc.freeze()" in found["gc.collect()"].advice and "every N steps" in found["torch.save(...)"].advice


def test_gp841_good(tmp_path: Path) -> None:
    # once in 4 steps (a periodic checkpoint) is under min_step_share: not this rule's business (GP901's outliers)
    assert list(analyze(_chores(tmp_path, every=4), select=["GP841"]).findings) == []


def test_gp841_points_at_the_calling_function(tmp_path: Path) -> None:
    found = list(analyze(_chores(tmp_path, every=1), select=["GP841"]).findings)
    assert found and all(f.location is not None and (f.location.file, f.location.line, f.location.function)
                         == ("train.py", 40, "main") for f in found)


def _logging_loop(tmp_path: Path, log_us: float, sync: bool = False, steps: int = 4) -> Path:
    """Steps of 10 ms of GEMMs; each step logs through SummaryWriter.add_scalar (with a .cpu() sync inside
    when ``sync``) and print()."""
    tb = TraceBuilder()
    for _ in range(steps):
        with tb.step():
            with tb.frames(("train.py", 60, "train")):
                for _ in range(10):
                    tb.gemm(us=1000)
                with tb.python("torch/utils/tensorboard/writer.py", 347, "add_scalar"):
                    if sync:
                        tb.sync_op("aten::item")
                    tb.cpu(us=log_us)
                with tb.python("<built-in function print>"):
                    tb.cpu(us=log_us / 10)
    return tb.write(tmp_path / f"logging_{log_us}_{sync}.json")


def test_gp841_costly_logging(tmp_path: Path) -> None:
    found = {f.evidence[0].extra["call"]: f for f in analyze(_logging_loop(tmp_path, log_us=1500),
                                                              select=["GP841"]).findings}
    # add_scalar: 1.5 ms of a ~11.7 ms step (~13%) is reported; print: 0.15 ms (~1.3%) is under 2%
    assert set(found) == {"SummaryWriter.add_scalar(...)"}, found
    f = found["SummaryWriter.add_scalar(...)"]
    assert 1500 <= f.cost_us_per_step < 1600
    assert "every N steps" in f.advice and f.location is not None and f.location.line == 60
    lowered = {g.evidence[0].extra["call"] for g in analyze(
        _logging_loop(tmp_path, log_us=1500), select=["GP841"], options={"GP841": {"min_logging_share": 0.001}}).findings}
    assert lowered == {"SummaryWriter.add_scalar(...)", "print(...)"}


def test_gp841_cheap_logging_is_quiet(tmp_path: Path) -> None:
    assert list(analyze(_logging_loop(tmp_path, log_us=50), select=["GP841"]).findings) == []


def test_gp841_logging_that_syncs_leaves_the_wait_to_gp203(tmp_path: Path) -> None:
    path = _logging_loop(tmp_path, log_us=1500, sync=True)
    alone = {f.evidence[0].extra["call"]: f for f in analyze(path, select=["GP841"]).findings}
    both = analyze(path, select=["GP841", "GP203"]).findings
    with_203 = {f.evidence[0].extra["call"]: f for f in both if f.code == "GP841"}
    f, g = alone["SummaryWriter.add_scalar(...)"], with_203["SummaryWriter.add_scalar(...)"]
    assert f.evidence[0].extra["syncs_per_step"] >= 1 and "waits for the GPU" in f.message
    # the add_scalar frame holds the sync's wait for ~10 ms of queued GEMMs: GP203 owns it
    assert f.cost_us_per_step > g.cost_us_per_step + 5000
    assert [e.value for e in g.evidence if e.metric == "cost_counted_in"] == ["GP203"]
    (sync,) = [h for h in both if h.code == "GP203"]
    assert sync.evidence[0].extra["cause"] == "SummaryWriter.add_scalar(...) of a CUDA tensor"
    assert "log every N steps" in sync.advice


def _gp841(path: Path) -> list:
    return list(analyze(path, select=["GP841"]).findings)


@pytest.mark.slow
@pytest.mark.parametrize("chore", ["gc", "logging"])
def test_gp841_real_capture_names_the_chore_at_its_caller(tmp_path: Path, chore: str) -> None:
    torch = pytest.importorskip("torch")
    import gc
    import io
    import logging

    import gpuprof
    from gpuprof.capture import Schedule

    # one chore per capture: a full collection in a large test process costs far more than any logging
    log = logging.getLogger(f"gpuprof-test-chores-{tmp_path.name}")
    log.addHandler(logging.StreamHandler(io.StringIO()))  # a handler that formats every record
    log.setLevel(logging.INFO)
    log.propagate = False
    model = torch.nn.Linear(64, 64)
    weights = torch.randn(64, 64).tolist()

    def train_loop(prof: object) -> None:
        for _ in range(3):
            model(torch.randn(8, 64)).sum().backward()
            if chore == "gc":
                gc.collect()
            else:
                log.info("weights %s", weights)  # 4,096 numbers formatted every step
            prof.step()  # type: ignore[attr-defined]

    with gpuprof.profile(tmp_path, run="r", schedule=Schedule(wait=0, warmup=1, active=2), print_report=False,
                         tensorboard=False, analyze=False, with_stack=True) as prof:
        train_loop(prof)
    found = {f.evidence[0].extra["call"]: f for f in _gp841(prof.traces[0].path)}
    assert set(found) == {"gc.collect()" if chore == "gc" else "logger.info(...)"}, found
    (f,) = found.values()
    assert f.location is not None and f.location.function == "train_loop"
    assert f.location.file.endswith("test_habits.py")


def test_gp840_points_at_the_caller_when_frames_exist(tmp_path: Path) -> None:
    tb = TraceBuilder()
    for _ in range(3):
        with tb.step(), tb.frames(("loop.py", 12, "train")):
            tb.gemm(us=500)
            with tb.annotate("Optimizer.zero_grad#SGD.zero_grad"):
                for _ in range(4):
                    with tb.op("aten::zero_", input_types=["float"], us=5):
                        pass
    (f,) = _gp840(tb.write(tmp_path / "zero_frames.json"))
    assert f.location is not None and (f.location.file, f.location.line, f.location.function) == ("loop.py", 12, "train")


# ---------------------------------------------------------------------- GP843 eval-with-autograd

_FORWARD = ("aten::linear", "aten::t", "aten::addmm", "aten::relu")  # what a Linear+ReLU records


def _gp843(path: Path) -> list:
    return list(analyze(path, select=["GP843"]).findings)


def _forward(tb: TraceBuilder, layers: int = 4, autograd: bool = True) -> None:
    for _ in range(layers):
        for name in _FORWARD:
            with tb.op(name, input_types=["float"], us=5, autograd=autograd):
                pass


def _eval_loop(tmp_path: Path, name: str, steps: int = 4, backward_in: int = 0, backward: str = "",
               autograd: bool = True, markers: bool = True, module: str = "nn.Module: Net_0") -> Path:
    tb = TraceBuilder()
    for i in range(steps):
        with tb.step() if markers else tb.annotate("evaluate"):
            # the user's own model class: its forward is user code too, but not where the model is called
            with tb.frames(("eval.py", 30, "evaluate")), tb.python(module), tb.python("model.py", 12, "forward"):
                _forward(tb, autograd=autograd)
            if i < backward_in:
                with tb.op(backward, us=5, autograd=True):
                    pass
    return tb.write(tmp_path / f"{name}.json")


def test_gp843_bad(tmp_path: Path) -> None:
    (f,) = _gp843(_eval_loop(tmp_path, "eval"))
    ev = f.evidence[0]
    assert (ev.value, ev.extra["steps_hit"], ev.extra["steps"], ev.extra["recording_ops_per_step"]) == (1.0, 4, 4, 16)
    assert "in 4 of 4 steps" in f.message and "16 autograd-recording" in f.message
    assert f.cost_us_per_step is None and f.severity is Severity.WARNING  # no honest cost: a warning
    assert "torch.inference_mode()" in f.advice and "torch.no_grad()" in f.advice
    # the caller of the model (the frame around the outermost nn.Module range), not torch's forward
    assert f.location is not None and (f.location.file, f.location.line, f.location.function) == ("eval.py", 30, "evaluate")


def test_gp843_without_step_markers_reads_the_whole_trace(tmp_path: Path) -> None:
    # and without an nn.Module range around the ops, the location is their innermost user frame
    (f,) = _gp843(_eval_loop(tmp_path, "nomarkers", markers=False, module="site-packages/x.py(3): f"))
    assert "in the trace (no step markers): 64 autograd-recording" in f.message
    assert f.location is not None and (f.location.file, f.location.function) == ("model.py", "forward")


def test_gp843_good_training_steps(tmp_path: Path) -> None:
    for i, backward in enumerate([
        "autograd::engine::evaluate_function: AddmmBackward0",  # torch >= 1.10
        "CudnnConvolutionBackward",  # 2021 traces: the node only, no engine range
        "aten::threshold_backward",
    ]):
        assert _gp843(_eval_loop(tmp_path, f"train{i}", backward_in=4, backward=backward)) == [], backward


def test_gp843_good(tmp_path: Path) -> None:
    assert _gp843(_eval_loop(tmp_path, "nograd", autograd=False)) == []  # no_grad/inference_mode: no sequence numbers
    # one eval step among four training steps is under min_step_share
    assert _gp843(_eval_loop(tmp_path, "mixed", backward_in=3,
                             backward="autograd::engine::evaluate_function: AddmmBackward0")) == []
    tb = TraceBuilder()  # model.to(...)/.half() alone: set-up, not evaluation
    for _ in range(40):
        with tb.op("aten::_has_compatible_shallow_copy_type", us=1, autograd=True):
            pass
    assert _gp843(tb.write(tmp_path / "setup.json")) == []


@pytest.mark.parametrize("mode", ["grad", "no_grad", "inference_mode", "train"])
def test_gp843_real_capture(tmp_path: Path, mode: str) -> None:
    torch = pytest.importorskip("torch")
    import contextlib

    import gpuprof
    from gpuprof.capture import Schedule

    class Net(torch.nn.Module):  # the user's own model: its forward is user code in this file
        def __init__(self) -> None:
            super().__init__()
            self.body = torch.nn.Sequential(*[torch.nn.Linear(16, 16) for _ in range(4)])

        def forward(self, x: object) -> object:
            return self.body(x)

    model = Net()
    model.eval()
    guard = {"no_grad": torch.no_grad, "inference_mode": torch.inference_mode}.get(mode, contextlib.nullcontext)

    def evaluate_batch(x: object) -> object:
        with guard():
            out = model(x)  # the line GP843 points at
            if mode == "train":
                out.sum().backward()
        return out

    with gpuprof.profile(tmp_path, run="r", schedule=Schedule(wait=0, warmup=1, active=2), print_report=False,
                         tensorboard=False, analyze=False, with_stack=True) as prof:
        for _ in range(3):
            evaluate_batch(torch.randn(4, 16))
            prof.step()
    path = prof.traces[0].path
    ops = load_trace(path).ops
    assert sum(o.name == "aten::addmm" for o in ops) >= 8  # the forward passes were recorded: 2 steps x 4 layers
    recording = sum(map(op_records_autograd, ops))
    found = _gp843(path)
    if mode != "grad":
        # no_grad/inference_mode: nothing records autograd; training records it and runs a backward
        assert (recording > 0) == (mode == "train") and found == []
        return
    (f,) = found
    assert f.evidence[0].extra["steps_hit"] == f.evidence[0].extra["steps"] == 2
    assert f.evidence[0].extra["recording_ops_per_step"] >= 12  # 4 x (linear, t, addmm)
    assert f.location is not None and f.location.file.endswith("test_habits.py")
    # torch's Python tracer writes nn.Module ranges (with_stack=True): the line that calls the model,
    # not the innermost user frame (Net.forward)
    assert f.location.function == "evaluate_batch"


@pytest.mark.slow  # slow pass: a real trace (or job) analysed whole; the README's fast command stays under 300 CPU s on a 2-core VM
def test_gp843_real_traces() -> None:
    # ResNet-50 training on a V100 (2021: sequence numbers on zero_/copy_ and the forward, backward as
    # CudnnConvolutionBackward... without engine ranges): training, not reported
    for p in v100_samples():
        assert _gp843(p) == [], p
    # a torch 2.13 CPU training capture (engine ranges) and kineto's small GPU sample with a backward
    assert _gp843(shared_path("tbplugin", "generated_cpu_torch2.13", "tiny_cpu_nw0",
                              "cpuworker.1795297193849114643.pt.trace.json.gz")) == []
    assert _gp843(shared_path("tbplugin", "test_resources", "gpu_metrics_input.json")) == []
    # PARAM's AlexNet forward benchmark ("[param|...|measure|forward]"): two forward passes with grad mode on
    # and no backward. conv2d/relu_/linear carry sequence numbers: it is an inference benchmark with autograd on
    (f,) = _gp843(shared_path("hta", "HolisticTraceAnalysis", "tests", "data", "critical_path", "alexnet",
                              "benchmark_result_2869224_1695835535_trace.json.gz"))
    assert "no step markers" in f.message and f.evidence[0].extra["recording_ops_per_step"] == 84


def test_gp843_bad_small_model_real_capture(tmp_path: Path) -> None:
    """A one-layer model evaluated with grad mode on: 4 recording operators per step (linear, t, addmm, relu),
    under min_ops_per_step (10) but inside nn.Module ranges (with_stack=True): min_module_ops_per_step (3)."""
    torch = pytest.importorskip("torch")
    import gpuprof
    from gpuprof.capture import Schedule

    model = torch.nn.Sequential(torch.nn.Linear(8, 2), torch.nn.ReLU()).eval()
    with gpuprof.profile(tmp_path, run="small", schedule=Schedule(wait=0, warmup=1, active=2), print_report=False,
                         tensorboard=False, analyze=False, with_stack=True) as prof:
        for _ in range(3):
            model(torch.randn(4, 8))
            prof.step()
    path = prof.traces[0].path
    recording = [o.name for o in load_trace(path).ops if op_records_autograd(o)]
    assert len(recording) == 8  # independent count: 2 steps x (linear, t, addmm, relu)
    (f,) = _gp843(path)
    assert f.evidence[0].extra["recording_ops_per_step"] == 4


def test_gp841_good_dynamo_collects_after_each_compilation(tmp_path: Path) -> None:
    """torch.compile recompiling every step: Dynamo's own gc.collect(1) (run_gc_after_compile) is not a user chore."""
    tb = TraceBuilder()
    for _ in range(4):
        with tb.step():
            with tb.frames(("train.py", 40, "main")):
                tb.gemm(us=500)
                with tb.python("torch/_dynamo/convert_frame.py", 1633, "_compile"):
                    tb.cpu(us=300)
                    with tb.python("<built-in function collect>"):
                        tb.cpu(us=2000)
    path = tb.write(tmp_path / "dynamo_gc.json")
    assert list(analyze(path, select=["GP841"]).findings) == []
    tb = TraceBuilder()  # the same collection made by the user's own code, beside a compilation: reported
    for _ in range(4):
        with tb.step():
            with tb.frames(("train.py", 40, "main")):
                with tb.python("torch/_dynamo/convert_frame.py", 1633, "_compile"):
                    tb.cpu(us=300)
                with tb.python("<built-in function collect>"):
                    tb.cpu(us=2000)
    (f,) = analyze(tb.write(tmp_path / "user_gc.json"), select=["GP841"]).findings
    assert f.evidence[0].extra["call"] == "gc.collect()"

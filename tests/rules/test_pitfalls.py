"""GP403 peer-copies, GP844 train-mode-in-eval, GP852 clip-before-unscale: real CPU captures where the
signal exists on CPU (dropout, GradScaler("cpu"), clip_grad_norm_), synthetic GPU traces where it needs
GPUs (peer copies), and the real shared traces (none of them should fire)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest

from gpuprof.analysis import analyze
from gpuprof.findings import Finding
from gpuprof.trace.load import load_trace
from gpuprof_testing.realtraces import shared_path, v100_samples
from gpuprof_testing.tracegen import TraceBuilder

CODES = ["GP403", "GP844", "GP852"]


def _found(path: Path, code: str) -> list[Finding]:
    return [f for f in analyze(path, select=[code]).findings if f.code == code]


# ---------------------------------------------------------------------- GP403


def _peer(tmp_path: Path, name: str, *, nbytes: int, dataparallel: bool = False) -> Path:
    tb = TraceBuilder(num_devices=2)
    for _ in range(4):
        with tb.step():
            tb.gemm(us=400)
            if dataparallel:
                tb.data_parallel(devices=2)
            else:
                with tb.python("model_split.py", 17, "forward"):
                    tb.memcpy("PtoP", nbytes, src="Device", dst="Device", device=1)
            with tb.stream(7, device=1):
                tb.gemm(us=400)
            tb.device_synchronize()
    return tb.write(tmp_path / f"{name}.json")


def test_gp403_bad(tmp_path: Path) -> None:
    (f,) = _found(_peer(tmp_path, "split", nbytes=64 << 20), "GP403")
    ev = f.evidence[0]
    assert ev.value == 64 << 20 and ev.extra["copies_per_step"] == 1 and ev.extra["devices"] == [1]
    assert f.cost_us_per_step is not None and f.cost_us_per_step == pytest.approx(ev.extra["copy_us_per_step"], rel=0.01)
    assert f.message.startswith("64.0 MiB per step copied between GPUs (1 peer copy per step on device 1")
    assert f.location is not None and f.location.file == "model_split.py" and f.location.line == 17
    assert "DistributedDataParallel" in f.advice


def test_gp403_good(tmp_path: Path) -> None:
    assert _found(_peer(tmp_path, "tiny", nbytes=64 << 10), "GP403") == []  # under min_bytes_per_step
    # DataParallel's own replication is GP401's, with its overhead; not reported twice
    path = _peer(tmp_path, "dp", nbytes=0, dataparallel=True)
    assert _found(path, "GP403") == [] and [f.code for f in analyze(path, select=["GP401"]).findings] == ["GP401"]


# ---------------------------------------------------------------------- GP844 (real CPU captures)


def _eval_capture(tmp_path: Path, *, train_mode: bool, backward: bool = False, dropout: bool = True) -> Path:
    torch = pytest.importorskip("torch")
    import gpuprof
    from gpuprof.capture import Schedule

    torch.manual_seed(0)
    layers: list[Any] = [torch.nn.Linear(16, 16), torch.nn.ReLU()]
    if dropout:
        layers.append(torch.nn.Dropout(0.2))
    model = torch.nn.Sequential(*layers, torch.nn.Linear(16, 2))
    model.train(train_mode)
    guard = contextlib.nullcontext if backward else torch.no_grad
    run = f"e{train_mode:d}{backward:d}{dropout:d}"
    with gpuprof.profile(tmp_path, run=run, schedule=Schedule(wait=0, warmup=1, active=3), print_report=False,
                         tensorboard=False, analyze=False, with_stack=True) as prof:
        for _ in range(4):
            with guard():
                out = model(torch.randn(8, 16))  # the evaluation's call of the model
                if backward:
                    out.sum().backward()
            prof.step()
    return prof.traces[0].path


def test_gp844_bad(tmp_path: Path) -> None:
    (f,) = _found(_eval_capture(tmp_path, train_mode=True), "GP844")
    ev = f.evidence[0]
    assert ev.extra["steps_hit"] == ev.extra["steps_without_backward"] == 3 and ev.value == 1.0
    assert "train() mode" in f.message and "model.eval()" in f.advice
    assert f.cost_us_per_step is None
    assert f.location is not None and f.location.file.endswith("test_pitfalls.py")


def test_gp844_good(tmp_path: Path) -> None:
    assert _found(_eval_capture(tmp_path, train_mode=False), "GP844") == []  # eval(): dropout draws nothing
    assert _found(_eval_capture(tmp_path, train_mode=True, backward=True), "GP844") == []  # training: dropout belongs
    assert _found(_eval_capture(tmp_path, train_mode=True, dropout=False), "GP844") == []  # no dropout at all


def _eval_in_training_step(tmp_path: Path, *, eval_mode: bool = False, frozen: bool = False) -> Path:
    """Training steps that also evaluate (forward + backward, then a no_grad forward) in one step."""
    torch = pytest.importorskip("torch")
    import gpuprof
    from gpuprof.capture import Schedule

    torch.manual_seed(0)
    first = torch.nn.Linear(16, 16)
    first.requires_grad_(not frozen)
    model = torch.nn.Sequential(first, torch.nn.ReLU(), torch.nn.Dropout(0.2), torch.nn.Linear(16, 2))
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.01)
    run = f"s{eval_mode:d}{frozen:d}"
    with gpuprof.profile(tmp_path, run=run, schedule=Schedule(wait=0, warmup=1, active=3), print_report=False,
                         tensorboard=False, analyze=False, with_stack=True) as prof:
        for _ in range(4):
            model(torch.randn(8, 16)).sum().backward()
            opt.step()
            opt.zero_grad()
            if not frozen:
                model.train(not eval_mode)
                with torch.no_grad():
                    model(torch.randn(8, 16))  # EVAL-IN-STEP: the evaluation's call of the model
                model.train()
            prof.step()
    return prof.traces[0].path


def test_gp844_bad_evaluation_inside_a_training_step(tmp_path: Path) -> None:
    (f,) = _found(_eval_in_training_step(tmp_path), "GP844")
    ev = f.evidence[0]
    assert ev.extra["training_steps_hit"] == ev.extra["training_steps_evaluating"] == 3
    assert "without autograd" in f.message and "train() mode" in f.message and "model.eval()" in f.advice
    assert f.location is not None and f.location.file.endswith("test_pitfalls.py")


def test_gp844_good_evaluation_inside_a_training_step_in_eval_mode(tmp_path: Path) -> None:
    assert _found(_eval_in_training_step(tmp_path, eval_mode=True), "GP844") == []  # eval(): nothing drawn
    # a frozen first layer: the training forward's dropout records no autograd, the model call does (the head)
    assert _found(_eval_in_training_step(tmp_path, frozen=True), "GP844") == []


# ---------------------------------------------------------------------- GP852 (real CPU captures)


def _amp_capture(tmp_path: Path, *, unscale_first: bool, clip: bool = True) -> Path:
    torch = pytest.importorskip("torch")
    import gpuprof
    from gpuprof.capture import Schedule

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu")
    run = f"a{unscale_first:d}{clip:d}"
    with gpuprof.profile(tmp_path, run=run, schedule=Schedule(wait=0, warmup=1, active=3), print_report=False,
                         tensorboard=False, analyze=False, with_stack=True) as prof:
        for _ in range(4):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model(torch.randn(8, 16)).float().pow(2).mean()
            scaler.scale(loss).backward()
            if unscale_first:
                scaler.unscale_(opt)
            if clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # the clipping GP852 points at
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
            prof.step()
    return prof.traces[0].path


def test_gp852_bad(tmp_path: Path) -> None:
    (f,) = _found(_amp_capture(tmp_path, unscale_first=False), "GP852")
    ev = f.evidence[0]
    assert ev.extra["steps_hit"] == ev.extra["steps_clipping"] == 3
    assert "scaler.unscale_(optimizer)" in f.advice and f.cost_us_per_step is None
    assert f.location is not None and f.location.file.endswith("test_pitfalls.py")
    assert f.location.function == "_amp_capture"


def test_gp852_good(tmp_path: Path) -> None:
    assert _found(_amp_capture(tmp_path, unscale_first=True), "GP852") == []
    assert _found(_amp_capture(tmp_path, unscale_first=False, clip=False), "GP852") == []


def test_gp852_synthetic_without_stacks(tmp_path: Path) -> None:
    """Without Python frames, the foreach norm before the unscale kernel is the signal."""
    tb = TraceBuilder()
    for _ in range(3):
        with tb.step():
            tb.gemm(us=300)
            with tb.op("aten::_foreach_norm", us=5):
                pass
            with tb.op("aten::_amp_foreach_non_finite_check_and_unscale_", us=5):
                pass
    (f,) = _found(tb.write(tmp_path / "clip.json"), "GP852")
    assert f.evidence[0].extra["steps_hit"] == 3 and f.location is None


# ---------------------------------------------------------------------- real shared traces


@pytest.mark.slow  # slow pass: a real trace (or job) analysed whole; the README's fast command stays under 300 CPU s on a 2-core VM
def test_pitfalls_on_real_traces() -> None:
    """On every shared trace (checked once by hand: 54 files) only PARAM's AlexNet forward benchmarks fire,
    GP844: a forward pass timed with grad mode on and the model in train() mode, dropout drawing masks on
    the GPU (``aten::native_dropout``, 2 Dropout layers x 2 passes); GP843 reports the same runs. The
    training samples with dropout-free ResNets and GradScaler-free loops stay quiet."""
    for p in v100_samples():
        assert [f.code for f in analyze(p, select=CODES).findings] == [], p
    for parts in (("critical_path", "alexnet", "benchmark_result_2869224_1695835535_trace.json.gz"),
                  ("cupti_profiler", "benchmark_result_924719_1679055439_trace.json.gz")):
        path = shared_path("hta", "HolisticTraceAnalysis", "tests", "data", *parts)
        (f,) = analyze(path, select=CODES).findings
        assert f.code == "GP844" and "(4 dropouts per such step)" in f.message
        native = [o for o in load_trace(path).ops if o.name == "aten::native_dropout"]
        assert len(native) == 4  # the independent count: every masked dropout of the trace


# ---------------------------------------------------------------------- GP845 (torch.save on every DDP rank)


def _saving_rank(tmp_path: Path, *, rank: int, world_size: int = 2, caller: tuple[str, int, str] = ("train.py", 30, "train"),
                 every: int = 2, steps: int = 6) -> Path:
    """A rank's trace whose loop saves a checkpoint every ``every`` steps (``caller``: the frame that calls
    torch.save: the user's, or a library's that saves per rank on purpose)."""
    tb = TraceBuilder(rank=rank, world_size=world_size)
    for i in range(steps):
        with tb.step():
            with tb.frames(("train.py", 10, "main")):
                tb.gemm(us=500)
                if i % every == 0:
                    with tb.frames(caller, ("torch/serialization.py", 944, "save")):
                        tb.cpu(us=700)
    return tb.write(tmp_path / f"rank{rank}_{world_size}_{caller[0].replace('/', '_')}.json")


def test_gp845_bad_every_rank_saves_the_checkpoint(tmp_path: Path) -> None:
    (f,) = _found(_saving_rank(tmp_path, rank=1), "GP845")
    assert "rank 1 of 2" in f.message and "torch.save" in f.message and "3 calls" in f.message
    assert "rank 0" in f.advice and "dist.get_rank() == 0" in f.advice
    # independent: 3 saves of 700 µs over 6 steps
    assert f.cost_us_per_step is not None and abs(f.cost_us_per_step - 3 * 700 / 6) < 5
    assert f.location is not None and (f.location.file, f.location.function) == ("train.py", "train")
    assert f.evidence[0].value == 3


def test_gp845_good_rank_zero_and_single_process_and_per_rank_library_saves(tmp_path: Path) -> None:
    assert _found(_saving_rank(tmp_path, rank=0), "GP845") == []  # rank 0 is where a checkpoint is written
    assert _found(_saving_rank(tmp_path, rank=0, world_size=1), "GP845") == []  # not a multi-rank run
    # torch.distributed.checkpoint / accelerate's save_state write each rank's own part on purpose
    for lib in (("torch/distributed/checkpoint/filesystem.py", 300, "_write_item"),
                ("accelerate/checkpointing.py", 120, "save_accelerator_state")):
        assert _found(_saving_rank(tmp_path, rank=1, caller=lib), "GP845") == []


def test_gp841_torch_save_advice_names_rank_zero_in_a_multi_rank_run(tmp_path: Path) -> None:
    f = next(f for f in analyze(_saving_rank(tmp_path, rank=1, every=1), select=["GP841"]).findings
             if f.evidence[0].extra["call"] == "torch.save(...)")
    assert "rank 0" in f.advice

"""The context manager and the decorator end to end on CPU: trace, TensorBoard events, report."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import gpuprof  # noqa: E402
from gpuprof.capture import Schedule  # noqa: E402
from gpuprof.render.format import findings_total  # noqa: E402

from .conftest import quick_schedule, report_json, run_dir, tiny_model, traces, train_step  # noqa: E402


def _loop(prof_step, steps: int = 8) -> None:
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        train_step(model, opt, torch.randn(8, 16), torch.randint(0, 4, (8,)))
        prof_step()


def test_context_manager_writes_trace_events_and_report(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    with gpuprof.profile(tmp_path, schedule=quick_schedule(), print_report=False) as prof:
        _loop(prof.step)
    rdir = run_dir(tmp_path)
    found = traces(tmp_path)
    assert len(found) == 1
    name = found[0].name
    # <worker>.<span>.pt.trace.json.gz directly in <logdir>/<run>/ (torch-tb-profiler's layout)
    assert found[0].parent == rdir and name.count(".") == 5 and name.endswith(".pt.trace.json.gz")
    with gzip.open(found[0]) as fh:
        doc = json.load(fh)
    steps = sorted({e["name"] for e in doc["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")})
    # Schedule(wait=1, warmup=1, active=3): loop steps 2, 3, 4 recorded, with the loop's numbers
    assert steps == ["ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"]
    assert [t.first_step for t in prof.traces] == [2] and prof.traces[0].last_step == 4
    rep = report_json(rdir)
    assert rep["command"] == "capture"
    assert rep["inputs"] == [str(found[0])]
    assert (rdir / "report.md").read_text().strip()
    section = next(s for s in rep["sections"] if s["kind"] == "capture")
    assert section["steps"] == 8 and section["traces"] == [str(found[0])]
    assert prof.report is not None and len(prof.step_s) == 8


def test_trace_is_read_by_gpuprof_analyze(tmp_path: Path) -> None:
    analysis = pytest.importorskip("gpuprof.analysis")
    with gpuprof.profile(tmp_path, schedule=quick_schedule(), print_report=False, tensorboard=False) as prof:
        _loop(prof.step)
    report = analysis.analyze(run_dir(tmp_path))
    assert len(report.traces) == 1
    assert report.traces[0].num_steps == 3
    assert report.traces[0].step_time_us > 0
    # the capture report carries the same trace summary
    assert prof.report is not None and [t.num_steps for t in prof.report.traces] == [3]


def test_tensorboard_scalars_and_text_read_back(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from torch.utils.data import DataLoader, TensorDataset

    loader = DataLoader(TensorDataset(torch.randn(80, 16), torch.randint(0, 4, (80,))), batch_size=8)
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with gpuprof.profile(tmp_path, schedule=quick_schedule(), print_report=False) as prof:
        for x, y in loader:
            train_step(model, opt, x, y)
            prof.step()
    # one TensorBoard event file per run: scalars and the findings text through one writer (issue 12)
    assert len(list(run_dir(tmp_path).glob("events.out.tfevents.*"))) == 1
    acc = EventAccumulator(str(run_dir(tmp_path)), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    tags = acc.Tags()
    step_times = acc.Scalars("gpuprof/step_time_ms")
    assert [e.step for e in step_times] == list(range(10))
    assert all(e.value > 0 for e in step_times)
    assert abs(step_times[3].value - prof.step_s[3] * 1000) < 1e-3
    shares = acc.Scalars("gpuprof/data_loading_share")
    assert len(shares) == 10 and all(0 <= e.value <= 1 for e in shares) and any(e.value > 0 for e in shares)
    assert "gpuprof/host_rss_mib" in tags["scalars"]  # no CUDA here: the process RSS
    text = acc.Tensors("gpuprof/findings/text_summary")
    body = text[-1].tensor_proto.string_val[0].decode()
    assert prof.report is not None
    assert body.startswith(f"**{findings_total(prof.report)}**")
    for f in prof.report.findings:  # a list item each, not a table TensorBoard squeezes ("war ning")
        assert f"**{f.severity.value}** `{f.code}`" in body
    assert "| severity |" not in body
    # paths relative to the run (the folder TensorBoard lists), not absolute
    assert "**Capture** (run `" in body and str(tmp_path) not in body
    assert all(f"`{Path(t).name}`" in body for t in prof.report.sections[0].traces)


def test_decorator_profiles_every_call_and_finishes(tmp_path: Path) -> None:
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    @gpuprof.profile_step(tmp_path, schedule=quick_schedule(), print_report=False, tensorboard=False)
    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return train_step(model, opt, x, y)

    assert step.__name__ == "step"  # functools.wraps
    for _ in range(7):
        out = step(torch.randn(8, 16), torch.randint(0, 4, (8,)))
        assert out.shape == ()
    prof = step.profiler
    assert prof is not None and prof.step_num == 7
    report = step.finish()
    assert report is not None and step.profiler is None
    assert len(traces(tmp_path)) == 1
    assert report_json(run_dir(tmp_path))["sections"][0]["steps"] == 7
    step(torch.randn(8, 16), torch.randint(0, 4, (8,)))  # after finish: plain call, no new run
    assert len(list(tmp_path.iterdir())) == 1


def test_bare_decorator_and_method(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)

    class Trainer:
        def __init__(self) -> None:
            self.model = tiny_model()
            self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1)

        @gpuprof.profile_step
        def step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return train_step(self.model, self.opt, x, y)

    t = Trainer()
    t.step(torch.randn(4, 16), torch.randint(0, 4, (4,)))
    prof = Trainer.step.profiler
    assert prof is not None and prof.run_dir is not None
    assert prof.run_dir.parent == Path("gpuprof_logs")  # the default logdir, relative to the cwd
    prof.config.print_report = False
    Trainer.step.finish()
    assert (prof.run_dir / "report.json").exists()


def test_user_schedule_and_options_pass_through(tmp_path: Path) -> None:
    sched = torch.profiler.schedule(wait=0, warmup=1, active=2, repeat=2)
    with gpuprof.profile(tmp_path, schedule=sched, record_shapes=False, with_stack=False, profile_memory=False,
                         print_report=False, tensorboard=False, analyze=False) as prof:
        _loop(prof.step, steps=8)
    found = traces(tmp_path)
    assert len(found) == 2  # two cycles
    assert [(t.first_step, t.last_step) for t in prof.traces] == [(1, 2), (4, 5)]
    with gzip.open(found[0]) as fh:
        doc = json.load(fh)
    ops = [e for e in doc["traceEvents"] if e.get("cat") == "cpu_op"]
    assert ops and not any("Input Dims" in e.get("args", {}) for e in ops)  # record_shapes=False honoured
    assert not any(e.get("name") == "[memory]" for e in doc["traceEvents"])  # profile_memory=False


def test_default_schedule_skips_start_up(tmp_path: Path) -> None:
    s = Schedule()
    from torch.profiler import ProfilerAction

    acts = [s.to_torch()(i) for i in range(14)]
    assert acts[:5] == [ProfilerAction.NONE] * 5
    assert ProfilerAction.RECORD_AND_SAVE in acts and acts[-1] == ProfilerAction.NONE
    with pytest.raises(ValueError):
        Schedule(active=0)


def test_short_run_notes_missing_trace(tmp_path: Path) -> None:
    with gpuprof.profile(tmp_path, print_report=False, tensorboard=False) as prof:
        _loop(prof.step, steps=3)
    assert not traces(tmp_path)
    assert prof.report is not None
    assert any("before the schedule recorded" in n for n in prof.report.notes)


def test_printed_report_names_files_and_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("tensorboard")
    with gpuprof.profile(tmp_path, schedule=quick_schedule()) as prof:
        _loop(prof.step)
    err = capsys.readouterr().err
    assert "gpuprof: 8 steps" in err
    assert f"tensorboard --logdir {tmp_path}" in err
    assert "Perfetto" in err and str(traces(tmp_path)[0]) in err
    assert "report.md" in err
    # the window-closing step waits for torch's export: a line says so before it (not seconds of silence)
    written = traces(tmp_path)[0].name
    assert f"torch is writing their trace to {written} (this step waits until it is written)" in err
    assert err.index("torch is writing") < err.index("gpuprof: 8 steps")


def test_rank_aware_layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for rank in (0, 1):
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("LOCAL_RANK", str(rank))
        monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job42")
        with gpuprof.profile(tmp_path, schedule=quick_schedule(), print_report=False, tensorboard=False) as prof:
            _loop(prof.step, steps=6)
    rdir = tmp_path / "run-job42"
    names = sorted(p.name.split(".")[0] for p in traces(tmp_path))
    assert names == ["rank0", "rank1"]
    assert all(p.parent == rdir for p in traces(tmp_path))
    assert (rdir / "rank0" / "report.json").exists() and (rdir / "rank1" / "report.json").exists()


def test_no_cost_outside_active_window(tmp_path: Path) -> None:
    # Outside the window, no torch profiler exists at all (the cost is a clock read and a sample).
    with gpuprof.profile(tmp_path, schedule=Schedule(wait=3, warmup=1, active=1), print_report=False,
                         tensorboard=False, analyze=False) as prof:
        states = []
        for _ in range(8):
            states.append(prof.tracing)
            prof.step()
    assert states == [False, False, False, True, True, False, False, False]

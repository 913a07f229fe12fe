"""The cores free beside the trainer (gpuprof.capture.checks.loader.freecores): what caps a loader fix's what-if
(issue 46)."""

from __future__ import annotations

import os
import sys
import time
from types import SimpleNamespace
from typing import Any

import pytest

from gpuprof.capture.checks.loader import freecores
from gpuprof.capture.checks.loader.dataloader import LoaderRecord, dataloader_findings
from gpuprof.capture.checks.loader.freecores import CoreUse, FreeCores, idle_seconds
from gpuprof.capture.config import CheckOptions

STAT = (b"cpu  100 0 50 1000 20 0 0 0 0 0\n"
        b"cpu0 50 0 25 400 10 0 0 0 0 0\n"
        b"cpu1 50 0 25 600 10 0 0 0 0 0\n"
        b"intr 1 2 3\n")


def test_idle_is_read_from_the_cpus_the_process_may_use() -> None:
    assert idle_seconds(STAT, {0}, 100.0) == pytest.approx(4.1)  # idle + iowait of cpu0, in ticks of 1/100 s
    assert idle_seconds(STAT, {0, 1}, 100.0) == pytest.approx(10.2)
    assert idle_seconds(STAT, None, 100.0) == pytest.approx(10.2)  # the "cpu" line: every CPU
    assert idle_seconds(STAT, {7}, 100.0) is None  # none of ours listed
    assert idle_seconds(b"cpu0 1 2\n", {0}, 100.0) is None  # too few fields: nothing made up
    assert idle_seconds(b"", {0}, 100.0) is None


def _scripted(monkeypatch: pytest.MonkeyPatch, reads: list[tuple[float, float, int]]) -> None:
    """Each read of the clock, the process's CPU and /proc/stat gives the next (wall s, CPU s, idle ticks)."""
    it = iter(reads)
    now: dict[str, Any] = {}

    def stat() -> bytes:
        now["t"], now["cpu"], idle = next(it)
        return f"cpu0 0 0 0 {idle} 0 0 0 0 0 0\ncpu1 0 0 0 0 0 0 0 0 0 0\n".encode()

    monkeypatch.setattr(freecores, "_proc_stat", stat)
    monkeypatch.setattr(freecores, "_cpus", lambda: {0, 1})
    monkeypatch.setattr(freecores, "ticks_per_s", lambda: 100.0)
    monkeypatch.setattr(freecores.time, "monotonic", lambda: now["t"])
    monkeypatch.setattr(freecores.os, "times", lambda: SimpleNamespace(user=now["cpu"], system=0.0))


def test_the_spans_between_start_and_stop_are_summed_and_the_windows_left_out(monkeypatch: pytest.MonkeyPatch) -> None:
    # steps 0-10 s: 10 CPU s, 5 s idle; a recorded window 10-20 s (not counted: 10 CPU s, no idle); 20-30 s: 12 CPU s,
    # 3 s idle. Over the 20 s of steps: 1.1 cores of trainer, 0.4 idle
    _scripted(monkeypatch, [(0.0, 0.0, 0), (10.0, 10.0, 500), (20.0, 20.0, 500), (30.0, 32.0, 800),
                            (40.0, 40.0, 2000)])
    f = FreeCores()
    f.start()
    f.stop()  # the window opens
    f.start()  # and closes
    f.start()  # a second start while a span is open changes nothing
    got = f.result()
    assert got == CoreUse(seconds=20.0, trainer_cores=1.1, idle_cores=0.4, cores=2)
    # the span stays open (a window's report reads the findings mid-run): the end's reading counts to the end
    # (20-40 s: 20 CPU s, 15 s idle)
    f.stop()
    assert f.result() == CoreUse(seconds=30.0, trainer_cores=1.0, idle_cores=0.667, cores=2)


def test_too_short_or_unreadable_gives_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    _scripted(monkeypatch, [(0.0, 0.0, 0), (0.2, 0.2, 10)])
    f = FreeCores()
    f.start()
    assert f.result() is None  # 0.2 s: a few ticks, not a measurement
    monkeypatch.setattr(freecores, "_proc_stat", lambda: None)
    g = FreeCores()
    g.start()
    assert g.result() is None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/stat is Linux's")
def test_a_real_reading_is_within_the_cores() -> None:
    f = FreeCores()
    f.start()
    end = time.thread_time() + 0.2  # CPU of this process, however loaded the machine is
    while time.thread_time() < end:
        pass
    time.sleep(0.4)
    got = f.result()
    assert got is not None
    cores = len(os.sched_getaffinity(0))
    assert got.cores == cores and got.seconds >= 0.6
    assert 0.0 < got.trainer_cores <= cores + 0.05 and 0.0 <= got.idle_cores <= cores


def test_gp601_keeps_the_cores_measured_for_its_what_if() -> None:
    rec = LoaderRecord(label="DataLoader#0", num_workers=0, pin_memory=False, persistent_workers=False,
                       batch_size=8, location=None, batches=100, fetch_s=0.5)
    use = CoreUse(seconds=30.0, trainer_cores=1.9, idle_cores=0.05, cores=2)
    (f,) = dataloader_findings([rec], total_step_s=1.0, num_steps=100, on_cuda=False, cores=2, local_world_size=1,
                               options=CheckOptions(), core_use=use)
    extra = f.evidence[0].extra
    assert f.code == "GP601"
    assert (extra["trainer_cpu_cores"], extra["idle_cores"], extra["cores_measured_s"]) == (1.9, 0.05, 30.0)
    (g,) = dataloader_findings([rec], total_step_s=1.0, num_steps=100, on_cuda=False, cores=2, local_world_size=1,
                               options=CheckOptions())
    assert "idle_cores" not in g.evidence[0].extra  # not measured: not said


@pytest.mark.slow
def test_a_capture_measures_the_cores_beside_the_trainer(tmp_path: Any) -> None:
    """End to end: a training loop whose loader runs in the process (GP601) under ``gpuprof.profile``: GP601's
    evidence carries the cores measured over the steps outside the recorded window (their values depend on the
    machine's load: only their bounds are asserted)."""
    torch = pytest.importorskip("torch")
    import gpuprof

    from .conftest import quick_schedule, tiny_model, train_step

    class Sleepy(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return 8 * 20

        def __getitem__(self, i: int) -> Any:
            time.sleep(0.01)  # loading that leaves the core idle (storage)
            return torch.randn(16), i % 4

    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with gpuprof.profile(tmp_path, schedule=quick_schedule(), analyze=False, print_report=False,
                         tensorboard=False) as prof:
        for x, y in torch.utils.data.DataLoader(Sleepy(), batch_size=8):
            train_step(model, opt, x, y)
            prof.step()
    f = next(f for f in prof.report.findings if f.code == "GP601")
    extra = f.evidence[0].extra
    cores = extra["cores"]
    assert isinstance(cores, int) and cores >= 1
    # 15 steps of at least 80 ms outside the window (steps 1-3 of 20 recorded)
    assert extra["cores_measured_s"] >= 1.0
    assert 0.0 < extra["trainer_cpu_cores"] <= cores + 0.05
    assert 0.0 <= extra["idle_cores"] <= cores


def test_the_measurement_ends_with_the_steps_and_resumes_a_step_after_a_window(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # first step at 0; ticks at 0.3 s (a reading) and 0.4 s (too soon: none); the window opens at 1 s and closes;
    # the step after it starts the span again at 5 s (the trace written in between is not the job's); the last
    # tick's reading at 6 s ends it, not the run's end at 9 s (its own export and analysis)
    clock = {"t": 0.0}
    _scripted(monkeypatch, [(0.0, 0.0, 0), (0.3, 0.3, 0), (1.0, 1.0, 0), (5.0, 9.0, 0), (6.0, 10.0, 100),
                            (9.0, 20.0, 100)])
    f = FreeCores()
    monkeypatch.setattr(freecores.time, "monotonic", lambda: clock["t"])
    f.start()
    clock["t"] = 0.3
    f.tick()
    clock["t"] = 0.4
    f.tick()  # no reading: the script's next one is the window's
    clock["t"] = 1.0
    f.stop()  # the window opens (1 s)
    f.start_next_step()  # and closes: nothing read until the next step ends
    clock["t"] = 5.0
    f.tick()  # 5 s: the span opens
    clock["t"] = 6.0
    f.tick()  # 6 s: a reading
    f.stop(at_last_tick=True)  # the end of the run: at the last tick, no new reading
    assert f.result() == CoreUse(seconds=2.0, trainer_cores=1.0, idle_cores=0.5, cores=2)

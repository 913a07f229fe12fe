"""The optimizer step clock, driven by hand: which optimizer's steps count, standing down, failing quietly.

A stand-in profiler records what the clock asks of it (no torch needed: the
clock only compares optimizers by identity)."""

from __future__ import annotations

import gc
from typing import Any

import pytest

from gpuprof.capture import active
from gpuprof.run.clock import OptimizerClock
from gpuprof.run.options import RunOptions


class FakeProfiler:
    def __init__(self, fail_at: int | None = None) -> None:
        self.calls: list[str] = []
        self.fail_at = fail_at
        self.steps = 0

    def start(self) -> None:
        self.calls.append("start")

    def step(self) -> None:
        self.steps += 1
        if self.steps == self.fail_at:
            raise RuntimeError("broken \x1b[2J")
        self.calls.append("step")

    def note(self, text: str) -> None:
        self.calls.append("note")

    def stop(self) -> str:
        self.calls.append("stop")
        return "result"

    def handle_error(self, exc: BaseException) -> None:
        self.calls.append(f"error:{type(exc).__name__}")


class Opt:
    """Any object: the clock tells optimizers apart by identity."""


def _clock(prof: FakeProfiler) -> OptimizerClock:
    return OptimizerClock(RunOptions(logdir="gpuprof_logs"), make=lambda: prof)  # type: ignore[arg-type,return-value]


@pytest.fixture(autouse=True)
def _no_atexit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("atexit.register", lambda *a, **k: None)
    monkeypatch.setattr("atexit.unregister", lambda *a, **k: None)


def test_only_the_first_optimizer_to_step_is_the_clock() -> None:
    prof = FakeProfiler()
    clock = _clock(prof)
    gen, disc = Opt(), Opt()
    for _ in range(4):  # a GAN: two optimizers step per iteration
        clock.on_optimizer_step(gen)
        clock.on_optimizer_step(disc)
    assert clock.steps == 4
    assert prof.calls == ["start", "note", "step", "step", "step"]  # the clock starts at the first step's end
    assert clock.finish() == "result" and clock.finish() == "result"  # idempotent
    assert prof.calls[-1] == "stop" and prof.calls.count("stop") == 1


def test_a_freed_first_optimizer_hands_the_clock_to_the_next() -> None:
    prof = FakeProfiler()
    clock = _clock(prof)
    first: Any = Opt()
    clock.on_optimizer_step(first)
    del first
    gc.collect()
    second = Opt()
    clock.on_optimizer_step(second)
    clock.on_optimizer_step(second)
    assert prof.calls == ["start", "note", "step", "step"]


def test_the_users_own_capture_makes_the_clock_stand_down(monkeypatch: pytest.MonkeyPatch) -> None:
    prof = FakeProfiler()
    clock = _clock(prof)
    monkeypatch.setattr(active, "owner", lambda: object())
    opt = Opt()
    clock.on_optimizer_step(opt)
    clock.on_optimizer_step(opt)
    assert prof.calls == [] and clock.off == "the script runs its own gpuprof capture"
    assert clock.finish() is None


def test_a_framework_stand_down_counts_nothing() -> None:
    prof = FakeProfiler()
    clock = _clock(prof)
    clock.stand_down("Lightning's Trainer drives the capture")
    clock.on_optimizer_step(Opt())
    assert prof.calls == [] and clock.steps == 0


def test_a_failure_is_one_line_the_capture_stops_and_training_goes_on(capsys: pytest.CaptureFixture[str]) -> None:
    prof = FakeProfiler(fail_at=2)
    clock = _clock(prof)
    opt = Opt()
    for _ in range(6):
        clock.on_optimizer_step(opt)  # never raises into the optimizer's step
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the optimizer step clock failed (RuntimeError" in err
    assert "\x1b" not in err  # the error's text made inert
    assert prof.calls == ["start", "note", "step", "stop"]  # stopped once, nothing after
    assert clock.off == "failed"


def test_an_uncaught_exception_reaches_the_running_capture_only() -> None:
    prof = FakeProfiler()
    clock = _clock(prof)
    clock.handle_error(ValueError())  # before the capture: nothing
    clock.on_optimizer_step(Opt())
    clock.handle_error(ValueError())
    clock.finish()
    clock.handle_error(ValueError())  # after: nothing
    assert prof.calls == ["start", "note", "error:ValueError", "stop"]

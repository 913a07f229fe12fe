"""The watch in a real capture (torch, CPU): phases of a planted slowdown, report.json's job, the views, threads."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import gpuprof  # noqa: E402
from gpuprof.capture.job import sampler as sampler_mod  # noqa: E402
from gpuprof.report import SCHEMA_VERSION  # noqa: E402

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
SCHEMA_DOC = REPO / "docs" / "report-schema.md"
SLOW_FROM = 150
STEPS = 300


def _train_step(model: Any, opt: Any, x: Any, y: Any) -> float:
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return float(loss.detach())


class _PlantedClock:
    """The session's step clock, fed planted step durations: a shared CI machine's scheduling noise (steps of
    3 ms taking 100 ms while other jobs run) must not decide whether the phases are found. ``sleep`` is the
    planted sleep: it moves this clock, and the real clock a little, so the job still runs in time."""

    def __init__(self) -> None:
        import random

        self.now = 1000.0
        self.rng = random.Random(5)

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds * (1 + 0.1 * self.rng.uniform(-1, 1))  # 10% noise, as a real loop has
        time.sleep(seconds / 10)


def _planted_run(logdir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    from gpuprof.capture import session

    clock = _PlantedClock()
    monkeypatch.setattr(session, "perf_counter", clock)
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 16), torch.randn(32, 4)
    # analyze=False: no trace analysis thread competing with the loop on a small CI machine
    # no anomaly window (gpuprof.capture.job.windows) inside the planted slowdown: the phases are this test's subject
    with gpuprof.profile(logdir=str(logdir), run="planted", analyze=False, print_report=False,
                         max_auto_windows=0) as prof:
        for i in range(STEPS):
            _train_step(model, opt, x, y)
            clock.sleep(0.003 if i < SLOW_FROM else 0.009)  # the planted slowdown
            prof.step()
    assert prof.result is not None and prof.result.run_dir is not None
    return Path(prof.result.run_dir)


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sampler_mod, "INTERVAL_S", 0.05)  # a few samples in a short test
        yield _planted_run(tmp_path_factory.mktemp("watch"), mp)


def _job(run_dir: Path) -> dict[str, Any]:
    doc = json.loads((run_dir / "report.json").read_text())
    assert doc["schema_version"] == SCHEMA_VERSION
    job = doc["job"]
    assert isinstance(job, dict)
    return job


def _phase_at(job: dict[str, Any], step: int) -> dict[str, Any]:
    return next(p for p in job["phases"] if p["start_step"] <= step <= p["end_step"])


def test_planted_slowdown_yields_steady_then_slowdown(planted: Path) -> None:
    job = _job(planted)
    assert job["steps"] == STEPS
    before, after = _phase_at(job, 100), _phase_at(job, 250)
    assert before["kind"] == "steady" and after["kind"] == "slowdown"
    assert abs(after["start_step"] - SLOW_FROM) <= 3, job["phases"]
    assert after["end_step"] == STEPS - 1
    # the recorded window's steps (the default schedule: steps 7-11) are a phase of their own
    assert _phase_at(job, 9)["kind"] == "recorded"
    # the figures are the steps' own: the series holds every step here (bucket 1)
    series = job["series"]
    assert series["bucket"] == 1 and len(series["step_time_us"]) == STEPS
    part = sorted(series["step_time_us"][after["start_step"]:after["end_step"] + 1])
    mid = len(part) // 2
    median = part[mid] if len(part) % 2 else (part[mid - 1] + part[mid]) / 2
    assert after["step_time_median_us"] == pytest.approx(median, rel=1e-6)
    assert after["step_time_median_us"] > 1.5 * before["step_time_median_us"]
    assert after["step_time_median_us"] == pytest.approx(9000, rel=0.05)  # the planted 9 ms
    assert before["step_time_median_us"] == pytest.approx(3000, rel=0.05)


def test_sampler_columns(planted: Path) -> None:
    s = _job(planted)["samples"]
    assert s is not None and len(s["step"]) >= 3
    assert s["step"] == sorted(s["step"]) and s["step"][-1] == STEPS
    assert all(v >= 0 for v in s["process_cpu_pct"])
    assert s["gpu_util_pct"] is None  # no CUDA: the NVML columns are null
    assert _job(planted)["cores"] == len(os.sched_getaffinity(0))


def test_job_keys_are_the_documented_ones(planted: Path) -> None:
    documented = {m.group(1) for line in SCHEMA_DOC.read_text().splitlines()
                  if (m := re.match(r"^\|\s*`(job[^`]*)`\s*\|", line))}

    def paths(obj: Any, prefix: str) -> set[str]:
        out = {prefix}
        if isinstance(obj, dict):
            for k, v in obj.items():
                out |= paths(v, f"{prefix}.{k}")
        elif isinstance(obj, list):
            for v in obj:
                out |= {p for p in paths(v, prefix + "[]") if p != prefix + "[]"}
        return out

    found = paths(_job(planted), "job")
    assert found <= documented, sorted(found - documented)


def test_views_show_the_job_without_torch(planted: Path, tmp_path: Path) -> None:
    """`gpuprof analyze RUN_DIR` reads the job from report.json and shows it in every view; torch is never imported."""
    html = tmp_path / "page.html"
    code = ("import sys; sys.modules['torch'] = None\n"  # any import of torch now fails
            "from gpuprof.cli import main\n"
            "main(sys.argv[1:])")
    env = dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="160")
    outs = {}
    for fmt in ("terminal", "markdown"):
        extra = ["--html", str(html)] if fmt == "terminal" else []
        p = subprocess.run([sys.executable, "-c", code, "analyze", str(planted), "--format", fmt, "--fail-on", "never",
                            *extra], capture_output=True, text=True, env=env, timeout=120)
        assert p.returncode == 0, p.stderr
        outs[fmt] = p.stdout
    assert "Job: 300 steps watched" in outs["terminal"] and "slowdown" in outs["terminal"]
    assert "## Job: 300 steps watched" in outs["markdown"]
    assert re.search(r"\| slowdown \| 1[45]\d-299 \|", outs["markdown"]), outs["markdown"]
    page = html.read_text()
    data = json.loads(re.search(r'<script id="data" type="application/json">(.*?)</script>', page, re.S).group(1)
                      .replace("<\\/", "</"))
    assert data["job"]["steps"] == STEPS and "GP.jobChart" in page


def test_tensorboard_scalars_hold_the_samples(planted: Path) -> None:
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(planted))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert "gpuprof/step_time_ms" in tags and "gpuprof/cpu_process_pct" in tags
    cpu = acc.Scalars("gpuprof/cpu_process_pct")
    assert cpu and all(0 <= e.step < STEPS for e in cpu)


def _losses(watch: bool | None, logdir: Path) -> list[float]:
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(1)
    data = TensorDataset(torch.randn(256, 16), torch.randn(256, 4))
    loader = DataLoader(data, batch_size=16, shuffle=True)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    out: list[float] = []
    if watch is None:  # without gpuprof
        for x, y in loader:
            out.append(_train_step(model, opt, x, y))
        return out
    with gpuprof.profile(logdir=str(logdir), watch=watch, print_report=False, analyze=False, tensorboard=False) as prof:
        for x, y in loader:
            out.append(_train_step(model, opt, x, y))
            prof.step()
    return out


def test_losses_bit_identical_with_the_watch_on_and_off(tmp_path: Path) -> None:
    on, off, bare = _losses(True, tmp_path / "on"), _losses(False, tmp_path / "off"), _losses(None, tmp_path)
    assert on == off == bare and len(on) == 16
    assert json.loads(next((tmp_path / "off").rglob("report.json")).read_text())["job"] is None  # watch=False: no job


def test_sampler_thread_ends_with_the_capture(tmp_path: Path) -> None:
    def watching() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name == "gpuprof-watch"]

    assert not watching()
    with gpuprof.profile(logdir=str(tmp_path), print_report=False, analyze=False, tensorboard=False) as prof:
        prof.step()
        alive = watching()
        assert len(alive) == 1 and alive[0].daemon
    assert not watching() and not alive[0].is_alive()


class _Probe(torch.utils.data.Dataset):  # type: ignore[misc]
    """Each sample says whether the process that made it runs a gpuprof watch thread, and its pid."""

    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> Any:
        running = any(t.name == "gpuprof-watch" for t in threading.enumerate())
        time.sleep(0.05)
        return torch.tensor([float(running), float(os.getpid())])


@pytest.mark.skipif(sys.platform != "linux", reason="fork start method")
def test_forked_worker_does_not_run_the_sampler(tmp_path: Path) -> None:
    from torch.utils.data import DataLoader

    old = sampler_mod.INTERVAL_S
    sampler_mod.INTERVAL_S = 0.05
    try:
        loader = DataLoader(_Probe(), batch_size=1, num_workers=1, multiprocessing_context="fork")
        rows = []
        with gpuprof.profile(logdir=str(tmp_path), print_report=False, analyze=False, tensorboard=False) as prof:
            assert any(t.name == "gpuprof-watch" for t in threading.enumerate())  # the trainer runs it
            for batch in loader:
                rows.append(batch[0].tolist())
                prof.step()
    finally:
        sampler_mod.INTERVAL_S = old
    assert len(rows) == 8
    assert all(r[0] == 0.0 for r in rows)  # no worker ran the sampler
    assert all(int(r[1]) != os.getpid() for r in rows)  # the samples came from the forked worker
    job = json.loads(next(tmp_path.rglob("report.json")).read_text())["job"]
    assert max(w for w in job["samples"]["workers"] if w is not None) == 1  # the trainer's sampler saw the worker


def test_summary_names_the_phases(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The end-of-run summary says how many steps were watched and each phase with its median."""
    import io

    from gpuprof.capture import session

    clock = _PlantedClock()
    monkeypatch.setattr(session, "perf_counter", clock)
    out = io.StringIO()
    # no anomaly window inside the planted slowdown (windows are tested in test_windows/test_anomaly): whether the
    # detector may fire there depends on when the default window's report thread ends
    with gpuprof.profile(logdir=str(tmp_path), analyze=False, tensorboard=False, max_auto_windows=0) as prof:
        prof.stream = out
        for i in range(60):
            clock.sleep(0.002 if i < 30 else 0.006)
            prof.step()
            if i == 12:  # the steps while the window's report is analysed are gpuprof's own work (own_work)
                assert prof.wait_for_report(120)
    # beside other processes' load the end adds a host-contention note, and the summary is then printed whole,
    # wrapped at the terminal's width (continuations indented 4): the phases line is read unwrapped
    text = re.sub(r"\n {4}(?! )", " ", out.getvalue())
    line = next(x for x in text.splitlines() if x.startswith("gpuprof: watched 60 steps:"))
    assert line.count("steady ") >= 2 and "recorded 7-11" in line, line
    m = re.search(r"slowdown (29|30|31)-59 \(([56]\.\d\d) ms, (\d\.\d\d)x steady\)", line)
    assert m, line
    assert 2.4 <= float(m.group(3)) <= 3.6  # 6 ms against 2 ms, with the clock's 10% noise


def test_marked_evaluation_is_its_own_phase(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``prof.mark_eval()`` (what the Lightning and HF callbacks call) makes that step an ``eval`` phase, never
    a slowdown."""
    from gpuprof.capture import session

    clock = _PlantedClock()
    monkeypatch.setattr(session, "perf_counter", clock)
    with gpuprof.profile(logdir=str(tmp_path), analyze=False, tensorboard=False, print_report=False,
                         max_auto_windows=0) as prof:
        for i in range(80):
            clock.sleep(0.002)
            if i in (40, 41):  # two steps that each ran a validation loop before the next optimizer step
                prof.mark_eval()
                clock.sleep(0.2 if i == 40 else 0.0)
            prof.step()
    job = _job(Path(prof.result.run_dir))
    assert ("eval", 40, 41) in [(p["kind"], p["start_step"], p["end_step"]) for p in job["phases"]]
    assert not [p for p in job["phases"] if p["kind"] == "slowdown"]

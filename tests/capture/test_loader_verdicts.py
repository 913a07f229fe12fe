"""GP605-GP607: why the loop waits for a loader with workers, from the watch's CPU samples.

The pure verdict (:func:`gpuprof.capture.checks.loader.loaderverdicts.loader_verdicts`) against figures computed here
by hand, then real small loaders: a ``__getitem__`` that burns CPU against one that sleeps.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from gpuprof.capture.checks.loader.dataloader import LoaderRecord, dataloader_findings
from gpuprof.capture.checks.loader.loaderverdicts import loader_verdicts, worker_cpu
from gpuprof.capture.checks.loader.workerio import WorkerIoSamples
from gpuprof.capture.config import CheckOptions
from gpuprof.codes import get_spec
from gpuprof.report import JobSamples


def _rec(num_workers: int = 2, fetch_s: float = 3.0) -> LoaderRecord:
    return LoaderRecord(label="DataLoader(Images)", num_workers=num_workers, pin_memory=False,
                        persistent_workers=True, batch_size=32, location=None, batches=100, fetch_s=fetch_s)


def _samples(per_worker_used: list[float], per_worker_want: list[float] | None, workers: int = 2) -> JobSamples:
    n = len(per_worker_used)
    return JobSamples(step=list(range(n)), process_cpu_pct=[50.0] * n,
                      workers_cpu_pct=[u * workers for u in per_worker_used],
                      workers_demand_pct=[w * workers for w in per_worker_want] if per_worker_want else [None] * n,
                      workers=[workers] * n)


def _io(n: int, read_kib_s: float | None, wakeups_s: float | None, io_wait_pct: float | None = None,
        disk_kib_s: float | None = 0.0) -> WorkerIoSamples:
    return WorkerIoSamples(read_kib_s=[read_kib_s] * n, disk_read_kib_s=[disk_kib_s] * n,
                           io_wait_pct=[io_wait_pct] * n, wakeups_s=[wakeups_s] * n)


def _one(samples: JobSamples | None, cores: int, rec: LoaderRecord | None = None, lws: int = 1,
         io: WorkerIoSamples | None = None, on_cuda: bool = False) -> Any:
    out = loader_verdicts([rec or _rec()], samples, total_step_s=10.0, num_steps=100, cores=cores,
                          local_world_size=lws, options=CheckOptions(), io=io, on_cuda=on_cuda)
    assert len(out) <= 1
    return out[0] if out else None


def test_busy_workers_without_spare_cores_are_cpu_bound() -> None:
    f = _one(_samples([45.0, 50.0, 40.0], [95.0, 99.0, 97.0]), cores=3)  # 2 workers + the loop = 3 cores
    assert f.code == "GP605" and f.origin == "runtime" and get_spec("GP605") is not None
    ev = f.evidence[0]
    assert ev.metric == "per_worker_cpu_demand_pct" and ev.value == pytest.approx(97.0)
    assert ev.extra["per_worker_cpu_pct"] == pytest.approx(45.0) and ev.extra["cores"] == 3
    assert ev.extra["data_wait_share"] == pytest.approx(0.3)
    assert f.cost_us_per_step == pytest.approx(3.0 / 100 * 1e6) and f.cost_share == pytest.approx(0.3)
    assert "30%" in f.message and "97%" in f.message and "3 cores" in f.message


def test_busy_workers_with_spare_cores_are_too_few() -> None:
    f = _one(_samples([98.0] * 4, [100.0] * 4), cores=16)
    assert f.code == "GP607"
    assert "13 of them unused" in f.message  # 16 cores - 2 workers - 1 loop
    assert "num_workers to about 15" in f.advice
    two_ranks = _one(_samples([98.0] * 4, [100.0] * 4), cores=16, lws=2)  # 2x2 workers + 2 loops: 10 spare
    assert two_ranks.code == "GP607" and "10 of them unused" in two_ranks.message and "per rank" in two_ranks.advice


# _rec(): 100 batches of 32 samples over 10 s of steps: the loop takes 320 samples a second
IDLE = ([2.0, 3.0, 1.0], [4.0, 5.0, 3.0])


def test_idle_workers_that_read_wait_on_storage_or_the_network() -> None:
    # 640 KiB/s read by the workers at 320 samples/s: 2 KiB per sample, over loader_read_kib_per_sample (1 KiB)
    f = _one(_samples(*IDLE), cores=16, io=_io(3, read_kib_s=640.0, wakeups_s=400.0, disk_kib_s=320.0))
    assert f.code == "GP606" and "wait on storage or the network" in f.message
    assert "they read 2.0 KiB per sample (1.0 KiB from storage)" in f.message
    assert f.evidence[0].value == pytest.approx(4.0) and f.evidence[0].threshold == 30.0
    assert f.evidence[0].extra["read_kib_per_sample"] == pytest.approx(2.0)
    assert "Read faster" in f.advice
    # blocked on block I/O (delay accounting on) is evidence too, without reads read() counts (mmap)
    waits = _one(_samples(*IDLE), cores=16, io=_io(3, read_kib_s=0.0, wakeups_s=10.0, io_wait_pct=40.0))
    assert "blocked on I/O 20% of the time each" in waits.message and "storage or the network" in waits.message


def test_idle_workers_without_reads_are_never_storage() -> None:
    """The in-memory dataset that used to read as "storage or the network": no reads, few wake-ups."""
    handoff = _one(_samples(*IDLE), cores=16, io=_io(3, read_kib_s=1.0, wakeups_s=10.0))
    assert handoff.code == "GP606"
    for word in ("storage or the network", "GPU", "CUDA", "cuda"):
        assert word not in handoff.message and word not in handoff.advice
    assert "so not storage" in handoff.message and "wakes 0.03 times per sample" in handoff.message
    assert "hand-off from the worker processes" in handoff.message and "num_workers=0" in handoff.advice
    assert handoff.evidence[0].extra["wakeups_per_sample"] == pytest.approx(10 / 320, abs=1e-3)
    # no reads, but a wake-up per sample: __getitem__ blocks on what /proc does not count (recv, a lock, a sleep)
    blocked = _one(_samples(*IDLE), cores=16, io=_io(3, read_kib_s=1.0, wakeups_s=640.0))
    assert "wakes 2.0 times per sample: __getitem__ blocks" in blocked.message
    assert "storage or the network" not in blocked.message and "py-spy dump" in blocked.advice
    # wake-ups not read: no reads, so not storage, and no other cause named
    unknown = _one(_samples(*IDLE), cores=16, io=_io(3, read_kib_s=0.0, wakeups_s=None))
    assert unknown.message.endswith("so not storage; what else they wait on was not measured")
    # no I/O counters at all (no /proc; an older caller): the wait is measured, its cause is not named
    bare = _one(_samples(*IDLE), cores=16)
    assert bare.code == "GP606" and bare.message.endswith("what they wait on was not measured (no I/O counters on "
                                                          "this system)")


def test_cpu_bound_advice_speaks_of_a_gpu_only_with_cuda() -> None:
    busy = _samples([45.0, 50.0, 40.0], [95.0, 99.0, 97.0])
    cpu_only = _one(busy, cores=3)
    assert cpu_only.code == "GP605" and not any(w in cpu_only.advice for w in ("GPU", "cuda", "DALI"))
    assert "decode_jpeg(device='cuda')" in _one(busy, cores=3, on_cuda=True).advice


def test_gp601_advice_names_pinned_memory_only_with_cuda() -> None:
    from gpuprof.capture.checks.loader.loaderplace import num_workers_advice

    for framework in (None, "transformers", "lightning", "accelerate"):
        assert "CUDA" not in num_workers_advice(framework, on_cuda=False)
        assert "CUDA" in num_workers_advice(framework, on_cuda=True)
    rec = _rec(num_workers=0)
    (f,) = [f for f in dataloader_findings([rec], total_step_s=10.0, num_steps=100, on_cuda=False, cores=4,
                                           local_world_size=1, options=CheckOptions()) if f.code == "GP601"]
    assert "CUDA" not in f.advice and "pin_memory" not in f.advice


def test_without_demand_the_cpu_used_decides() -> None:
    f = _one(_samples([90.0, 92.0, 95.0], None), cores=3)
    assert f.code == "GP605" and f.evidence[0].metric == "per_worker_cpu_pct"
    assert f.evidence[0].value == pytest.approx(92.0)


def test_no_verdict_without_evidence() -> None:
    busy = _samples([99.0] * 3, [100.0] * 3)
    assert _one(None, cores=3) is None  # the watch is off
    assert _one(_samples([99.0] * 2, [100.0] * 2), cores=3) is None  # fewer than loader_min_samples
    assert _one(busy, cores=3, rec=_rec(fetch_s=0.1)) is None  # 1% of the step waiting: below loader_wait_share
    assert _one(busy, cores=3, rec=_rec(num_workers=0)) is None  # GP601's case
    assert _one(_samples([55.0] * 3, [60.0] * 3), cores=3) is None  # neither busy nor idle: no verdict


def test_worker_cpu_divides_by_the_loaders_workers() -> None:
    """An idle child that is not a worker (a compile pool) adds nothing to the sum: busy workers stay busy."""
    s = JobSamples(step=[1, 2, 3], process_cpu_pct=[10.0, 20.0, 30.0], workers_cpu_pct=[200.0, 190.0, 210.0],
                   workers_demand_pct=[None, None, None], workers=[6, 6, 6])  # 2 workers + 4 idle pool processes
    w = worker_cpu(s, 2)
    assert w is not None and w.per_worker_pct == pytest.approx(100.0) and w.per_worker_demand_pct is None
    assert w.process_cpu_pct == pytest.approx(statistics.median([10.0, 20.0, 30.0])) and w.workers_seen == 6
    early = JobSamples(step=[1], process_cpu_pct=[5.0], workers_cpu_pct=[80.0], workers_demand_pct=[90.0], workers=[1])
    assert worker_cpu(early, 4).per_worker_pct == pytest.approx(80.0)  # one of four started: divided by one


# ---------------------------------------------------------------------- real loaders


torch = pytest.importorskip("torch")


class _Burn(torch.utils.data.Dataset):  # type: ignore[misc]
    """A __getitem__ that decodes: 15 ms of pure CPU per sample."""

    def __len__(self) -> int:
        return 10_000

    def __getitem__(self, i: int) -> Any:
        t = time.thread_time()
        while time.thread_time() - t < 0.015:
            pass
        return torch.ones(4)


class _Sleep(torch.utils.data.Dataset):  # type: ignore[misc]
    """A __getitem__ that waits on storage: 15 ms asleep per sample."""

    def __len__(self) -> int:
        return 10_000

    def __getitem__(self, i: int) -> Any:
        time.sleep(0.015)
        return torch.ones(4)


class _Read(torch.utils.data.Dataset):  # type: ignore[misc]
    """A __getitem__ that reads its sample from a file: 64 KiB read(), then 15 ms asleep (the storage's latency)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __len__(self) -> int:
        return 10_000

    def __getitem__(self, i: int) -> Any:
        with open(self.path, "rb") as fh:
            data = fh.read()
        time.sleep(0.015)
        return torch.tensor([len(data)])


def _run(dataset: Any, logdir: Path, monkeypatch: pytest.MonkeyPatch) -> set[str]:
    return {f.code for f in _findings(dataset, logdir, monkeypatch)}


def _findings(dataset: Any, logdir: Path, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    import gpuprof
    from gpuprof.capture.checks.loader import dataloader as dl
    from gpuprof.capture.job import sampler

    monkeypatch.setattr(sampler, "INTERVAL_S", 0.1)
    monkeypatch.setattr(dl, "available_cores", lambda: 2)  # one worker + the loop fill the cores: no spare one
    loader = torch.utils.data.DataLoader(dataset, batch_size=2, num_workers=1, persistent_workers=True)
    with gpuprof.profile(logdir=str(logdir), print_report=False, analyze=False, tensorboard=False,
                         options={"GP605.loader_min_samples": 3}) as prof:
        for i, _ in enumerate(loader):
            if i >= 40:  # ~1.2 s: a dozen samples
                break
            prof.step()
    assert prof.result is not None
    return list(prof.result.runtime_findings)


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="worker CPU is read from /proc")
def test_real_cpu_bound_loader_is_gp605(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    codes = _run(_Burn(), tmp_path, monkeypatch)
    assert "GP605" in codes and not codes & {"GP606", "GP607"}


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="worker CPU is read from /proc")
def test_real_sleeping_loader_is_gp606_and_never_storage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Idle workers that read nothing: GP606 without "storage or the network" (the finding used to say it);
    each sample's sleep wakes the worker once, so the verdict is a wait inside __getitem__ that /proc does not
    count."""
    (f,) = [f for f in _findings(_Sleep(), tmp_path, monkeypatch) if f.code in ("GP605", "GP606", "GP607")]
    assert f.code == "GP606" and "storage or the network" not in f.message, f.message
    assert "so not storage" in f.message and "__getitem__ blocks" in f.message, f.message
    assert f.evidence[0].extra["read_kib_per_sample"] < 1.0
    assert f.evidence[0].extra["wakeups_per_sample"] >= 0.5  # one sleep per sample: at least one wake-up each
    assert "GPU" not in f.advice and "cuda" not in f.advice.lower()


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="worker I/O is read from /proc")
def test_real_reading_loader_is_gp606_storage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same waits, but each sample is read from a file (64 KiB): the workers' reads are the evidence."""
    sample = tmp_path / "sample.bin"
    sample.write_bytes(b"x" * 65536)
    (f,) = [f for f in _findings(_Read(sample), tmp_path / "logs", monkeypatch)
            if f.code in ("GP605", "GP606", "GP607")]
    assert f.code == "GP606" and "wait on storage or the network" in f.message, f.message
    # 64 KiB per sample read by the worker: rchar counts them (page cache or not); bounded below by the file
    assert f.evidence[0].extra["read_kib_per_sample"] >= 32.0

"""GP605-GP607: why the loop waits for a loader with workers, from the watch's CPU samples.

The pure verdict (:func:`gpuprof.capture.loaderverdicts.loader_verdicts`) against figures computed here by hand,
then real small loaders: a ``__getitem__`` that burns CPU against one that sleeps.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from gpuprof.capture.config import CheckOptions
from gpuprof.capture.dataloader import LoaderRecord
from gpuprof.capture.loaderverdicts import loader_verdicts, worker_cpu
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


def _one(samples: JobSamples | None, cores: int, rec: LoaderRecord | None = None, lws: int = 1) -> Any:
    out = loader_verdicts([rec or _rec()], samples, total_step_s=10.0, num_steps=100, cores=cores,
                          local_world_size=lws, options=CheckOptions())
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


def test_idle_workers_wait_on_storage() -> None:
    f = _one(_samples([2.0, 3.0, 1.0], [4.0, 5.0, 3.0]), cores=16)
    assert f.code == "GP606" and "storage or the network" in f.message
    assert f.evidence[0].value == pytest.approx(4.0) and f.evidence[0].threshold == 30.0


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


def _run(dataset: Any, logdir: Path, monkeypatch: pytest.MonkeyPatch) -> set[str]:
    import gpuprof
    from gpuprof.capture import dataloader as dl
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
    return {f.code for f in prof.result.runtime_findings}


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="worker CPU is read from /proc")
def test_real_cpu_bound_loader_is_gp605(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    codes = _run(_Burn(), tmp_path, monkeypatch)
    assert "GP605" in codes and not codes & {"GP606", "GP607"}


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="worker CPU is read from /proc")
def test_real_sleeping_loader_is_gp606(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    codes = _run(_Sleep(), tmp_path, monkeypatch)
    assert "GP606" in codes and not codes & {"GP605", "GP607"}

"""Fixtures for the memory tests: planted snapshots built with gpuprof_testing.snapshots, and real traces."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuprof_testing.realtraces import shared_path
from gpuprof_testing.snapshots import GiB, MiB, SnapshotBuilder


def real_trace(rel: str) -> Path:
    """A real trace under the shared traces (``GPUPROF_SHARED_TRACES``), or skip the test with the reason."""
    return shared_path(*rel.split("/"))


CPU_TRACE = "tbplugin/generated_cpu_torch2.13/tiny_cpu_nw0/cpuworker.1795297193849114643.pt.trace.json.gz"
V100_2021 = "tbplugin/samples/resnet50_num_workers_0/worker0.1623143566756.pt.trace.json.gz"
V100_TOTALS = "hta/HolisticTraceAnalysis/tests/data/df_index_resolver/df_index_resolver.json.gz"


def train_steps(b: SnapshotBuilder, steps: int, leak_every_step: bool) -> None:
    """A training loop: activations allocated in forward and freed after backward; optionally a leak."""
    act = b.stack(("/home/u/proj/model.py", 30, "forward"), ("/home/u/proj/train.py", 50, "main"))
    grad = b.stack(("/home/u/proj/train.py", 55, "main"))
    leak = b.stack(("/home/u/proj/train.py", 61, "main"))
    for _ in range(steps):
        xs = [b.alloc(6 * MiB, act) for _ in range(8)]
        g = b.alloc(3 * MiB, grad)
        for x in xs:
            b.free(x)
        b.free(g)
        if leak_every_step:
            b.alloc(2 * MiB, leak)  # e.g. losses.append(loss) keeping the graph alive


def model_weights(b: SnapshotBuilder) -> list[int]:
    w = b.stack(("/home/u/proj/model.py", 12, "__init__"), ("/home/u/proj/train.py", 20, "main"))
    return [b.alloc(40 * MiB, w) for _ in range(4)]


@pytest.fixture
def clean_snapshot(tmp_path: Path) -> Path:
    b = SnapshotBuilder(device_memory=16 * GiB)
    model_weights(b)
    train_steps(b, 5, leak_every_step=False)
    return Path(b.dump(tmp_path / "clean.pickle"))


@pytest.fixture
def leak_pair(tmp_path: Path) -> tuple[Path, Path]:
    b = SnapshotBuilder(device_memory=16 * GiB)
    model_weights(b)
    train_steps(b, 3, leak_every_step=True)
    a = Path(b.dump(tmp_path / "before.pickle"))
    train_steps(b, 12, leak_every_step=True)
    return a, Path(b.dump(tmp_path / "after.pickle"))


def build_fragmented_oom() -> SnapshotBuilder:
    """1 GiB device: 160 MiB of weights, 120 x 6 MiB activations in 20 MiB segments, every other one freed,
    then a 100 MiB request: 440 MiB is free inside the reserved segments but in pieces of at most 8 MiB,
    and only 64 MiB is left on the device."""
    b = SnapshotBuilder(device_memory=1 * GiB)
    model_weights(b)
    act = b.stack(("/home/u/proj/model.py", 30, "forward"), ("/home/u/proj/train.py", 50, "main"))
    big = b.stack(("/home/u/proj/model.py", 44, "attention"), ("/home/u/proj/train.py", 50, "main"))
    xs = [b.alloc(6 * MiB, act) for _ in range(120)]
    for x in xs[::2]:
        b.free(x)
    with pytest.raises(MemoryError):
        b.alloc(100 * MiB, big)
    return b


@pytest.fixture
def oom_snapshot(tmp_path: Path) -> Path:
    return Path(build_fragmented_oom().dump(tmp_path / "oom.pickle"))

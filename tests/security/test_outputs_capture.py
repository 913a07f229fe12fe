"""Capture writes its files safely in a shared logdir, and a write failure is one warning, never an exception."""

from __future__ import annotations

import errno
import os
import warnings
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import gpuprof  # noqa: E402
import gpuprof.capture.end.publish as summary  # noqa: E402
from gpuprof.capture import GpuprofWarning, Schedule  # noqa: E402

PREVIOUS = b"a file of another user, which must survive\n"
STEPS = 6


def _run(logdir: Path, run: str) -> tuple[int, list[warnings.WarningMessage]]:
    model = torch.nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    done = 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with gpuprof.profile(logdir, run=run, schedule=Schedule(wait=1, warmup=1, active=2), tensorboard=False,
                             print_report=False) as prof:
            for _ in range(STEPS):
                loss = model(torch.randn(4, 8)).sum()
                opt.zero_grad()
                loss.backward()
                opt.step()
                prof.step()
                done += 1
    return done, [w for w in caught if issubclass(w.category, GpuprofWarning)]


def test_planted_symlinks_in_a_shared_logdir_are_not_written_through(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(PREVIOUS)
    rdir = tmp_path / "logs" / "shared"
    rdir.mkdir(parents=True)
    # what another user of the logdir could plant: the old fixed temporary names, and the report itself
    for name in ("report.json.tmp", "report.md.tmp", "report.json"):
        (rdir / name).symlink_to(victim)
    done, ours = _run(tmp_path / "logs", "shared")
    # a run directory that exists is never written into (issue 37: no mix of two runs): one warning, a new directory
    assert done == STEPS and len(ours) == 1 and "exists" in str(ours[0].message)
    assert victim.read_bytes() == PREVIOUS
    assert all((rdir / n).is_symlink() for n in ("report.json.tmp", "report.md.tmp", "report.json"))  # left alone
    new = tmp_path / "logs" / "shared-2"
    assert not (new / "report.json").is_symlink() and (new / "report.json").read_text().startswith("{")
    assert (new / "report.md").read_text().startswith("#")
    assert not [p for p in os.listdir(new) if p.startswith(".")]  # no temporary file left behind


def test_full_disk_writing_the_reports_is_one_warning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def full(path: Any, data: Any, suffix: str = "") -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(summary, "atomic_write", full)
    done, ours = _run(tmp_path, "full")
    assert done == STEPS
    assert len(ours) == 1, [str(w.message) for w in ours]
    msg = str(ours[0].message)
    assert "report writer failed" in msg and "No space left on device" in msg and "Training continues" in msg
    assert not (tmp_path / "full" / "report.json").exists()

"""A run name that exists gets a new directory, never a mix of two runs (issue 37; gpuprof.capture.paths)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpuprof.capture.guard import GpuprofWarning
from gpuprof.capture.paths import RankInfo, RunPaths

ONE = RankInfo(None, None, None, None)


def _two_ranks(rank: int) -> RankInfo:
    return RankInfo(rank, rank, 2, 2)


def test_a_single_process_run_name_that_exists_gets_a_new_directory(tmp_path: Path) -> None:
    first = RunPaths.make(tmp_path, "first", ONE)
    first.create()
    (first.run_dir / "old.pt.trace.json.gz").write_bytes(b"x")
    with pytest.warns(GpuprofWarning, match="exists"):
        second = RunPaths.make(tmp_path, "first", ONE)
    assert second.run_dir == tmp_path / "first-2" and second.run_dir != first.run_dir
    assert not second.run_dir.exists() or not any(second.run_dir.glob("*.pt.trace.json*"))


def test_ranks_of_one_job_share_a_directory_and_a_second_job_gets_its_own(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job-a")
    a0, a1 = RunPaths.make(tmp_path, "ddp", _two_ranks(0)), RunPaths.make(tmp_path, "ddp", _two_ranks(1))
    assert a0.run_dir == a1.run_dir == tmp_path / "ddp" and a0.out_dir != a1.out_dir
    a0.create()
    a1.create()
    # the same example run again: another job, so neither rank writes into the first job's directory
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job-b")
    with pytest.warns(GpuprofWarning):
        b0 = RunPaths.make(tmp_path, "ddp", _two_ranks(0))
    with pytest.warns(GpuprofWarning):
        b1 = RunPaths.make(tmp_path, "ddp", _two_ranks(1))
    assert b0.run_dir == b1.run_dir == tmp_path / "ddp-job-b"
    # and a rank of the first job that starts late still finds its own job's directory
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job-a")
    assert RunPaths.make(tmp_path, "ddp", _two_ranks(1)).run_dir == tmp_path / "ddp"


def test_a_planted_job_marker_link_is_not_followed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job-a")
    (tmp_path / "ddp").mkdir()
    secret = tmp_path / "secret"
    secret.write_text("job-a")
    os.symlink(secret, tmp_path / "ddp" / ".gpuprof-job")  # says "job-a" through a link: not trusted
    with pytest.warns(GpuprofWarning):
        p = RunPaths.make(tmp_path, "ddp", _two_ranks(0))
    assert p.run_dir == tmp_path / "ddp-job-a" and secret.read_text() == "job-a"

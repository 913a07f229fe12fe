"""Zero-code parity (issue 41, item 6): what ``gpuprof.profile_step`` explains, ``gpuprof run`` explains too.

An error before the first optimizer step (a device or dtype mismatch in the first forward) gets, after the
user's traceback (character for character Python's), the decorator's codes (GP612/GP613, GP614), in the summary
and the run directory's report.json; the exit code is the script's. Slow: each test starts torch in fresh
processes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import SCRIPTS, bare, codes, gpuprof_run, report, user_part

pytest.importorskip("torch")
pytestmark = pytest.mark.slow

EARLY = str(SCRIPTS / "early_error.py")


def _after_traceback(stderr: str, user: str) -> str:
    assert stderr.startswith(user)
    return stderr[len(user):]


def test_a_device_mismatch_before_the_first_step_is_explained_after_the_traceback(tmp_path: Path) -> None:
    without = bare(EARLY, "device", cwd=tmp_path)
    with_ = gpuprof_run("--logdir", "logs", "--run-name", "dev", EARLY, "device", cwd=tmp_path)
    assert without.returncode == with_.returncode == 1
    assert "RuntimeError: Tensor on device cpu is not on the expected device meta!" in without.stderr
    assert user_part(with_.stderr) == without.stderr  # the traceback as Python prints it without gpuprof
    ours = _after_traceback(with_.stderr, without.stderr)
    assert "error GP612 module `Net.encoder.0` (Linear) has parameter `weight` (128, 64) on cpu but received " \
           "input 0 (32, 64) on" in ours
    assert "error GP613 the step raised a device-mismatch error in module `Net.encoder.0`" in ours
    rep = report(tmp_path / "logs" / "dev")
    assert {"GP612", "GP613"} <= codes(rep)
    gp612 = next(f for f in rep["findings"] if f["code"] == "GP612")
    assert gp612["location"]["file"].endswith("early_error.py")
    assert any("raised before its first optimizer step" in n for n in rep["notes"])


def test_a_dtype_mismatch_before_the_first_step_is_gp614(tmp_path: Path) -> None:
    without = bare(EARLY, "dtype", cwd=tmp_path)
    with_ = gpuprof_run("--logdir", "logs", "--run-name", "dt", EARLY, "dtype", cwd=tmp_path)
    assert without.returncode == with_.returncode == 1
    assert user_part(with_.stderr) == without.stderr
    ours = _after_traceback(with_.stderr, without.stderr)
    assert "GP614" in ours and "Net.encoder.0" in ours
    assert "GP614" in codes(report(tmp_path / "logs" / "dt"))


def test_an_error_gpuprof_cannot_explain_leaves_nothing(tmp_path: Path) -> None:
    without = bare(EARLY, "other", cwd=tmp_path)
    with_ = gpuprof_run("--logdir", "logs", EARLY, "other", cwd=tmp_path)
    assert without.returncode == with_.returncode == 1
    assert "FileNotFoundError" in without.stderr
    assert user_part(with_.stderr) == without.stderr
    assert "GP61" not in with_.stderr and not (tmp_path / "logs").exists()

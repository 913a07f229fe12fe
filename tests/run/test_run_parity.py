"""Zero-code parity (issue 41, item 6): what ``gpuprof.profile_step`` explains, ``gpuprof run`` explains too,
and ``--step-function`` reaches any function of the script.

An error before the first optimizer step (a device or dtype mismatch in the first forward) gets, after the
user's traceback (character for character Python's), the decorator's codes (GP612/GP613, GP614), in the summary
and the run directory's report.json; the exit code is the script's. Slow: each test starts torch in fresh
processes.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from .conftest import SCRIPTS, bare, codes, gpuprof_run, report, run_env, user_part

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


CLASSY = str(SCRIPTS / "classy_loop.py")


@pytest.mark.parametrize("spec", ["__main__:infer_step", "classy_loop:infer_step", "CLASSY:infer_step",
                                  "__main__:Model.forward", "__main__:main.nested_step",
                                  "__main__:main.<locals>.nested_step", "__main__:nested_step",
                                  "CLASSY:main.nested_step"])
def test_step_function_any_function_of_the_script(tmp_path: Path, spec: str) -> None:
    """Classes, a dataclass and a helper call above the function (the former watch gave up on each of them), a
    function defined in main(), and the file form; each call is one step, the output is the script's."""
    spec = spec.replace("CLASSY", CLASSY)
    without = bare(CLASSY, "7", cwd=tmp_path)
    proc = gpuprof_run("--logdir", "logs", "--run-name", "r", "--step-function", spec, CLASSY, "7", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == without.stdout and proc.stdout.count("out") == 7
    rep = report(tmp_path / "logs" / "r")
    assert next(s for s in rep["sections"] if s.get("kind") == "capture")["steps"] == 7


def test_step_function_file_form_of_an_imported_module_and_a_missing_function(tmp_path: Path) -> None:
    infer = SCRIPTS / "infer_loop.py"
    env = run_env(PYTHONPATH=os.pathsep.join([str(SCRIPTS), run_env()["PYTHONPATH"]]))
    proc = gpuprof_run("--logdir", "logs", "--run-name", "imported", "--step-function", f"{infer}:infer_step", "--",
                       sys.executable, "-c", "import infer_loop; infer_loop.main()", cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    rep = report(tmp_path / "logs" / "imported")
    assert next(s for s in rep["sections"] if s.get("kind") == "capture")["steps"] == 14
    missing = gpuprof_run("--logdir", "logs", "--step-function", "__main__:nope", CLASSY, "3", cwd=tmp_path)
    assert missing.returncode == 0 and missing.stdout.count("out") == 3
    assert ("gpuprof run: --step-function __main__:nope: the script defines no function 'nope'; nothing is "
            "profiled.") in missing.stderr

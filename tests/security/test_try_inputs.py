"""``gpuprof try``'s inputs: the names and values on its command line (``--set``, ``--variants``, ``--run-name``,
the script) and the trial's options in ``GPUPROF_RUN_CONFIG``. Bad ones are exit 2 in one inert line, before any
trial starts and before anything is written. Fast: nothing here imports torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuprof.run.options import RunOptions, TrialOptions, TrialSettings

REPO = Path(__file__).resolve().parents[2]
HOSTILE = "x\x1b[2J\u202e\x07\n"


def _try(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("GPUPROF_RUN_CONFIG", None)
    return subprocess.run([sys.executable, "-m", "gpuprof", "try", "--logdir", "L", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("args", [
    ["--set", f"{HOSTILE}=1", "t.py"],
    ["--set", f"matmul_precision={HOSTILE}", "t.py"],
    ["--variants", HOSTILE, "t.py"],
    [f"{HOSTILE}.py"],
    ["--", f"prog{HOSTILE}"],
])
def test_hostile_names_are_one_inert_line_and_exit_2(tmp_path: Path, args: list[str]) -> None:
    (tmp_path / "t.py").write_text("raise SystemExit('never run')\n")
    proc = _try(*args, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not any(c in proc.stderr for c in "\x1b\u202e\x07"), proc.stderr
    assert not (tmp_path / "L").exists()


@pytest.mark.parametrize("name", ["../up", "a/b", "..", ".", "x\x1b", "/abs", "a" * 200])
def test_a_run_name_cannot_leave_the_logdir(tmp_path: Path, name: str) -> None:
    (tmp_path / "t.py").write_text("pass\n")
    proc = _try("--run-name", name, "t.py", cwd=tmp_path)
    assert proc.returncode == 2 and "--run-name" in proc.stderr
    assert "\x1b" not in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.py"]


@pytest.mark.parametrize(("field", "value"), [
    ("num_workers", 10**9), ("num_workers", "2"), ("prefetch_factor", 0), ("matmul_precision", "rm -rf"),
    ("pin_memory", "yes"), ("unknown_setting", 1),
])
def test_a_hostile_trial_payload_is_refused_naming_the_field(field: str, value: object) -> None:
    doc = json.loads(RunOptions(logdir="d", trial=TrialOptions(result="/r.json", settings=TrialSettings())).to_env())
    doc["trial"]["settings"][field] = value
    with pytest.raises(ValueError) as err:
        RunOptions.from_env(json.dumps(doc))
    assert field in str(err.value) and "\n" not in str(err.value)


def test_a_trial_payload_needs_a_result_path_and_positive_steps() -> None:
    for trial in ({"result": ""}, {"result": "/r", "steps": 0}, {"result": "/r", "warmup": -1}, {"steps": 3}):
        with pytest.raises(ValueError, match=r"\$\.trial|trial"):
            RunOptions.from_env(json.dumps({"logdir": "d", "trial": trial}))

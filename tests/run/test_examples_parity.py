"""Zero-code parity on the pitfall examples (issue 41, item 6): what the decorator path catches on a script,
``gpuprof run`` catches on the same script with no gpuprof line.

Each pitfall example (examples/, the "Pathology:" scripts that tests/capture/test_examples.py checks) runs twice
side by side: as written (``gpuprof.profile``/``profile_step`` in the script), and as the plain script a user
without gpuprof would write (``GPUPROF_EXAMPLE_PLAIN=1``: examples/common.py turns the example's own gpuprof
lines off) under ``gpuprof run``, with the optimizer step clock, or ``--step-function`` where the example steps
no optimizer. The pitfall codes the decorator path reports must all be in ``run``'s report. Slow: two
training processes per example.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO, run_env

pytest.importorskip("torch")
pytestmark = pytest.mark.slow

EXAMPLES = REPO / "examples"
# example -> the --step-function gpuprof run needs (None: the optimizer clock)
CASES: dict[str, str | None] = {
    "dataloader_workers.py": None,
    "memory_leak.py": None,
    "device_mismatch.py": None,
    "step_habits.py": None,
    "eval_without_no_grad.py": "__main__:main.eval_step",  # no optimizer: its eval step, defined in main()
    "sampler_epoch.py": None,
    "dtype_mismatch.py": None,
    "debug_settings.py": None,
}
# the pitfalls' own codes (tests/capture/test_examples.py): runtime checks and step-habit rules, none a timing
PITFALLS = {"GP601", "GP610", "GP611", "GP612", "GP613", "GP614", "GP623", "GP624", "GP640", "GP712", "GP840",
            "GP841", "GP843"}
ARGS = ("--device", "cpu", "--steps", "20")


def _codes(run_dir: Path, proc: subprocess.CompletedProcess[str]) -> set[str]:
    path = run_dir / "report.json"
    assert path.is_file(), proc.stderr[-3000:]
    return {f["code"] for f in json.loads(path.read_text())["findings"]}


# the one gap, kept visible (strict: the day run catches it, this test says so): the dtype example catches its own
# RuntimeError (except RuntimeError: print, return 1), so gpuprof run sees no uncaught exception and no optimizer
# step; only a hook on every module call before the first step could see it, and that would change every user's
# traceback (torch's hooked call path)
GAP = pytest.mark.xfail(strict=True, reason="an error the script catches itself before its first optimizer step")


@pytest.mark.parametrize("script", [pytest.param(s, marks=GAP) if s == "dtype_mismatch.py" else s for s in sorted(CASES)])
def test_run_catches_what_the_decorator_catches(script: str, tmp_path: Path) -> None:
    env = dict(run_env(), PYTHONWARNINGS="ignore")
    decorated = subprocess.Popen([sys.executable, str(EXAMPLES / script), "--logdir", str(tmp_path / "dec"),
                                  "--run-name", "r", *ARGS], cwd=EXAMPLES, env=env, text=True,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    spec = CASES[script]
    plain = subprocess.Popen([sys.executable, "-m", "gpuprof", "run", "--logdir", str(tmp_path / "run"), "--run-name",
                              "r", *(("--step-function", spec) if spec else ()), str(EXAMPLES / script),
                              "--logdir", str(tmp_path / "unused"), *ARGS], cwd=EXAMPLES,
                             env=dict(env, GPUPROF_EXAMPLE_PLAIN="1"), text=True, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
    done = []
    try:
        for p in (decorated, plain):
            out, err = p.communicate(timeout=300)
            done.append(subprocess.CompletedProcess(p.args, p.returncode, out, err))
    finally:
        for p in (decorated, plain):
            if p.poll() is None:
                p.kill()
                p.communicate()
    dec_codes = _codes(tmp_path / "dec" / "r", done[0])
    run_codes = _codes(tmp_path / "run" / "r", done[1])
    assert not (tmp_path / "unused").exists()  # the plain script wrote nothing of its own: run's capture did
    wanted = dec_codes & PITFALLS
    assert wanted, (script, dec_codes)  # the decorator path found its pitfall (tests/capture/test_examples.py)
    assert wanted <= run_codes, (script, sorted(wanted - run_codes), done[1].stderr[-3000:])

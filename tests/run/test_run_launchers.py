"""``gpuprof run`` beside other launchers' ``sitecustomize`` (docs/run.md, "Other launchers").

A tool that chains the usual way (ddtrace-run's: drop its own folder from
``sys.path`` and ``sys.modules["sitecustomize"]``, import ``sitecustomize``
again) loads gpuprof's bootstrap a second time when it comes after gpuprof's on
``PYTHONPATH``; before the fix that made two import finders which each asked
the other, and the user's script died at ``import torch`` (RecursionError,
exit 1 where plain Python exits 0). Each case runs the same script plainly and
under ``gpuprof run`` and compares exit code, stdout and the script's stderr.

The fast cases watch ``transformers.trainer`` (a module the bootstrap hooks,
here a stand-in beside the script: no torch, no transformers); the slow ones
import torch and train.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gpuprof.run.launch import SITE_DIR

from .conftest import REPO, TIMEOUT_S, run_env, user_part

#: ddtrace's bootstrap/sitecustomize.py, the chaining part, as written there
CHAINING = textwrap.dedent("""
    import os, sys
    _here = os.path.dirname(os.path.abspath(__file__))
    if _here in sys.path:
        _index = sys.path.index(_here)
        del sys.path[_index]
        _mine = sys.modules["sitecustomize"]
        del sys.modules["sitecustomize"]
        try:
            import sitecustomize  # noqa: F401
        except ImportError:
            sys.modules["sitecustomize"] = _mine
        finally:
            sys.path.insert(_index, _here)
    if sys.orig_argv[1:3] != ["-m", "gpuprof"]:  # the job's process (gpuprof run's own loads it too)
        print("their sitecustomize ran", flush=True)
""")

#: what the script reports about the process, to a file (its stdout is compared with the plain run's)
PROBE = textwrap.dedent("""
    import json, sys
    def probe(path):
        ours = [f for f in sys.meta_path if getattr(f, "GPUPROF_POST_IMPORT", False) is True]
        with open(path, "w") as f:
            json.dump({"bootstrap": "gpuprof.run.bootstrap" in sys.modules, "finders": len(ours)}, f)
""")

FAST_SCRIPT = PROBE + textwrap.dedent("""
    import os
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the stand-in, also under -I
    try:
        import transformers.trainer
        print("imported", transformers.trainer.VALUE)
    finally:
        probe(sys.argv[1])
""")

TORCH_SCRIPT = PROBE + textwrap.dedent("""
    try:
        import torch
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(3):
            opt.zero_grad()
            model(torch.ones(8, 4)).sum().backward()
            opt.step()
        print("trained", round(float(model.weight.sum()), 4))
    finally:
        probe(sys.argv[1])
""")


def _job(tmp_path: Path, script: str, *, theirs: str, usercustomize: bool) -> tuple[Path, dict[str, str]]:
    """The script (and the watched stand-in), their sitecustomize and a user base in ``tmp_path``; the base
    environment of both runs."""
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "train.py").write_text(script)
    pkg = tmp_path / "job" / "transformers"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "trainer.py").write_text("VALUE = 42\n")
    (tmp_path / "theirs").mkdir()
    (tmp_path / "theirs" / "sitecustomize.py").write_text(CHAINING)
    env = run_env(PYTHONUSERBASE=str(tmp_path / "userbase"))
    env.pop("PYTHONNOUSERSITE", None)
    if usercustomize:
        site = subprocess.run([sys.executable, "-c", "import site; print(site.getusersitepackages())"],
                              env=env, capture_output=True, text=True, timeout=60, check=True).stdout.strip()
        Path(site).mkdir(parents=True)
        Path(site, "usercustomize.py").write_text(
            "import sys\nif sys.orig_argv[1:3] != ['-m', 'gpuprof']:\n"
            "    print('user customize ran', flush=True)\n")
    if theirs == "after":  # as the user's environment has it: gpuprof run puts its own first
        env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(tmp_path / "theirs")])
    return tmp_path / "job", env


@functools.cache
def _user_site() -> bool:
    """This interpreter reads a user site (not a venv's): a usercustomize there runs at start-up."""
    env = run_env()
    env.pop("PYTHONNOUSERSITE", None)  # as the jobs' environment (_job)
    return subprocess.run([sys.executable, "-c", "import site; print(site.ENABLE_USER_SITE)"], env=env,
                          capture_output=True, text=True, timeout=60, check=True).stdout.strip() == "True"


def _argv(flags: tuple[str, ...], job: Path, probe: Path, *, theirs: str, under_gpuprof: bool) -> list[str]:
    """The user's command. Their launcher started inside the job puts its folder first (``before``)."""
    argv = [sys.executable, *flags, str(job / "train.py"), str(probe)]
    if theirs != "before":
        return argv
    path = [str(Path(job).parent / "theirs"), *([str(SITE_DIR)] if under_gpuprof else []), str(REPO)]
    return ["env", f"PYTHONPATH={os.pathsep.join(path)}", *argv]


def _both(tmp_path: Path, script: str, flags: tuple[str, ...], theirs: str, usercustomize: bool
          ) -> tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str], dict[str, object],
                     dict[str, object]]:
    job, env = _job(tmp_path, script, theirs=theirs, usercustomize=usercustomize)
    plain_probe, run_probe = tmp_path / "plain.json", tmp_path / "run.json"
    plain = subprocess.run(_argv(flags, job, plain_probe, theirs=theirs, under_gpuprof=False), cwd=job, env=env,
                           capture_output=True, text=True, timeout=TIMEOUT_S, stdin=subprocess.DEVNULL)
    run = subprocess.run([sys.executable, "-m", "gpuprof", "run", "--logdir", str(tmp_path / "logs"), "--",
                          *_argv(flags, job, run_probe, theirs=theirs, under_gpuprof=True)],
                         cwd=job, env={**env, "PYTHONPATH": env.get("PYTHONPATH", str(REPO))},
                         capture_output=True, text=True, timeout=TIMEOUT_S, stdin=subprocess.DEVNULL)
    return plain, run, json.loads(plain_probe.read_text()), json.loads(run_probe.read_text())


def _same_as_plain(plain: subprocess.CompletedProcess[str], run: subprocess.CompletedProcess[str]) -> None:
    assert run.returncode == plain.returncode, run.stderr
    assert run.stdout == plain.stdout
    assert user_part(run.stderr) == plain.stderr
    assert "RecursionError" not in run.stderr and "Error in sitecustomize" not in run.stderr


#: (their sitecustomize on PYTHONPATH: after gpuprof's / before it / none, a usercustomize, the interpreter's flags)
CASES = [
    ("after", False, ()),
    ("before", False, ()),
    ("none", True, ()),
    ("after", True, ()),
    ("after", True, ("-s",)),
]
#: flags that keep Python from reading PYTHONPATH (-E, -I) or from importing site (-S): the bootstrap
#: never loads, the job runs unprofiled, exactly as plain Python runs it (docs/run.md)
UNPROFILED = [("-E",), ("-I",), ("-S",)]


@pytest.mark.parametrize(("theirs", "usercustomize", "flags"), CASES)
def test_a_chaining_sitecustomize_or_a_usercustomize_changes_nothing(
        tmp_path: Path, theirs: str, usercustomize: bool, flags: tuple[str, ...]) -> None:
    plain, run, plain_probe, run_probe = _both(tmp_path, FAST_SCRIPT, flags, theirs, usercustomize)
    assert plain.returncode == 0, plain.stderr
    _same_as_plain(plain, run)
    assert plain.stdout.count("their sitecustomize ran") == (theirs != "none")
    # a venv has no user site: Python never imports a usercustomize there (plain and under gpuprof run alike)
    assert plain.stdout.count("user customize ran") == (usercustomize and "-s" not in flags and _user_site())
    assert plain_probe == {"bootstrap": False, "finders": 0}
    # the bootstrap started at the watched import, once, with one finder
    assert run_probe == {"bootstrap": True, "finders": 1}


@pytest.mark.parametrize("flags", UNPROFILED)
def test_flags_that_skip_site_or_pythonpath_run_the_job_unprofiled_as_plain_python(
        tmp_path: Path, flags: tuple[str, ...]) -> None:
    plain, run, plain_probe, run_probe = _both(tmp_path, FAST_SCRIPT, flags, "after", True)
    _same_as_plain(plain, run)
    assert plain_probe == run_probe == {"bootstrap": False, "finders": 0}
    assert f"started with {flags[0]}" in run.stderr  # the note says why nothing was profiled


@pytest.mark.slow  # the job imports torch
@pytest.mark.parametrize(("theirs", "usercustomize", "flags"), [*CASES, ("after", True, ("-I",))])
def test_a_training_script_beside_a_chaining_sitecustomize_trains_and_is_profiled(
        tmp_path: Path, theirs: str, usercustomize: bool, flags: tuple[str, ...]) -> None:
    plain, run, plain_probe, run_probe = _both(tmp_path, TORCH_SCRIPT, flags, theirs, usercustomize)
    assert plain.returncode == 0, plain.stderr
    assert "trained" in plain.stdout
    _same_as_plain(plain, run)
    profiled = "-I" not in flags
    assert run_probe == {"bootstrap": profiled, "finders": int(profiled)}
    assert (tmp_path / "logs").is_dir() == profiled  # the capture wrote its run (3 steps: a note, no trace)

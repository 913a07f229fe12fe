"""``gpuprof run``'s parent side: the command line, the child's environment, exit statuses, the bootstrap's
behaviour in processes that never train. Children here are plain ``python -c``/``sh`` (no torch): fast."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from gpuprof.cli.run import _split, run_cmd
from gpuprof.run import imports
from gpuprof.run.launch import SITE_DIR, child_env, logdir_state, resolve, wrote_something
from gpuprof.run.options import ENV, CaptureOptions, RunOptions, parse_step_function

from .conftest import gpuprof_run, run_env


def test_split_keeps_everything_after_the_command_for_the_command() -> None:
    assert _split(run_cmd, ["--logdir", "L", "train.py", "--logdir", "x", "-m", "y"]) == (
        ["--logdir", "L"], "script", ["train.py", "--logdir", "x", "-m", "y"])
    assert _split(run_cmd, ["--run-name=r", "--", "torchrun", "--nproc-per-node", "2", "t.py"]) == (
        ["--run-name=r"], "command", ["torchrun", "--nproc-per-node", "2", "t.py"])
    assert _split(run_cmd, ["--no-watch", "-m", "pkg.train", "--lr", "3"]) == (
        ["--no-watch"], "module", ["pkg.train", "--lr", "3"])
    assert _split(run_cmd, ["-mpkg.train", "a"]) == ([], "module", ["pkg.train", "a"])
    assert _split(run_cmd, ["--hang-timeout", "5", "--"]) == (["--hang-timeout", "5"], "command", [])
    assert _split(run_cmd, []) == ([], "script", [])


def test_resolve_forms(tmp_path: Path) -> None:
    script = tmp_path / "t.py"
    script.write_text("pass\n")
    assert resolve("script", (str(script), "--x")).argv == (sys.executable, str(script), "--x")
    assert resolve("module", ("pkg.m", "a")).argv == (sys.executable, "-m", "pkg.m", "a")
    assert resolve("command", ("sh", "-c", "true")).argv == ("sh", "-c", "true")


def test_child_env_puts_the_bootstrap_first_once_and_carries_the_options(tmp_path: Path) -> None:
    opts = RunOptions(logdir="L", run="r", step_function="m:f", capture=CaptureOptions(watch=False, hang_timeout=5.0))
    env = child_env(opts, {"PYTHONPATH": os.pathsep.join([str(SITE_DIR), "/a", "", "/b"]), "X": "1"})
    assert env["PYTHONPATH"].split(os.pathsep) == [str(SITE_DIR), "/a", "/b"]
    assert env["X"] == "1"
    assert RunOptions.from_env(env[ENV]) == opts
    assert sorted(p.name for p in SITE_DIR.iterdir() if p.name != "__pycache__") == ["sitecustomize.py"]


def test_the_flight_recorder_is_on_unless_the_user_set_it() -> None:
    opts = RunOptions(logdir="L")
    env = child_env(opts, {})
    assert env["TORCH_FR_BUFFER_SIZE"] == env["TORCH_NCCL_TRACE_BUFFER_SIZE"] == "2000"
    for name in ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"):
        mine = child_env(opts, {name: "0"})  # the user's value, even "off", is theirs
        assert mine[name] == "0" and len([k for k in mine if "BUFFER_SIZE" in k]) == 1


@pytest.mark.parametrize(("bad", "said"), [
    ("", "Expecting value"), ("{x", "Expecting property name"), ("[]", "Expected `object`, got `array`"), ("{}", "missing required field `logdir`"),
    ('{"logdir": 3}', "at `$.logdir`"), ('{"logdir": ""}', "at `$.logdir`"),
    ('{"logdir": "x", "run": 1}', "at `$.run`"),
    ('{"logdir": "x", "step_function": "no colon"}', "at `$.step_function`"),
    ('{"logdir": "x", "step_function": "os:system(1)"}', "at `$.step_function`"),
    ('{"logdir": "x", "capture": {"watch": [1]}}', "at `$.capture.watch`"),
    ('{"logdir": "x", "capture": {"trigger": "yes"}}', "at `$.capture.trigger`"),
    ('{"logdir": "x", "capture": {"hang_timeout": -1}}', "at `$.capture.hang_timeout`"),
    ('{"logdir": "x", "capture": {"max_auto_windows": 1.5}}', "at `$.capture.max_auto_windows`"),
    ('{"logdir": "x", "capture": {"max_auto_windows": -1}}', "at `$.capture.max_auto_windows`"),
    ('{"logdir": "x", "capture": null}', "at `$.capture`"),
    ("x" * 70_000, "longer than"),
])
def test_options_from_env_reject_what_to_env_never_writes(bad: str, said: str) -> None:
    """The struct's types refuse each, in one line naming the field (fails on the former hand checks, which let a
    negative count or a string flag through)."""
    with pytest.raises(ValueError) as err:
        RunOptions.from_env(bad)
    line = str(err.value)
    assert said in line and line.startswith(ENV) and "\n" not in line


def test_options_a_newer_gpuprof_writes_are_ignored_not_refused() -> None:
    """A child whose gpuprof lacks a capture option (or a field) ignores it: the command line can grow."""
    got = RunOptions.from_env('{"logdir": "x", "new": 1, "capture": {"watch": false, "newer_check": [1]}}')
    assert got == RunOptions(logdir="x", capture=CaptureOptions(watch=False))
    assert got.capture.given() == {"watch": False}
    assert RunOptions.from_env('{"logdir": "x", "step_function": " m:f "}').step_function == " m:f "


def test_options_carry_a_logdir_that_is_not_utf8() -> None:
    """A name from bytes that are not UTF-8 (``surrogateescape``, as Python reads argv) reaches the child unchanged."""
    opts = RunOptions(logdir="logs-\udcff-\u00e9", run="r\udc80")
    assert RunOptions.from_env(opts.to_env()) == opts and opts.to_env().isascii()


def test_step_function_spec() -> None:
    spec = parse_step_function("pkg.loop:Trainer.step")
    assert (spec.module, spec.attr, str(spec)) == ("pkg.loop", "Trainer.step", "pkg.loop:Trainer.step")
    for bad in ("f", "m:", ":f", "m:f()", "m:f;import os", "1m:f"):
        with pytest.raises(ValueError):
            parse_step_function(bad)


def test_wrote_something_sees_a_new_or_changed_run_directory() -> None:
    assert not wrote_something({"a": 1}, {"a": 1})
    assert not wrote_something({"a": 1, "b": 2}, {"a": 1})  # a run directory removed meanwhile: not ours
    assert wrote_something({"a": 1}, {"a": 1, "b": 2})
    assert wrote_something({"a": 1}, {"a": 2})


def test_logdir_state_of_a_missing_directory_is_empty(tmp_path: Path) -> None:
    assert logdir_state(str(tmp_path / "nope")) == {}


def test_when_imported_runs_once_after_the_module_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "gp_watched_mod.py").write_text("VALUE = 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen: list[int] = []
    try:
        imports.when_imported("gp_watched_mod", lambda m: seen.append(m.VALUE))
        assert seen == []
        import gp_watched_mod  # noqa: F401

        assert seen == [42]
        import importlib

        importlib.reload(gp_watched_mod)
        assert seen == [42]  # once
        imports.when_imported("gp_watched_mod", lambda m: seen.append(-m.VALUE))  # already imported: now
        assert seen == [42, -42]
    finally:
        imports.uninstall()
        sys.modules.pop("gp_watched_mod", None)


def test_exit_code_passes_through(tmp_path: Path) -> None:
    proc = gpuprof_run("--", "sh", "-c", "echo out; echo err >&2; exit 7", cwd=tmp_path)
    assert proc.returncode == 7
    assert proc.stdout == "out\n"
    assert proc.stderr.startswith("err\n")


def test_a_child_killed_by_a_signal_kills_gpuprof_run_with_it(tmp_path: Path) -> None:
    proc = gpuprof_run("--", "sh", "-c", "kill -TERM $$", cwd=tmp_path)
    assert proc.returncode == -signal.SIGTERM
    shell = subprocess.run(["bash", "-c", f'"{sys.executable}" -m gpuprof run -- sh -c "kill -TERM \\$\\$"; echo $?'],
                           cwd=tmp_path, env=run_env(), capture_output=True, text=True, timeout=60)
    assert shell.stdout.strip().splitlines()[-1] == str(128 + signal.SIGTERM)


def test_an_uncaught_keyboard_interrupt_exits_as_python_does(tmp_path: Path) -> None:
    bare = subprocess.run([sys.executable, "-c", "raise KeyboardInterrupt"], capture_output=True, text=True,
                          env=run_env(), timeout=60)
    proc = gpuprof_run("--", sys.executable, "-c", "raise KeyboardInterrupt", cwd=tmp_path)
    assert bare.returncode == proc.returncode == -signal.SIGINT
    assert proc.stderr.startswith(bare.stderr)


def test_a_process_that_never_imports_torch_is_left_alone(tmp_path: Path) -> None:
    code = "import sys, json; print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'gpuprof'))))"
    proc = gpuprof_run("--logdir", str(tmp_path / "logs"), "--", sys.executable, "-c", code, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    loaded = json.loads(proc.stdout)
    assert loaded == []  # no torch, and not even gpuprof: sitecustomize waits for torch (numpy's 0.15 s unpaid)
    # and it says, once, that nothing was profiled, without failing the job
    assert proc.stderr.count("saw no optimizer step") == 1
    assert not (tmp_path / "logs").exists()


@pytest.mark.slow  # imports torch in the child (the bootstrap waits for it)
def test_the_environments_own_sitecustomize_still_runs(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "sitecustomize.py").write_text("import os\nos.environ['THEIR_SITECUSTOMIZE'] = 'ran'\n")
    env = run_env(PYTHONPATH=os.pathsep.join([str(Path(__file__).resolve().parents[2]), str(theirs)]))
    # a look-up first (as libraries test for torch), then the import: the bootstrap starts at the import
    proc = gpuprof_run("--", sys.executable, "-c", "import importlib.util, os, sys; importlib.util.find_spec('torch'); "
                       "print('gpuprof.run.bootstrap' in sys.modules); import torch, gpuprof.run.bootstrap as b; "
                       "print(os.environ.get('THEIR_SITECUSTOMIZE'), b._OPTS is not None)", cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "ran", "True"]


def test_help_names_the_forms_and_exit_codes(tmp_path: Path) -> None:
    proc = gpuprof_run("--help", cwd=tmp_path)
    assert proc.returncode == 0
    for text in ("-- torchrun", "-m package.module", "--step-function", "--hang-timeout", "--no-watch",
                 "128+N"):
        assert text in proc.stdout, text


def test_gpuprof_run_is_listed_among_the_commands(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "gpuprof", "--help"], env=run_env(), capture_output=True,
                          text=True, timeout=60)
    assert "run " in proc.stdout or "\n  run" in proc.stdout, proc.stdout


def test_the_job_gets_no_bootstrap_options_it_did_not_ask_for(tmp_path: Path) -> None:
    code = textwrap.dedent("""
        import json, os
        print(json.dumps(json.loads(os.environ['GPUPROF_RUN_CONFIG'])))
    """)
    proc = gpuprof_run("--logdir", "L", "--run-name", "r", "--no-watch", "--max-auto-windows", "3", "--",
                       sys.executable, "-c", code, cwd=tmp_path)
    got = json.loads(proc.stdout)
    assert got == {"logdir": "L", "run": "r", "step_function": None,
                   "capture": {"watch": False, "trigger": True, "max_auto_windows": 3}, "verbose": False}


_SLEEPER = "import time; print('ready', flush=True); time.sleep(60)"


def test_sigterm_to_gpuprof_run_reaches_the_child_once(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "gpuprof", "run", "--", sys.executable, "-c",
                             "import signal, sys, time\n"
                             "signal.signal(signal.SIGTERM, lambda *a: (print('term', flush=True), sys.exit(9)))\n"
                             "print('ready', flush=True); time.sleep(60)"],
                            cwd=tmp_path, env=run_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "ready\n"
        proc.send_signal(signal.SIGTERM)  # to gpuprof run alone, as `kill PID` would
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 9, err  # the child's own handler ran, once, and its exit code came through
    assert out == "term\n"


_COUNTER = ("import signal, time\n"
            "got = []\n"
            "signal.signal(signal.SIGINT, lambda *a: got.append(1))\n"
            "print('ready', flush=True)\n"
            "t = time.time()\n"
            "while not got and time.time() - t < 30: time.sleep(0.02)\n"
            "time.sleep(1.5)\n"
            "print('sigints', len(got), flush=True)\n")


def _in_a_terminal(tmp_path: Path, code: str) -> tuple[int, bytes]:
    """Run ``gpuprof run -- python -c CODE`` in a new pseudo-terminal, press Ctrl-C once it says ready."""
    import pty

    pid, master = pty.fork()  # the child leads a new session whose controlling terminal is the pty
    if pid == 0:  # pragma: no cover - the forked child
        os.chdir(tmp_path)
        os.execve(sys.executable, [sys.executable, "-m", "gpuprof", "run", "--", sys.executable, "-c", code],
                  run_env())
    output = b""
    try:
        while b"ready" not in output:
            chunk = os.read(master, 4096)
            assert chunk, output
            output += chunk
        os.write(master, b"\x03")  # Ctrl-C: the terminal sends SIGINT to its foreground process group
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: the other side closed
                break
            if not chunk:
                break
            output += chunk
    finally:
        _, status = os.waitpid(pid, 0)
        os.close(master)
    return status, output


def test_ctrl_c_at_a_terminal_reaches_the_child_once_from_the_terminal(tmp_path: Path) -> None:
    status, output = _in_a_terminal(tmp_path, _COUNTER)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, (status, output)
    assert b"sigints 1" in output, output  # the terminal's, not a second one forwarded by gpuprof run
    status, output = _in_a_terminal(tmp_path, _SLEEPER)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGINT, (status, output)
    assert output.count(b"KeyboardInterrupt") == 1, output


def test_dash_m_runs_the_module_with_its_arguments(tmp_path: Path) -> None:
    (tmp_path / "gp_mod_entry.py").write_text("import sys\nprint(sys.argv[1:])\nsys.exit(3)\n")
    proc = gpuprof_run("-m", "gp_mod_entry", "--logdir", "theirs", "-m", "x", cwd=tmp_path,
                       env=run_env(PYTHONPATH=os.pathsep.join([str(tmp_path), run_env()["PYTHONPATH"]])))
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout == "['--logdir', 'theirs', '-m', 'x']\n"  # gpuprof's option names, passed on as the module's
    assert not (tmp_path / "theirs").exists()


def test_killing_gpuprof_run_takes_the_job_with_it(tmp_path: Path) -> None:
    if not sys.platform.startswith("linux"):
        pytest.skip("the parent-death signal is Linux's")
    code = "import os, time; print(os.getpid(), flush=True); time.sleep(60)"
    proc = subprocess.Popen([sys.executable, "-m", "gpuprof", "run", "--", sys.executable, "-c", code], cwd=tmp_path,
                            env=run_env(), stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stdout is not None
    child = int(proc.stdout.readline())
    proc.kill()  # SIGKILL: gpuprof run cannot forward anything
    proc.wait(timeout=30)
    for _ in range(200):
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        with open(f"/proc/{child}/stat") as fh:  # a zombie waiting for init to reap it is gone too
            if fh.read().rsplit(")", 1)[1].split()[0] == "Z":
                break
        time.sleep(0.05)
    else:
        os.kill(child, signal.SIGKILL)
        raise AssertionError("the job outlived gpuprof run")


def test_sigusr1_to_gpuprof_run_goes_to_the_child(tmp_path: Path) -> None:
    code = ("import signal, sys, time\n"
            "signal.signal(signal.SIGUSR1, lambda *a: (print('usr1', flush=True), sys.exit(4)))\n"
            "print('ready', flush=True); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-m", "gpuprof", "run", "--", sys.executable, "-c", code], cwd=tmp_path,
                            env=run_env(), stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "ready\n"
        proc.send_signal(signal.SIGUSR1)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert (proc.returncode, out) == (4, "usr1\n")  # gpuprof run lived on, the child got it and ended its way


def test_the_run_commands_default_logdir_is_the_captures() -> None:
    from gpuprof.capture.config import DEFAULT_LOGDIR
    from gpuprof.cli import run as cli_run

    assert cli_run.DEFAULT_LOGDIR == DEFAULT_LOGDIR


def test_a_command_that_fails_before_training_is_named_with_its_exit_code(tmp_path: Path) -> None:
    # as an Accelerate usage error does: the launcher exits 2 before any process trains
    proc = gpuprof_run("--logdir", str(tmp_path / "logs"), "--", sys.executable, "-c",
                       "import sys; sys.exit('accelerate launch: error: unrecognized arguments: --oops')",
                       cwd=tmp_path)
    assert proc.returncode == 1
    note = proc.stderr.splitlines()[-1]
    assert note == ("gpuprof run: the command failed (exit code 1) before training: nothing was profiled "
                    "(its own output above says why)")
    assert "saw no optimizer step" not in proc.stderr and "--step-function" not in proc.stderr


def test_the_python_flags_that_skip_the_bootstrap_are_recognised() -> None:
    from gpuprof.run.launch import bootstrap_skipping_flag

    py = sys.executable
    assert bootstrap_skipping_flag((py, "-I", "t.py")) == "-I"
    assert bootstrap_skipping_flag(("python3.11", "-u", "-sE", "t.py")) == "-E"
    assert bootstrap_skipping_flag(("env", "A=1", "python", "-X", "dev", "-S", "t.py")) == "-S"
    assert bootstrap_skipping_flag(("python", "-XI", "t.py")) is None  # -X's value
    assert bootstrap_skipping_flag(("python", "-W", "I", "t.py")) is None
    assert bootstrap_skipping_flag(("python", "t.py", "-I")) is None  # the script's own argument
    assert bootstrap_skipping_flag(("python", "-c", "pass", "-I")) is None
    assert bootstrap_skipping_flag(("python", "-mpkg", "-I")) is None
    assert bootstrap_skipping_flag(("torchrun", "-I", "t.py")) is None
    assert bootstrap_skipping_flag(()) is None


def test_two_finders_of_the_post_import_kind_never_ask_each_other(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Two copies of the hook (as two loads of gpuprof's sitecustomize, or two gpuprofs, would make): each
    skips the other when looking for the spec, so an import ends (it once recursed until RecursionError)."""
    import importlib.util

    (tmp_path / "gp_watched_twice.py").write_text("VALUE = 7\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = importlib.util.spec_from_file_location("_gp_imports_copy", imports.__file__)
    assert spec is not None and spec.loader is not None
    copy = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(copy)
    seen: list[str] = []
    try:
        other = copy._Finder()  # another copy's finder, first on the path: imports.when_imported reuses it
        sys.meta_path.insert(0, other)
        imports.when_imported("gp_watched_twice", lambda m: seen.append(f"ours {m.VALUE}"))
        assert imports.finder() is other and len(other.hooks["gp_watched_twice"]) == 1
        mine = imports._Finder()  # and one of this copy's, in front of it, holding a hook of its own
        mine.add("gp_watched_twice", lambda m: seen.append(f"mine {m.VALUE}"))
        sys.meta_path.insert(0, mine)
        import gp_watched_twice  # noqa: F401

        assert seen == ["mine 7", "ours 7"]  # neither asked the other; the skipped one's hook ran too, once
        importlib.reload(gp_watched_twice)
        assert seen == ["mine 7", "ours 7"]
    finally:
        imports.uninstall()
        sys.modules.pop("gp_watched_twice", None)
    assert not any(getattr(f, imports.MARK, False) for f in sys.meta_path)

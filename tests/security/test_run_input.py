"""``gpuprof run`` given what it cannot run, hostile names and options, and a job killed mid-window.

Bad input is one line on stderr naming the problem, exit code 2, no
traceback; names are printed with their control characters made visible;
nothing is written to start a job, so nothing is left behind however it ends.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuprof.run.launch import SITE_DIR

from ..run.conftest import SCRIPTS, gpuprof_run, run_env


def _one_line_exit_2(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


def test_a_script_that_does_not_exist(tmp_path: Path) -> None:
    line = _one_line_exit_2(gpuprof_run("--logdir", "logs", "nosuch_train.py", "--lr", "3", cwd=tmp_path))
    assert "no such script" in line and "nosuch_train.py" in line
    assert not (tmp_path / "logs").exists()


@pytest.mark.parametrize("program", ["torchrun", "python3", "sh"])
def test_a_program_named_without_the_double_dash(tmp_path: Path, program: str) -> None:
    line = _one_line_exit_2(gpuprof_run(program, "--nproc-per-node", "2", "train.py", cwd=tmp_path))
    assert f"{program} is a program, not a Python script: put -- before" in line


@pytest.mark.parametrize("args", [(), ("--",), ("--logdir", "x"), ("--logdir", "x", "--")])
def test_an_empty_command(tmp_path: Path, args: tuple[str, ...]) -> None:
    assert "no command to run" in _one_line_exit_2(gpuprof_run(*args, cwd=tmp_path))


def test_dash_m_without_a_module_and_a_missing_program(tmp_path: Path) -> None:
    assert "-m needs a module name" in _one_line_exit_2(gpuprof_run("-m", cwd=tmp_path))
    line = _one_line_exit_2(gpuprof_run("--", "no-such-program-gpuprof", cwd=tmp_path))
    assert "cannot run no-such-program-gpuprof" in line


def test_a_bad_step_function_and_bad_numbers(tmp_path: Path) -> None:
    script = tmp_path / "t.py"
    script.write_text("pass\n")
    assert "is not MODULE:FUNCTION" in _one_line_exit_2(
        gpuprof_run("--step-function", "os.system('x')", str(script), cwd=tmp_path))
    assert "--hang-timeout" in _one_line_exit_2(gpuprof_run("--hang-timeout", "-1", str(script), cwd=tmp_path))
    assert "--max-auto-windows" in _one_line_exit_2(gpuprof_run("--max-auto-windows", "x", str(script), cwd=tmp_path))


@pytest.mark.parametrize("name", ["..", ".", ""])
def test_a_run_name_that_is_no_directory_under_the_logdir(tmp_path: Path, name: str) -> None:
    script = tmp_path / "t.py"
    script.write_text("pass\n")
    assert "names no directory under the logdir" in _one_line_exit_2(
        gpuprof_run("--run-name", name, str(script), cwd=tmp_path))


def test_hostile_script_names_are_printed_visibly(tmp_path: Path) -> None:
    name = "evil\x1b]0;pwned\x07\x1b[2J\u202eyp.py"
    line = _one_line_exit_2(gpuprof_run(name, cwd=tmp_path))
    assert "\x1b" not in line and "\x07" not in line and "\u202e" not in line
    assert "evil\\x1b]0;pwned\\x07\\x1b[2J\\u202eyp.py" in line
    # an existing script with such a name runs (it is the user's), and an error naming it stays inert
    real = tmp_path / "ok\x1b[31m.py"
    real.write_text("import sys; sys.exit(5)\n")
    assert gpuprof_run(str(real), cwd=tmp_path).returncode == 5


def test_a_fifo_or_a_directory_is_not_a_script_and_nothing_blocks(tmp_path: Path) -> None:
    fifo = tmp_path / "train.py"
    os.mkfifo(fifo)
    line = _one_line_exit_2(gpuprof_run(str(fifo), cwd=tmp_path, timeout=60))
    assert "not a regular file" in line
    (tmp_path / "pkgdir").mkdir()
    assert "without __main__.py" in _one_line_exit_2(gpuprof_run("pkgdir", cwd=tmp_path))


@pytest.mark.parametrize(("payload", "field"), [
    ('{"logdir": "x", "step_function": "os:system(\'id\')"}', "$.step_function"),
    # the options struct's types (gpuprof.run.options): a string flag, a negative count, a mistyped tracker list
    ('{"logdir": "x", "step_function": "m:f", "capture": {"watch": "no"}}', "$.capture.watch"),
    ('{"logdir": "x", "step_function": "m:f", "capture": {"max_auto_windows": -5}}', "$.capture.max_auto_windows"),
    ('{"logdir": "x", "step_function": "m:f", "capture": {"to": ["wandb"]}}', "$.capture.to"),
])
def test_a_hostile_options_variable_is_one_line_and_the_script_runs_on(tmp_path: Path, payload: str,
                                                                       field: str) -> None:
    env = run_env(PYTHONPATH=os.pathsep.join([str(SITE_DIR), run_env()["PYTHONPATH"]]), GPUPROF_RUN_CONFIG=payload)
    proc = subprocess.run([sys.executable, "-c", "print('still here'); raise SystemExit(3)"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 3
    assert proc.stdout == "still here\n"
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("gpuprof run: reading the job's options failed")
    assert f"`{field}`" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_a_run_name_cannot_escape_the_logdir(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    proc = gpuprof_run("--logdir", "logs", "--run-name", "../../escaped", str(SCRIPTS / "plain_loop.py"),
                       "--steps", "3", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert written and all((tmp_path / "logs") in p.parents for p in written), written
    assert "nothing was profiled" not in proc.stderr


@pytest.mark.slow
def test_sigkill_to_the_job_mid_window_leaves_nothing_behind(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    site_before = sorted(p.name for p in SITE_DIR.iterdir())
    proc = subprocess.Popen([sys.executable, "-m", "gpuprof", "run", "--logdir", "logs", "--run-name", "killed",
                             str(SCRIPTS / "plain_loop.py"), "--sleep-at", "9"], cwd=tmp_path,
                            env=run_env(TMPDIR=str(tmp)), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        assert proc.stdout is not None
        child = None
        for line in proc.stdout:
            if line.startswith("ready"):
                child = int(line.split()[1])  # the script's own pid: the child of gpuprof run
                break
        assert child is not None and child != proc.pid
        os.kill(child, signal.SIGKILL)  # steps 7-11 are the recorded window: step 9 is inside it
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == -signal.SIGKILL
    time.sleep(0.2)
    leftovers = [p for p in tmp.rglob("*") if "gpuprof" in p.name or p.name.startswith("sitecustomize")]
    assert leftovers == []
    assert sorted(p.name for p in SITE_DIR.iterdir()) == site_before  # nothing written beside the bootstrap
    assert not list((tmp_path / "logs").rglob("*.tmp*"))  # no half-written file under a temporary name
    assert "Traceback" not in err


def test_the_end_card_shows_hostile_names_inert_and_reads_hostile_reports_in_one_line(tmp_path: Path) -> None:
    """The card reads what the job left in the logdir: a run directory named with escapes and a bidi override, a
    finding whose message carries them, a report.json that is a FIFO: all shown inert, nothing blocks."""
    from gpuprof.capture.run import CaptureSection
    from gpuprof.findings import Finding, Severity
    from gpuprof.render.jsonout import render_json
    from gpuprof.report import Report
    from gpuprof.run.card import end_card

    logdir = tmp_path / "logs"
    run = logdir / "x\x1b[31mred\u202e"
    run.mkdir(parents=True)
    bad = Finding(code="GP601", name="x", severity=Severity.WARNING, message="evil \x1b]0;title\x07 text\nnext",
                  advice="\x1b[2J clear", cost_us_per_step=10.0)
    sec = CaptureSection(run_dir=str(run), out_dir=str(run), steps=3)
    (run / "report.json").write_text(render_json(Report(command="capture", sections=[sec], findings=[bad])))
    fifo_run = logdir / "fifo"
    fifo_run.mkdir()
    os.mkfifo(fifo_run / "report.json")
    card = end_card(str(logdir), {}, {"x\x1b[31mred\u202e": 1, "fifo": 1})
    assert card is not None
    assert "\x1b" not in card and "\u202e" not in card and "\x07" not in card
    assert "GP601" in card and "not a regular file" in card

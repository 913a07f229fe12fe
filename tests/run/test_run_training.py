"""Real, unchanged training scripts under ``gpuprof run`` on CPU (slow: each starts torch in a fresh process).

The scripts in ``scripts/`` import nothing of gpuprof. Each test checks what the
user would: the script's own output and exit status unchanged, and a report in
the run directory whose step count is the script's own count of optimizer steps.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import SCRIPTS, bare, capture_section, codes, gpuprof_run, losses, report, run_env, user_part

pytest.importorskip("torch")
pytestmark = pytest.mark.slow

PLAIN = str(SCRIPTS / "plain_loop.py")


def test_plain_loop_same_losses_bit_for_bit_and_a_report(tmp_path: Path) -> None:
    without = bare(PLAIN, "--steps", "14", cwd=tmp_path)
    with_ = gpuprof_run("--logdir", "logs", "--run-name", "plain", PLAIN, "--steps", "14", cwd=tmp_path)
    assert without.returncode == with_.returncode == 0, with_.stderr
    assert len(losses(without.stdout)) == 14
    assert losses(with_.stdout) == losses(without.stdout)  # repr of every float: bit for bit
    rep = report(tmp_path / "logs" / "plain")
    # the clock starts when the first optimizer step ends: 14 optimizer steps are 13 gpuprof steps
    assert capture_section(rep)["steps"] == 13
    assert any("one step per step of the first optimizer" in n for n in rep["notes"])
    assert "nothing was profiled" not in with_.stderr


def test_an_uncaught_exception_keeps_its_traceback_and_exit_code_1(tmp_path: Path) -> None:
    without = bare(PLAIN, "--raise-at", "9", cwd=tmp_path)
    with_ = gpuprof_run("--logdir", "logs", "--run-name", "boom", PLAIN, "--raise-at", "9", cwd=tmp_path)
    assert without.returncode == with_.returncode == 1
    assert "RuntimeError: planted failure at batch 9" in without.stderr
    assert user_part(with_.stderr) == without.stderr  # the user's traceback, character for character
    assert losses(with_.stdout) == losses(without.stdout)
    assert capture_section(report(tmp_path / "logs" / "boom"))["steps"] == 8  # what ran is kept


def test_keyboard_interrupt_exits_130_in_a_shell_as_without_gpuprof(tmp_path: Path) -> None:
    without = bare(PLAIN, "--interrupt-at", "9", cwd=tmp_path)
    with_ = gpuprof_run("--logdir", "logs", "--run-name", "ki", PLAIN, "--interrupt-at", "9", cwd=tmp_path)
    assert without.returncode == with_.returncode == -signal.SIGINT  # Python dies of SIGINT: a shell's 130
    assert user_part(with_.stderr) == without.stderr
    assert (tmp_path / "logs" / "ki" / "report.json").is_file()
    shell = subprocess.run(["bash", "-c", f'"{sys.executable}" -m gpuprof run --logdir logs {PLAIN} '
                            '--interrupt-at 3 >/dev/null 2>&1; echo $?'], cwd=tmp_path, env=run_env(),
                           capture_output=True, text=True, timeout=240)
    assert shell.stdout.strip() == "130"


def test_the_scripts_own_sys_exit_code(tmp_path: Path) -> None:
    proc = gpuprof_run("--logdir", "logs", PLAIN, "--steps", "3", "--exit-code", "7", cwd=tmp_path)
    assert proc.returncode == 7, proc.stderr


def test_sigint_to_the_process_group_interrupts_the_script_once(tmp_path: Path) -> None:
    # a job runner's Ctrl-C: SIGINT to gpuprof run's process group (no terminal here)
    proc = subprocess.Popen([sys.executable, "-m", "gpuprof", "run", "--logdir", "logs", "--run-name", "sigint",
                             PLAIN, "--sleep-at", "9"], cwd=tmp_path, env=run_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("ready"):
                break
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == -signal.SIGINT, err
    assert err.count("KeyboardInterrupt") == 1  # one interrupt, one traceback
    assert "in main" in user_part(err)  # the script's own traceback (where it was when the signal came)
    assert (tmp_path / "logs" / "sigint" / "report.json").is_file()  # the capture ended: the report is there


def test_a_planted_num_workers_0_is_named_gp601_in_the_run_directorys_report(tmp_path: Path) -> None:
    proc = gpuprof_run("--logdir", "logs", "--run-name", "slowdata", PLAIN, "--sample-cost-ms", "1", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    rep = report(tmp_path / "logs" / "slowdata")
    assert "GP601" in codes(rep)
    gp601 = next(f for f in rep["findings"] if f["code"] == "GP601")
    assert "num_workers=0" in gp601["message"]
    assert (gp601.get("location") or {}).get("file", "").endswith("plain_loop.py")
    assert "GP601" in proc.stderr  # and the printed summary says so


def test_accelerate_loop_counts_optimizer_steps_not_micro_batches(tmp_path: Path) -> None:
    pytest.importorskip("accelerate")
    script = str(SCRIPTS / "accelerate_loop.py")
    without = bare(script, "12", cwd=tmp_path)
    with_ = gpuprof_run("--logdir", "logs", "--run-name", "acc", script, "12", cwd=tmp_path)
    assert without.returncode == with_.returncode == 0, with_.stderr
    assert losses(with_.stdout) == losses(without.stdout)
    assert "optimizer_steps 12" in with_.stdout  # 24 micro-batches, gradient_accumulation_steps=2
    assert capture_section(report(tmp_path / "logs" / "acc"))["steps"] == 11


def test_lightning_trainer_gets_the_callback(tmp_path: Path) -> None:
    pytest.importorskip("lightning")
    proc = gpuprof_run("--logdir", "logs", "--run-name", "lit", str(SCRIPTS / "lightning_loop.py"), "12",
                       cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "global_step 12" in proc.stdout
    rep = report(tmp_path / "logs" / "lit")
    assert capture_section(rep)["steps"] == 12  # the callback's clock: one step per optimizer step
    assert any("accumulate_grad_batches=2" in n for n in rep["notes"])
    assert not any("first optimizer" in n for n in rep["notes"])  # the optimizer clock stood down


def test_hf_trainer_gets_the_callback(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    proc = gpuprof_run("--logdir", "logs", "--run-name", "hf", str(SCRIPTS / "hf_loop.py"), "12", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "steps 12" in proc.stdout
    rep = report(tmp_path / "logs" / "hf")
    assert capture_section(rep)["steps"] == 12
    assert "24 micro-batches in 12 optimizer steps" in rep["notes"]
    assert "GP601" in codes(rep) or any("dataloader_num_workers=0" in n for n in rep["notes"])


@pytest.mark.frameworks
@pytest.mark.parametrize(("package", "script", "name"), [("lightning", "lightning_loop.py", "lit"),
                                                         ("transformers", "hf_loop.py", "hf")])
def test_framework_callbacks_print_nothing_mid_run_only_the_card(tmp_path: Path, package: str, script: str,
                                                                 name: str) -> None:
    """A Trainer's callback under `gpuprof run` is as quiet as the optimizer clock: its window summary and its
    end-of-run summary go to the process's gpuprof.log; the user's output gets one card, after the job's lines."""
    pytest.importorskip(package)
    proc = subprocess.run([sys.executable, "-m", "gpuprof", "run", "--logdir", "logs", "--run-name", name,
                           str(SCRIPTS / script), "12"], cwd=tmp_path, env=run_env(), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=400, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout
    lines = proc.stdout.splitlines()
    card = next(i for i, line in enumerate(lines) if "end of run:" in line)
    mid_run = [line for line in lines[:card] if line.startswith("gpuprof")]
    assert not mid_run, mid_run  # no summary, no "recorded steps" notice, no "files in" line before the card
    assert proc.stdout.count("end of run:") == 1
    log = tmp_path / "logs" / name / "gpuprof.log"
    assert "recorded steps" in log.read_text() and "gpuprof: files in" in log.read_text()  # kept, in the log
    assert f"logs/{name}/gpuprof.log" in proc.stdout


def test_torchrun_two_ranks_each_report_and_the_cross_rank_one(tmp_path: Path) -> None:
    proc = gpuprof_run("--logdir", "logs", "--run-name", "ddp", "--", sys.executable, "-m", "torch.distributed.run",
                       "--nproc-per-node", "2", str(SCRIPTS / "ddp_loop.py"), "12", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    run_dir = tmp_path / "logs" / "ddp"
    for rank in (0, 1):
        assert capture_section(report(run_dir / f"rank{rank}"))["steps"] == 11
        assert any(run_dir.glob(f"rank{rank}.*.pt.trace.json.gz"))
        assert f"rank {rank} loss" in proc.stdout
    cross = report(run_dir).get("sections") if (run_dir / "report.json").exists() else None
    assert cross is None  # per-rank reports only under rank<R>/; the job's is report.cross_rank.json
    import json

    job = json.loads((run_dir / "report.cross_rank.json").read_text())
    section = next(s for s in job["sections"] if s.get("kind") == "cross_rank")
    assert sorted(r["rank"] for r in section["ranks"]) == [0, 1]
    assert proc.stderr.count("end of run:") == 1  # one card for the job, from gpuprof run once it ended
    assert "gpuprof: files in" not in proc.stderr  # no rank's own summary among the job's lines
    assert f"cross-rank   {Path('logs') / 'ddp' / 'report.cross_rank.md'}" in proc.stderr
    assert (run_dir / "rank0" / "gpuprof.log").is_file() and (run_dir / "rank1" / "gpuprof.log").is_file()


def test_no_optimizer_gets_the_note_and_step_function_the_steps(tmp_path: Path) -> None:
    script = str(SCRIPTS / "infer_loop.py")
    nothing = gpuprof_run("--logdir", "logs", script, "5", cwd=tmp_path)
    assert nothing.returncode == 0
    assert "gpuprof run saw no optimizer step: use --step-function module:function" in nothing.stderr
    assert not (tmp_path / "logs").exists()
    for name, spec in (("main", "__main__:infer_step"), ("named", "infer_loop:infer_step")):
        without = bare(script, "14", cwd=tmp_path)
        proc = gpuprof_run("--logdir", "logs", "--run-name", name, "--step-function", spec, script, "14",
                           cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout == without.stdout
        assert capture_section(report(tmp_path / "logs" / name))["steps"] == 14  # each call is one step
        assert "nothing was profiled" not in proc.stderr
    # a module the job imports (not the script): wrapped when its import ends
    env = run_env(PYTHONPATH=os.pathsep.join([str(SCRIPTS), run_env()["PYTHONPATH"]]))
    proc = gpuprof_run("--logdir", "logs", "--run-name", "imported", "--step-function", "infer_loop:infer_step", "--",
                       sys.executable, "-c", "import infer_loop; infer_loop.main()", cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    assert capture_section(report(tmp_path / "logs" / "imported"))["steps"] == 14


def test_accelerate_launch_instruments_the_process_it_starts(tmp_path: Path) -> None:
    pytest.importorskip("accelerate")
    import shutil

    if shutil.which("accelerate") is None:
        pytest.skip("no accelerate command on PATH")
    proc = gpuprof_run("--logdir", "logs", "--run-name", "launched", "--", "accelerate", "launch", "--cpu",
                       "--num_processes", "1", str(SCRIPTS / "accelerate_loop.py"), "12", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "optimizer_steps 12" in proc.stdout
    # the launcher (which imports torch too, and never steps) wrote nothing; its child wrote the one report
    reports = sorted((tmp_path / "logs").rglob("report.json"))
    assert reports == [tmp_path / "logs" / "launched" / "report.json"]
    assert capture_section(report(tmp_path / "logs" / "launched"))["steps"] == 11


def test_a_script_with_its_own_gpuprof_capture_keeps_it(tmp_path: Path) -> None:
    # examples/train.py decorates its step with gpuprof.profile_step: that capture records, gpuprof run adds none
    example = str(Path(__file__).resolve().parents[2] / "examples" / "train.py")
    proc = gpuprof_run("--logdir", "logs", "--run-name", "outer", example, "--device", "cpu", "--steps", "12",
                       "--logdir", "logs", "--run-name", "inner", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in (tmp_path / "logs").iterdir()) == ["inner"]
    assert capture_section(report(tmp_path / "logs" / "inner"))["steps"] == 12  # profile_step: every call a step
    assert "nothing was profiled" not in proc.stderr
    assert "another gpuprof capture" not in proc.stderr


def test_trainers_get_the_callback_whichever_is_imported_first(tmp_path: Path) -> None:
    # `from transformers import Trainer` imports torch from inside transformers.trainer: the Trainer module is
    # still being imported when torch's import ends, so it is patched when its own import ends
    pytest.importorskip("transformers")
    pytest.importorskip("lightning")
    code = ("from transformers import Trainer\n"
            "import lightning.pytorch as pl\n"
            "print(hasattr(Trainer.__init__, '__gpuprof_original__'), hasattr(pl.Trainer.__init__, "
            "'__gpuprof_original__'))\n")
    proc = gpuprof_run("--logdir", "logs", "--", sys.executable, "-c", code, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "True"]


def test_one_card_after_the_scripts_last_line_naming_files_that_exist(tmp_path: Path) -> None:
    """stdout and stderr in one stream, as a terminal shows them: the script's lines, then gpuprof's card, once;
    nothing of gpuprof's between the script's lines (the window's summary went to gpuprof.log)."""
    proc = subprocess.run([sys.executable, "-m", "gpuprof", "run", "--logdir", "logs", "--run-name", "card", PLAIN,
                           "--steps", "14"], cwd=tmp_path, env=run_env(), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=240, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout
    lines = proc.stdout.splitlines()
    last_loss = max(i for i, line in enumerate(lines) if line.startswith("loss"))
    first_ours = min(i for i, line in enumerate(lines) if "gpuprof" in line)
    assert first_ours > last_loss, proc.stdout  # nothing of gpuprof's before the script's last line
    assert proc.stdout.count("end of run:") == 1
    run_dir = Path("logs") / "card"
    for name in ("report.md", "report.html", "gpuprof.log"):
        assert str(run_dir / name) in proc.stdout
        assert (tmp_path / run_dir / name).is_file()
    assert "recorded steps" in (tmp_path / run_dir / "gpuprof.log").read_text()  # the window's notice, kept


def test_verbose_prints_the_summaries_as_they_come_and_no_card(tmp_path: Path) -> None:
    proc = gpuprof_run("--verbose", "--logdir", "logs", "--run-name", "v", PLAIN, "--steps", "14", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "gpuprof: files in" in proc.stderr and "end of run:" not in proc.stderr
    assert not (tmp_path / "logs" / "v" / "gpuprof.log").exists()


def _free_port() -> str:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def test_mp_spawn_ranks_join_one_run_and_the_straggler_is_named_from_every_step(tmp_path: Path) -> None:
    """torch.multiprocessing.spawn sets no RANK: the ranks are found from the process group, write one run
    directory and one cross-rank report; rank 1's DataLoader, 20 ms slower every step, is named by GP707 from
    all the steps (not the window's five) with data wait as its split."""
    import json

    proc = gpuprof_run("--logdir", "logs", "--run-name", "sp", str(SCRIPTS / "spawn_straggler.py"), "60",
                       _free_port(), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "rank 0 done" in proc.stdout and "rank 1 done" in proc.stdout
    assert [p.name for p in (tmp_path / "logs").iterdir()] == ["sp"]  # one run directory for the job
    run_dir = tmp_path / "logs" / "sp"
    assert (run_dir / "rank0" / "report.json").is_file() and (run_dir / "rank1" / "report.json").is_file()
    cross = json.loads((run_dir / "report.cross_rank.json").read_text())
    gp707 = next(f for f in cross["findings"] if f["code"] == "GP707")
    ev = {e["metric"]: e for e in gp707["evidence"]}
    assert ev["straggler_rank"]["value"] == "1"
    assert "rank 1 of 2" in gp707["message"] and "data wait" in gp707["message"]
    split = ev["split_us_per_step"]["extra"]
    assert split["data_wait_us"] > split["others_data_wait_us"]  # its split: the data wait is where it differs
    assert ev["others_wait_us_per_step"]["extra"]["points"] >= 50  # from every common step, not five
    assert "GP707" in proc.stderr and proc.stderr.count("end of run:") == 1
    assert str(Path("logs") / "sp" / "report.cross_rank.md") in proc.stderr

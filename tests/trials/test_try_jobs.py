"""``gpuprof try`` on a planted job (tests/trials/jobs/planted_loader.py: num_workers=0, a CPU-heavy item) that
knows nothing of gpuprof. Slow: every trial is an interpreter that imports torch and trains. No test asserts a
time or which variant wins (the machine's load decides that); they assert what the trials did."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
JOB = Path(__file__).resolve().parent / "jobs" / "planted_loader.py"
VERDICTS = {"faster", "same", "slower", "changed-numerics", "failed"}

pytestmark = pytest.mark.slow


def _env() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "WANDB_MODE": "online"}
    env.pop("GPUPROF_RUN_CONFIG", None)
    return env


def _try(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpuprof", "try", *args], cwd=cwd, env=_env(), capture_output=True,
                          text=True, timeout=600, stdin=subprocess.DEVNULL)


def _tree(root: Path, skip: str) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and p.relative_to(root).parts[0] != skip}


def _user_dir(tmp_path: Path) -> Path:
    user = tmp_path / "user"
    user.mkdir()
    (user / "planted_loader.py").write_bytes(JOB.read_bytes())
    (user / "data.txt").write_text("the user's own file\n")
    return user


def test_try_measures_the_workers_variant_and_keeps_the_losses_and_the_users_files(tmp_path: Path) -> None:
    user = _user_dir(tmp_path)
    before = _tree(user, "L")
    proc = _try("--logdir", "L", "--run-name", "t", "--steps", "6", "--warmup", "2", "--variants", "num_workers=2",
                "--", sys.executable, "planted_loader.py", "--item-ms", "2", cwd=user)
    assert proc.returncode in (0, 1), proc.stderr
    assert _tree(user, "L") == before  # nothing of the user's changed, no checkpoint: the job never finished
    assert not (user / "checkpoint.txt").exists()
    doc: dict[str, Any] = json.loads((user / "L" / "t" / "try.json").read_text())
    assert doc["try_schema_version"] == "1.1" and doc["steps"] == 6 and doc["warmup"] == 2
    base = doc["baseline"]
    assert [r["steps"] for r in base["runs"]] == [6, 6]
    assert base["step_time_median_us"] > 0 and base["interval_us"] is not None
    assert base["losses_reproducible"] is True  # the planted job is deterministic: two runs, the same losses
    assert base["data_wait_median_us"] > 0
    (v,) = doc["variants"]
    assert v["name"] == "num_workers=2" and v["settings"] == {"num_workers": 2}
    assert v["applied"] == {"num_workers": 2}
    assert v["steps"] == 6 and v["verdict"] in VERDICTS - {"failed", "changed-numerics"}
    assert v["loss_max_abs_diff"] == 0.0  # workers change where items are made, not the numbers
    assert v["speedup"] > 0 and v["memory_peak_bytes"] > 0
    assert v["predicted_saving_us"] == base["data_wait_median_us"]
    assert v["measured_saving_us"] == pytest.approx(base["step_time_median_us"] - v["step_time_median_us"])
    assert proc.returncode == (0 if v["verdict"] == "faster" else 1)
    assert (v["code_change"] is not None) == (v["verdict"] == "faster")
    site = json.loads(next((user / "L" / "t" / "trials").glob("*num_workers=2/result.json")).read_text())
    line = next(n for n, text in enumerate(JOB.read_text().splitlines(), 1) if "loader = DataLoader(" in text)
    assert site["dataloader_sites"] == [f"{user / 'planted_loader.py'}:{line}"]  # the line to change
    for trial in sorted((user / "L" / "t" / "trials").iterdir()):
        result = json.loads((trial / "result.json").read_text())
        assert result["complete"] is True and result["optimizer_steps"] == 8
        assert len(result["losses"]) == 8 and all(isinstance(x, float) for x in result["losses"])
        assert "WANDB_MODE=disabled" in (trial / "output.log").read_text()  # trackers off in a trial
    assert "num_workers=2" in proc.stdout and "baseline" in proc.stdout
    assert (user / "L" / "t" / "try.md").read_text().startswith("# gpuprof try")


def test_a_crashing_variant_is_failed_and_the_others_go_on(tmp_path: Path) -> None:
    user = _user_dir(tmp_path)
    proc = _try("--logdir", "L", "--run-name", "c", "--steps", "4", "--warmup", "1", "--variants", "none",
                "--set", "num_workers=1", "--set", "zero_grad_set_to_none=true",
                "planted_loader.py", "--crash-with-workers", "--item-ms", "1", cwd=user)
    assert proc.returncode in (0, 1), proc.stderr
    doc = json.loads((user / "L" / "c" / "try.json").read_text())
    by = {v["name"]: v for v in doc["variants"]}
    failed = by["num_workers=1"]
    assert failed["verdict"] == "failed"
    assert "planted: this job breaks with DataLoader workers" in failed["error"]
    assert failed["step_time_median_us"] is None
    ok = by["zero_grad_set_to_none=True"]
    assert ok["steps"] == 4 and ok["verdict"] in {"faster", "same", "slower"} and ok["loss_max_abs_diff"] == 0.0
    assert [r["steps"] for r in doc["baseline"]["runs"]] == [4, 4]  # the baseline's last run came after the crash
    assert doc["variants"][-1]["name"] == "num_workers=1"  # failed ranks last
    assert "failed: the job failed (exit code 1)" in proc.stdout


def test_ctrl_c_stops_the_trial_and_writes_what_was_measured(tmp_path: Path) -> None:
    user = _user_dir(tmp_path)
    log = tmp_path / "err.txt"
    with open(log, "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "gpuprof", "try", "--logdir", "L", "--run-name", "i",
                                 "--steps", "3", "--warmup", "1", "--variants", "num_workers=1,num_workers=2",
                                 "planted_loader.py", "--item-ms", "50"],
                                cwd=user, env=_env(), stdout=subprocess.PIPE, stderr=err, text=True,
                                stdin=subprocess.DEVNULL,
                                # SIGINT back to its default in the child, as a terminal has it: a suite started in
                                # the background of a shell without job control inherits SIGINT ignored, and Python
                                # then installs no KeyboardInterrupt handler (tests/integrations/test_interrupt_exit.py)
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        deadline = time.monotonic() + 300
        while "trial 2/4" not in log.read_text() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        time.sleep(1.0)
        assert proc.poll() is None, log.read_text()  # still in its trials: the signal reaches a running try
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, log.read_text()
    doc = json.loads((user / "L" / "i" / "try.json").read_text())
    assert doc["interrupted"] is True
    assert len(doc["baseline"]["runs"]) == 1 and doc["baseline"]["runs"][0]["steps"] == 3
    assert doc["variants"] == []  # the interrupted trial is not reported as measured
    assert "interrupted" in out
    assert not (user / "checkpoint.txt").exists()


def test_a_job_shorter_than_the_trial_keeps_what_it_measured(tmp_path: Path) -> None:
    user = _user_dir(tmp_path)
    proc = _try("--logdir", "L", "--run-name", "s", "--steps", "5", "--warmup", "1", "--variants", "none",
                "--set", "zero_grad_set_to_none=true", "planted_loader.py", "--steps", "4", "--item-ms", "0", cwd=user)
    assert proc.returncode in (0, 1), proc.stderr
    doc = json.loads((user / "L" / "s" / "try.json").read_text())
    (v,) = doc["variants"]
    assert v["steps"] == 3 and "before --steps" in v["note"]
    assert [r["steps"] for r in doc["baseline"]["runs"]] == [3, 3]
    assert (user / "checkpoint.txt").exists()  # the job ended on its own: its own end ran, in its own directory


CONV = Path(__file__).resolve().parent / "jobs" / "planted_conv.py"


def _line(path: Path, text: str) -> int:
    return next(n for n, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def test_model_and_optimizer_variants_apply_without_editing_and_one_that_raises_is_failed(tmp_path: Path) -> None:
    """channels_last, foreach and fused are applied to the unchanged conv job (the trial says where the model was
    called and the optimizer built); autocast makes the planted model raise: that variant alone is failed."""
    user = tmp_path / "user"
    user.mkdir()
    (user / "planted_conv.py").write_bytes(CONV.read_bytes())
    before = _tree(user, "L")
    proc = _try("--logdir", "L", "--run-name", "m", "--steps", "3", "--warmup", "1", "--no-combine", "--html",
                "--variants", "channels_last,foreach,fused,autocast=bf16", "planted_conv.py", "--raise-in-forward",
                cwd=user)
    assert proc.returncode in (0, 1), proc.stderr
    assert _tree(user, "L") == before and not (user / "checkpoint.pt").exists()
    doc = json.loads((user / "L" / "m" / "try.json").read_text())
    assert doc["try_schema_version"] == "1.1" and doc["analysis"] is None
    by = {v["name"]: v for v in doc["variants"]}
    assert by["autocast=bf16"]["verdict"] == "failed"
    assert "planted: this model breaks under autocast" in by["autocast=bf16"]["error"]
    for name, key in (("channels_last", "channels_last"), ("foreach", "optimizer_foreach"),
                      ("fused", "optimizer_fused")):
        v = by[name]
        assert v["applied"] == {key: True}, v
        assert v["steps"] == 3 and v["numerics"] == ("precision" if name == "channels_last" else "reordered")
        assert v["verdict"] != "failed" and v["loss_max_rel_diff"] is not None
        assert (v["verdict"] == "changed-numerics") == (v["loss_max_rel_diff"] > v["loss_rtol"])
    sites = {p.name.split("-", 1)[1]: json.loads((p / "result.json").read_text()).get("sites")
             for p in (user / "L" / "m" / "trials").iterdir() if (p / "result.json").exists()}
    job = user / "planted_conv.py"
    assert sites["channels_last"] == {"model": [f"{job}:{_line(job, 'loss = loss_fn(model(x), y)')}"]}
    assert sites["fused"] == {"optimizer": [f"{job}:{_line(job, 'torch.optim.Adam(')}"]}
    page = (user / "L" / "m" / "try.html").read_text()
    assert "Content-Security-Policy" in page and "autocast=bf16" in page


def test_auto_tries_what_the_analysis_findings_suggest(tmp_path: Path) -> None:
    """The planted job loads in the training process: the analysis trial's report has GP601, which suggests the
    worker counts; nothing CUDA-only is tried on a CPU; the prediction is the finding's cost per step."""
    user = _user_dir(tmp_path)
    proc = _try("--logdir", "L", "--run-name", "a", "--steps", "3", "--warmup", "1", "--no-combine",
                "planted_loader.py", "--item-ms", "2", cwd=user)
    assert proc.returncode in (0, 1), proc.stderr
    assert not (user / "checkpoint.txt").exists()
    doc = json.loads((user / "L" / "a" / "try.json").read_text())
    a = doc["analysis"]
    assert a["error"] is None and (user / a["report"]).is_file()  # relative to the job's directory, as --logdir
    report = json.loads((user / a["report"]).read_text())
    gp601 = next(f for f in report["findings"] if f["code"] == "GP601")
    assert "GP601" in {f["code"] for f in a["findings"]}
    names = [v["name"] for v in doc["variants"]]
    assert names and set(names) <= {"num_workers=1", "num_workers=2", "prefetch_factor=4"}
    assert not any(n in names for n in ("pin_memory", "autocast=fp16", "matmul_precision=high"))
    for v in doc["variants"]:
        assert "GP601" in v["suggested_by"] or v["name"] == "prefetch_factor=4"
        if v["suggested_by"] == ["GP601"]:
            assert v["predicted_saving_us"] == pytest.approx(gp601["cost_us_per_step"])
    assert "variants from the baseline's analysis" in proc.stdout


def test_the_thread_clock_busy_trainer_job_trains_to_its_end(tmp_path: Path) -> None:
    """The job's other form (docs/try.md, "free core" and "busy trainer"): items timed on the loading thread's own
    CPU clock, the trainer's matmuls on two intra-op threads; run whole, it reaches its end."""
    user = _user_dir(tmp_path)
    proc = subprocess.run([sys.executable, "planted_loader.py", "--clock", "thread", "--threads", "2", "--width", "64",
                           "--matmuls", "2", "--steps", "3", "--item-ms", "1", "--done", "done.txt"], cwd=user,
                          env=_env(), capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    assert (user / "done.txt").read_text() == "trained\n" and "WANDB_MODE=online" in proc.stdout

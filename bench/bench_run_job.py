"""A whole job's CPU under ``gpuprof run`` against the bare job: the ratio issue 41 (item 10) bounds at 1.05x.

A plain CPU training loop (no gpuprof code) of ``--steps`` steps of about ``--step-ms`` of CPU each (a busy
loop on ``time.thread_time``, so the step costs the same CPU whatever the machine's load) runs as
``python job.py`` and as ``gpuprof run job.py`` in each round, the order alternating between rounds. The
figure of each side is the CPU of every process of the job (``resource.getrusage(RUSAGE_CHILDREN)`` around
``subprocess.run``: the launcher, the job and anything they start, user + system), with the default window
and checks on. The job also writes the CPU its own process had used when its first step began (start-up:
the interpreter, imports, gpuprof's bootstrap), so start-up is compared too (target: at most 0.3 s more).

    python bench/bench_run_job.py [--rounds 3] [--steps 2000] [--step-ms 5] [--out bench/out/run_job.json]

:func:`job_ratio` returns the figures (bench/budget.py calls it); ``main`` prints CPU seconds both ways,
per round, and the medians.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["JOB", "job_ratio", "one_job"]

JOB = """\
import sys, time
import torch
steps, step_s, mark = int(sys.argv[1]), float(sys.argv[2]) / 1000, sys.argv[3]
w = torch.nn.Linear(16, 16)
opt = torch.optim.SGD(w.parameters(), lr=0.01)
x = torch.randn(8, 16)
for i in range(steps):
    if i == 0:
        with open(mark, "w") as f:
            f.write(repr(time.process_time()))
    t = time.thread_time()
    while time.thread_time() - t < step_s:
        pass
    loss = w(x).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def _cpu_children() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def one_job(gpuprof: bool, steps: int, step_ms: float, work: Path) -> tuple[float, float]:
    """(CPU seconds of the whole job, CPU seconds of its process when the first step began)."""
    script = work / "job.py"
    if not script.exists():
        script.write_text(JOB)
    mark = work / "first_step_cpu"
    argv = [str(script), str(steps), str(step_ms), str(mark)]
    if gpuprof:
        cmd = [sys.executable, "-m", "gpuprof", "run", "--logdir", str(work / "logs"), *argv]
    else:
        cmd = [sys.executable, *argv]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    before = _cpu_children()
    subprocess.run(cmd, check=True, cwd=work, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return _cpu_children() - before, float(mark.read_text())


def job_ratio(rounds: int = 3, steps: int = 2000, step_ms: float = 5.0) -> dict[str, Any]:
    """Paired rounds of the bare job and the job under ``gpuprof run``: CPU seconds each way, per round and the
    medians, the whole-job ratio and the start-up difference (s of CPU before the first step)."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for r in range(rounds):
            order = (False, True) if r % 2 == 0 else (True, False)
            got = {side: one_job(side, steps, step_ms, work) for side in order}
            rows.append({"bare_cpu_s": round(got[False][0], 3), "run_cpu_s": round(got[True][0], 3),
                         "ratio": round(got[True][0] / got[False][0], 4),
                         "bare_startup_cpu_s": round(got[False][1], 3), "run_startup_cpu_s": round(got[True][1], 3)})
    return {"steps": steps, "step_ms": step_ms, "rounds": rows,
            "bare_cpu_s": statistics.median(r["bare_cpu_s"] for r in rows),
            "run_cpu_s": statistics.median(r["run_cpu_s"] for r in rows),
            "ratio": statistics.median(r["ratio"] for r in rows),
            "startup_extra_cpu_s": statistics.median(r["run_startup_cpu_s"] - r["bare_startup_cpu_s"] for r in rows)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--step-ms", type=float, default=5.0)
    ap.add_argument("--out", default="bench/out/run_job.json")
    a = ap.parse_args()
    res = job_ratio(a.rounds, a.steps, a.step_ms)
    for i, r in enumerate(res["rounds"]):
        print(f"round {i}: bare {r['bare_cpu_s']:.2f} s CPU, gpuprof run {r['run_cpu_s']:.2f} s CPU "
              f"({r['ratio']:.3f}x); start-up {r['bare_startup_cpu_s']:.2f} vs {r['run_startup_cpu_s']:.2f} s CPU")
    print(f"median: bare {res['bare_cpu_s']:.2f} s CPU, gpuprof run {res['run_cpu_s']:.2f} s CPU, "
          f"ratio {res['ratio']:.3f}x (target <= 1.05x); start-up +{res['startup_extra_cpu_s']:.2f} s CPU "
          "(target <= 0.3 s)")
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()

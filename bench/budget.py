"""The speed budget: every ratio gpuprof is held to, measured the same way in one run (issue 44).

Each ratio compares gpuprof with a yardstick on the same input, in paired rounds: every command of a group
runs once per round in a fresh child process, in an order that alternates between rounds, and the ratio is
taken per round (the median is the figure, with min-max beside it). A figure is the CPU seconds (user +
sys) of the child's whole process tree, from ``os.wait4`` (the child and every descendant it waited for),
which a loaded machine disturbs less than wall time; memory is the child's peak RSS (``ru_maxrss``).

| row | gpuprof | yardstick | budget |
|---|---|---|---|
| ``analyze/<input>`` | ``gpuprof analyze FILE --format json -o /dev/null`` | the shared parse floor ``bench/floor.py`` | <= 3.0x |
| ``rss/<input>`` | its peak RSS | the file's size | <= 1.0x |
| ``hta/<input>`` (200 MB inputs) | the same analyze | HTA 0.5's load + temporal + idle breakdown (``bench/bench_hta.py``) | HTA >= 6x gpuprof |
| ``memory-html/trace_plot`` | ``gpuprof memory show SNAP --html P`` on a 1M-entry snapshot | ``python -m torch.cuda._memory_viz trace_plot`` | <= 1.0x |
| ``memory-html/pickle`` | the same | ``pickle.load`` of the file | <= 3.0x |
| ``memory-html/rss`` | its peak RSS | the snapshot's size | <= 1.0x |
| ``help/click`` | ``gpuprof --help`` (10 runs a round) | ``python -c "import click"`` (10 runs) | <= 1.6x (docs/performance.md) |
| ``run/bare`` | ``gpuprof run --logdir D train.py``: 2,000 MLP training steps of ~5 ms CPU (``bench/bench_run_job.py``) | ``python train.py`` | <= 1.05x |
| ``run/bare-python`` | the same, 2,000 Python-heavy steps of ~5 ms CPU (a large recorded window) | ``python train.py`` | <= 1.05x |

The inputs: ``v100-200``/``small-200`` and ``v100-1000``/``small-1000`` are the shared ``bench/make_big.py``
inputs (``bench/bench_floor.py`` builds them: a V100 ResNet-50 trace x 6 / x 28, TraceLens's xDiT trace of
many small events x 3 / x 16), the 1M-entry snapshot is ``gpuprof_testing.synthpickle``'s (as
``bench/bench_memory_stream.py``); all are built in ``--workdir`` (default ``/tmp/gpuprof-budget``, outside
the repository) when missing and reused after. The shared floor is ``bench/floor.py`` of
``GPUPROF_SHARED_TRACES`` (default ``../shared``): without it this says so in one line and exits 2.

HTA runs where ``--hta-python`` names a Python that imports ``hta`` (``pip install
HolisticTraceAnalysis==0.5.0`` into a venv of its own); otherwise its rows say why and are skipped (not
failed).

Prints a table with the commit measured and the load average, appends one dated row to
``bench/results.md`` (``--no-record``: not), and exits 1 when a ratio is over its budget (2: the shared
floor is missing or a command failed).

    python bench/budget.py [--quick] [--rounds 3] [--only analyze,rss,hta,memory,help,run]
                           [--workdir /tmp/gpuprof-budget] [--hta-python PY] [--no-record]

``--quick``: the 200 MB inputs only (no 1 GB inputs); a few minutes on a quiet 2-core machine.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO))
sys.path.insert(1, str(REPO / "tests" / "support"))  # the test helpers (gpuprof_testing) live in tests/support/, outside the package

from bench_floor import FLOOR, SOURCES, ensure_input, floor_cmd, missing  # noqa: E402
from bench_hta import HTA_CODE, hta_importable, stage  # noqa: E402

RESULTS = REPO / "bench" / "results.md"
INPUTS = {"v100-200": ("v100", 200), "small-200": ("small-events", 200),
          "v100-1000": ("v100", 1000), "small-1000": ("small-events", 1000)}
GROUPS = ("analyze", "rss", "hta", "memory", "help", "run")
SNAP_ENTRIES = 1_000_000
HELP_REPEAT = 10  # `gpuprof --help` takes ~0.08 s: a round sums 10 runs of each side
RUN_STEPS, STEP_MS = 2000, 5.0


@dataclass
class Child:
    cpu_s: float
    peak_rss: int


@dataclass
class Ratio:
    """One budget line: the per-round ratios, the budget and which way it binds."""

    name: str
    what: str
    values: list[float] = field(default_factory=list)
    budget: float = 0.0
    at_least: bool = False  # True: the ratio must be >= budget (HTA slower than gpuprof)
    skipped: str = ""

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def over(self) -> bool:
        if self.skipped or not self.values:
            return False
        return self.median < self.budget if self.at_least else self.median > self.budget


Cmd = tuple[list[str], dict[str, str] | None]


def run_child(cmd: list[str], env: dict[str, str] | None, repeat: int = 1) -> Child:
    """``cmd`` in a fresh child (``repeat`` times, CPU summed): CPU of its process tree and its peak RSS."""
    cpu, rss = 0.0, 0
    for _ in range(repeat):
        # from a folder outside any checkout: ``python -m`` puts the working directory first on sys.path
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
                                cwd=tempfile.gettempdir())
        err = proc.stderr.read() if proc.stderr else b""  # drained while it runs: a full pipe would block it
        _, status, ru = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode not in (0, 1):
            tail = err.decode("utf-8", "replace").strip().splitlines()[-2:]
            raise RuntimeError(f"{' '.join(cmd[:4])} ... failed (exit {proc.returncode}): {' | '.join(tail)}")
        cpu += ru.ru_utime + ru.ru_stime
        rss = max(rss, ru.ru_maxrss * 1024)
    return Child(cpu, rss)


def paired(cmds: dict[str, Cmd], rounds: int, repeat: int = 1) -> list[dict[str, Child]]:
    """``rounds`` rounds of every command, the order reversed every other round."""
    out: list[dict[str, Child]] = []
    for r in range(rounds):
        order = list(cmds) if r % 2 == 0 else list(reversed(cmds))
        out.append({name: run_child(*cmds[name], repeat=repeat) for name in order})
    return out


def _gpuprof(*args: str) -> Cmd:
    return [sys.executable, "-m", "gpuprof", *args], {**os.environ, "PYTHONPATH": str(REPO)}


def _plain(*args: str) -> Cmd:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return [sys.executable, *args], env


def analyze_group(name: str, path: Path, rounds: int, groups: set[str], hta_python: str,
                  tmp: Path) -> list[Ratio]:
    fsize = path.stat().st_size
    cmds: dict[str, Cmd] = {
        "floor": (floor_cmd(path), None),
        "gpuprof": _gpuprof("analyze", str(path), "--format", "json", "-o", os.devnull, "--no-progress"),
    }
    out = [Ratio(f"analyze/{name}", "gpuprof analyze --format json / shared floor, CPU", budget=3.0),
           Ratio(f"rss/{name}", "gpuprof analyze peak RSS / file size", budget=1.0)]
    hta = Ratio(f"hta/{name}", "HTA 0.5 (load + temporal + idle) / gpuprof analyze, CPU", budget=6.0, at_least=True)
    if "hta" in groups and name.endswith("-200"):
        why = hta_importable(hta_python)
        if why:
            hta.skipped = why
        else:
            (tmp / name).mkdir()
            _, folder = stage(path, tmp / name)
            cmds["HTA"] = ([hta_python, "-c", HTA_CODE, str(folder), str(tmp / name / "phases.json")], None)
        out.append(hta)
    with open(path, "rb") as fh:  # a warm page cache for every command, in 1 MiB reads: a child's ru_maxrss
        while fh.read(1 << 20):  # starts at the peak of the process it was forked from (bench/README.md)
            pass
    for rnd in paired(cmds, rounds):
        out[0].values.append(rnd["gpuprof"].cpu_s / rnd["floor"].cpu_s)
        out[1].values.append(rnd["gpuprof"].peak_rss / fsize)
        if "HTA" in rnd:
            hta.values.append(rnd["HTA"].cpu_s / rnd["gpuprof"].cpu_s)
    if "analyze" not in groups:
        out = out[1:]
    if "rss" not in groups:
        out = [r for r in out if not r.name.startswith("rss/")]
    return out


def memory_group(workdir: Path, rounds: int, tmp: Path) -> list[Ratio]:
    snap = workdir / "snapshot_1M.pickle"
    if not snap.exists():
        workdir.mkdir(parents=True, exist_ok=True)
        part = snap.with_name(snap.name + ".part")
        code = "import sys\nfrom gpuprof_testing.synthpickle import write_snapshot\nwrite_snapshot(sys.argv[1], int(sys.argv[2]))"
        subprocess.run([sys.executable, "-c", code, str(part), str(SNAP_ENTRIES)], check=True,
                       env={**os.environ, "PYTHONPATH": os.pathsep.join((str(REPO), str(REPO / "tests" / "support")))},
                       cwd=tempfile.gettempdir())
        os.replace(part, snap)
    cmds: dict[str, Cmd] = {
        "gpuprof": _gpuprof("memory", "show", str(snap), "--fail-on", "never", "--html", str(tmp / "page.html")),
        "pickle": _plain("-c", "import pickle, sys; pickle.load(open(sys.argv[1], 'rb'))", str(snap)),
        "trace_plot": _plain("-W", "ignore", "-m", "torch.cuda._memory_viz", "trace_plot", str(snap),
                             "-o", str(tmp / "trace_plot.html")),
    }
    out = [Ratio("memory-html/trace_plot", "gpuprof memory show --html / torch _memory_viz trace_plot, CPU", budget=1.0),
           Ratio("memory-html/pickle", "gpuprof memory show --html / pickle.load, CPU", budget=3.0),
           Ratio("memory-html/rss", "gpuprof memory show --html peak RSS / snapshot size", budget=1.0)]
    fsize = snap.stat().st_size
    for rnd in paired(cmds, rounds):
        out[0].values.append(rnd["gpuprof"].cpu_s / rnd["trace_plot"].cpu_s)
        out[1].values.append(rnd["gpuprof"].cpu_s / rnd["pickle"].cpu_s)
        out[2].values.append(rnd["gpuprof"].peak_rss / fsize)
    return out


def help_group(rounds: int) -> list[Ratio]:
    cmds = {"gpuprof": _gpuprof("--help"), "click": _plain("-c", "import click")}
    r = Ratio("help/click", "gpuprof --help / python -c 'import click', CPU", budget=1.6)
    for rnd in paired(cmds, rounds, repeat=HELP_REPEAT):
        r.values.append(rnd["gpuprof"].cpu_s / rnd["click"].cpu_s)
    return [r]


def run_group(rounds: int, steps: int) -> list[Ratio]:
    """Both jobs of bench/bench_run_job.py (its job_ratio: CPU of every process of the job tree, os.wait4)."""
    from bench_run_job import job_ratio

    out = []
    for job, name, what in (("mlp", "run/bare", "an MLP training step"),
                            ("python", "run/bare-python", "a Python-heavy step")):
        res = job_ratio(rounds, steps, STEP_MS, job)
        r = Ratio(name, f"gpuprof run / bare, whole job CPU ({steps} steps of ~{STEP_MS:g} ms: {what})", budget=1.05)
        r.values = [row["run_ratio"] for row in res["rounds"]]
        out.append(r)
    return out


def commit() -> str:
    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "gpuprof"], cwd=REPO, capture_output=True,
                               text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return sha + ("+dirty" if dirty else "")


def fmt(r: Ratio) -> str:
    if r.skipped:
        return "skipped"
    return f"{r.median:.2f}x"


def record(rows: list[Ratio], sha: str, load: tuple[float, float], rounds: int, quick: bool) -> None:
    """One dated row in bench/results.md: the commit, the load average at start and end, each ratio."""
    head = "| date (UTC) | commit | load | rounds | " + " | ".join(r.name for r in rows) + " |"
    line = (f"| {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} | `{sha}` | {load[0]:.1f}-{load[1]:.1f} | "
            f"{rounds}{' quick' if quick else ''} | " + " | ".join(fmt(r) for r in rows) + " |")
    text = RESULTS.read_text() if RESULTS.exists() else ""
    if head not in text:  # a new set of columns (a subset, another set of inputs): its own table
        text += f"\n{head}\n|" + "---|" * (4 + len(rows)) + "\n"
    # the row goes right under its table's last row
    lines = text.splitlines()
    at = max(i for i, ln in enumerate(lines) if ln == head)
    end = at + 2
    while end < len(lines) and lines[end].startswith("| "):
        end += 1
    lines.insert(end, line)
    RESULTS.write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the 200 MB inputs only")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", default=",".join(GROUPS), help=f"groups to run, of {','.join(GROUPS)}")
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "gpuprof-budget")
    ap.add_argument("--hta-python", default="", help="a Python that imports hta (HolisticTraceAnalysis 0.5)")
    ap.add_argument("--run-steps", type=int, default=RUN_STEPS, help=argparse.SUPPRESS)
    ap.add_argument("--no-record", action="store_true", help="do not append the row to bench/results.md")
    a = ap.parse_args(argv)
    groups = {g for g in a.only.split(",") if g}
    if groups - set(GROUPS) or a.rounds < 3:
        print(f"budget: --only takes {','.join(GROUPS)}; --rounds at least 3 (paired rounds)", file=sys.stderr)
        return 2
    why = missing()
    if why:
        print(f"budget: {why}", file=sys.stderr)
        return 2
    sha, load0 = commit(), os.getloadavg()[0]
    print(f"budget: commit {sha}, {a.rounds} paired rounds, load {load0:.1f}, floor {FLOOR}", flush=True)
    rows: list[Ratio] = []
    steps: list[tuple[str, Callable[[Path], list[Ratio]]]] = []
    names = [n for n in INPUTS if not (a.quick and n.endswith("-1000"))]
    if groups & {"analyze", "rss", "hta"}:
        for name in names:
            kind, size = INPUTS[name]
            if not SOURCES[kind].exists():
                print(f"budget: {kind}: source trace not found ({SOURCES[kind]})", file=sys.stderr)
                return 2
            steps.append((name, lambda tmp, name=name, kind=kind, size=size: analyze_group(
                name, ensure_input(kind, size, a.workdir), a.rounds, groups, a.hta_python, tmp)))
    if "memory" in groups:
        steps.append(("memory", lambda tmp: memory_group(a.workdir, a.rounds, tmp)))
    if "help" in groups:
        steps.append(("help", lambda tmp: help_group(a.rounds)))
    if "run" in groups:
        steps.append(("run", lambda tmp: run_group(a.rounds, a.run_steps)))
    try:
        for label, step in steps:
            t0 = time.perf_counter()
            with tempfile.TemporaryDirectory(prefix="gpuprof-budget-") as tmp:
                got = step(Path(tmp))
            rows += got
            for r in got:
                print(f"  {r.name:24s} {fmt(r):>8s}  ({_spread(r)})  {label}, {time.perf_counter() - t0:.0f} s",
                      flush=True)
    except (RuntimeError, subprocess.CalledProcessError) as err:
        print(f"budget: {err}", file=sys.stderr)
        return 2
    load1 = os.getloadavg()[0]
    print(f"\ncommit {sha}, load average {load0:.1f} at the start, {load1:.1f} at the end; "
          f"{a.rounds} paired rounds, CPU s of each process tree (wait4)\n")
    print(f"| {'ratio':24s} | median | min-max | budget | |")
    print(f"|{'-' * 26}|--------|---------|--------|---|")
    for r in rows:
        bound = (">= " if r.at_least else "<= ") + f"{r.budget:g}x"
        state = f"skipped: {r.skipped}" if r.skipped else ("OVER" if r.over else "ok")
        print(f"| {r.name:24s} | {fmt(r):>6s} | {_spread(r):>7s} | {bound:>6s} | {state} |  {r.what}")
    if not a.no_record:
        record(rows, sha, (load0, load1), a.rounds, a.quick)
    over = [r.name for r in rows if r.over]
    if over:
        print(f"\nover budget: {', '.join(over)}")
    return 1 if over else 0


def _spread(r: Ratio) -> str:
    return "" if r.skipped or not r.values else f"{min(r.values):.2f}-{max(r.values):.2f}"


if __name__ == "__main__":
    sys.exit(main())

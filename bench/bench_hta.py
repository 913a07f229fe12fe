"""Benchmark: ``gpuprof analyze`` against HolisticTraceAnalysis's load + temporal + idle breakdown, same file.

Issue 24 ("Speed", item 2) asks gpuprof to be at least 10x faster than HTA
doing the nearest equivalent work on the same trace:

* gpuprof: ``python -m gpuprof analyze FILE --format json -o /dev/null``, end
  to end (interpreter start, imports, load, every rule, the JSON report);
* HTA (``--hta-python``, a Python where ``import hta`` works, e.g. the private
  venv of ``bench/compare_hta.py``): ``TraceAnalysis(trace_dir=DIR)`` (which
  loads and parses the trace), ``get_temporal_breakdown()`` and
  ``get_idle_time_breakdown()`` for every rank HTA found, without plots. HTA
  only reads folders: DIR is a fresh temporary folder holding a hard link to
  FILE (a symbolic link when FILE is on another file system; HTA ``open()``s
  it, which follows the link), removed afterwards.

Each command runs in a fresh child process, ``--rounds`` times per file, the
order alternating per round (gpuprof, HTA, then HTA, gpuprof, ...) so that
neither always runs first. Figures per child: CPU seconds (user + sys from
``os.wait4``, i.e. the child and any children it waited for; the figure to
trust on a loaded machine), wall seconds and peak RSS. The table gives the
median over rounds and the ratio HTA / gpuprof per round (paired), median with
min-max. The load average is printed at the start and the end.

HTA may take minutes and gigabytes on a 200 MB trace: a child that runs past
``--timeout`` seconds or past ``--max-rss-gb`` of RSS is killed, HTA is not
run again on that file, and its figures are reported as lower bounds (``>``).

``.json.gz`` files are decompressed into a temporary folder first and both
tools read the same decompressed file (gpuprof reads gzip itself, HTA too, but
then the comparison would include two different gzip readers).

Default files: the two 200 MB traces ``bench/bench_floor.py`` uses (the shared
``bench/make_big.py``'s V100 ResNet-50 and xDiT many-small-events inputs),
looked up in ``--workdir`` and built there when missing, then the V100 sample
one is made from (so that the growth with size shows). The floor in the rounds
is the shared one (``bench/floor.py`` of ``GPUPROF_SHARED_TRACES``).

Usage: ``python bench/bench_hta.py --hta-python /work/venv-hta/bin/python
[--files F1,F2] [--rounds 2] [--timeout 900] [--workdir bench/out]``. Without
``--hta-python``, or when HTA does not import there, it says so and exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO))

from bench_floor import FLOOR, SOURCES, ensure_input, floor_cmd, missing  # noqa: E402

TARGET = 10.0  # issue 24: HTA / gpuprof >= 10x
MB = 1_000_000

# The HTA child: argv[1] the folder, argv[2] a file for the phase times (JSON). Plots off; every rank found.
HTA_CODE = """\
import json, sys, time
t0 = time.process_time()
from hta.trace_analysis import TraceAnalysis
t1 = time.process_time()
ta = TraceAnalysis(trace_dir=sys.argv[1])
ranks = ta.t.get_ranks()
if not ranks:
    sys.exit("HTA found no rank in " + sys.argv[1])
t2 = time.process_time()
ta.get_temporal_breakdown(visualize=False)
t3 = time.process_time()
ta.get_idle_time_breakdown(ranks=ranks, visualize=False)
t4 = time.process_time()
rows = {r: len(ta.t.get_trace(r)) for r in ranks}  # the events HTA kept (it drops some kinds, and partial steps)
with open(sys.argv[2], "w") as f:
    json.dump({"import": t1 - t0, "load": t2 - t1, "temporal": t3 - t2, "idle": t4 - t3, "rows": rows}, f)
"""


_GUNZIP = "import gzip, shutil, sys\nwith gzip.open(sys.argv[1]) as s, open(sys.argv[2], 'wb') as d: shutil.copyfileobj(s, d)"


@dataclass
class Run:
    """One child: CPU and wall seconds, peak RSS, exit status, and why it was stopped (if it was)."""

    cpu_s: float
    wall_s: float
    peak_rss: int
    exit: int
    stopped: str = ""  # "" = ran to its end; else "timeout after N s" / "killed at N GB RSS"
    stderr: str = ""


def run_child(cmd: list[str], *, env: dict[str, str] | None = None, cwd: str | None = None,
              timeout_s: float | None = None, max_rss: int | None = None, poll_s: float = 0.2) -> Run:
    """Run ``cmd`` in a fresh child (own session) and measure it with ``os.wait4``.

    Past ``timeout_s`` seconds, or once its RSS exceeds ``max_rss`` bytes, the
    child's process group is killed; the figures are then those up to the kill.
    """
    with tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=env, cwd=cwd,
                                start_new_session=True)
        stopped = ""
        while True:
            pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
            if pid == proc.pid:
                break
            elapsed = time.perf_counter() - t0
            if not stopped and timeout_s is not None and elapsed > timeout_s:
                stopped = f"timeout after {timeout_s:g} s"
            elif not stopped and max_rss is not None and _rss(proc.pid) > max_rss:
                stopped = f"killed at {max_rss / 1e9:g} GB RSS"
            if stopped:
                _kill_group(proc.pid)
                _, status, ru = os.wait4(proc.pid, 0)
                break
            time.sleep(poll_s)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: keep Popen from waiting again
        err.seek(0)
        tail = [ln for ln in err.read().decode("utf-8", "replace").splitlines() if ln.strip()]
    return Run(cpu_s=ru.ru_utime + ru.ru_stime, wall_s=wall, peak_rss=ru.ru_maxrss * 1024, exit=proc.returncode,
               stopped=stopped, stderr="\n".join(tail[-3:]))


def _rss(pid: int) -> int:
    """Resident bytes of ``pid`` now (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:  # exited between two polls: wait4 reaps it next
        return 0
    return 0


def _kill_group(pid: int) -> None:
    """SIGKILL the child's own session (it and anything it started), by the id we started it with."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:  # already gone
        pass


def hta_importable(python: str | None) -> str:
    """"" when ``python`` can import HTA's TraceAnalysis; else one line saying why not."""
    if not python:
        return "no --hta-python given"
    try:
        cp = subprocess.run([python, "-c", "import hta.trace_analysis"], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"{python}: {err}"
    if cp.returncode != 0:
        last = (cp.stderr.strip().splitlines() or ["exit " + str(cp.returncode)])[-1]
        return f"{python}: cannot import hta.trace_analysis ({last})"
    return ""


def stage(path: Path, tmp: Path) -> tuple[Path, Path]:
    """The file both tools read, and HTA's folder holding it (under ``tmp``).

    A ``.gz`` file is decompressed into ``tmp`` (in a child: the buffers would
    raise this process's peak RSS, which Linux passes on to every later child's
    ``ru_maxrss``); any other file is hard-linked into the folder, or symlinked
    where a hard link is not possible.
    """
    folder = tmp / "hta_trace_dir"
    folder.mkdir()
    if path.name.endswith(".gz"):
        target = folder / path.name[:-3]
        subprocess.run([sys.executable, "-c", _GUNZIP, str(path), str(target)], check=True)
        return target, folder
    name = path.name if path.name.endswith(".json") else path.name + ".json"  # HTA lists *.json and *.gz only
    target = folder / name
    try:
        os.link(path, target)
    except OSError:  # another file system, or links not allowed: HTA open()s the name, which follows a symlink
        os.symlink(path.resolve(), target)
    return path if name == path.name else target, folder


Cmd = tuple[list[str], dict[str, str] | None, str | None]  # argv, environment, working directory


def commands(trace: Path, folder: Path, hta_python: str, phases: Path, floor: bool) -> dict[str, Cmd]:
    """The commands of a round (``floor``: add the shared parse floor, the least any reader of every event pays)."""
    py = sys.executable
    out: dict[str, Cmd] = {
        "gpuprof": ([py, "-m", "gpuprof", "analyze", str(trace), "--format", "json", "-o", os.devnull, "--no-progress"],
                    {**os.environ, "PYTHONPATH": str(REPO)}, str(REPO)),
        "HTA": ([hta_python, "-c", HTA_CODE, str(folder), str(phases)], None, None),
    }
    if floor:
        out["floor"] = (floor_cmd(trace), None, None)
    return out


def ratios(rounds: list[dict[str, Run]], key: str) -> list[float]:
    """HTA / gpuprof per round that ran both (``key``: ``cpu_s`` or ``wall_s``)."""
    return [getattr(r["HTA"], key) / getattr(r["gpuprof"], key) for r in rounds if "HTA" in r and "gpuprof" in r]


def summarize(rounds: list[dict[str, Run]]) -> dict[str, Any]:
    """Medians per tool, ratios (median, min, max), and whether HTA's figures are lower bounds."""
    out: dict[str, Any] = {}
    for tool in ("gpuprof", "HTA", "floor"):
        runs = [r[tool] for r in rounds if tool in r]
        if runs:
            out[tool] = {"cpu_s": statistics.median(x.cpu_s for x in runs),
                         "wall_s": statistics.median(x.wall_s for x in runs),
                         "peak_rss": statistics.median(x.peak_rss for x in runs), "n": len(runs)}
    for key in ("cpu_s", "wall_s"):
        rs = ratios(rounds, key)
        if rs:
            out[f"ratio_{key}"] = [statistics.median(rs), min(rs), max(rs)]
    out["hta_lower_bound"] = any(r["HTA"].stopped for r in rounds if "HTA" in r)
    # the most any reader of every event could reach: HTA / floor, paired
    hf = [r["HTA"].cpu_s / r["floor"].cpu_s for r in rounds if "HTA" in r and "floor" in r]
    if hf:
        out["hta_over_floor_cpu_s"] = [statistics.median(hf), min(hf), max(hf)]
    return out


def bench_file(path: Path, hta_python: str, n_rounds: int, timeout_s: float, max_rss: int | None,
               floor: bool = True) -> dict[str, Any]:
    """All rounds on one file; the temporary folder is removed whatever happens."""
    with tempfile.TemporaryDirectory(prefix="bench_hta_") as tmp_s:
        tmp = Path(tmp_s)
        trace, folder = stage(path, tmp)
        size = trace.stat().st_size
        # page cache warm for both; read in a child (same reason as the gunzip)
        subprocess.run([sys.executable, str(REPO / "bench" / "bench_floor.py"), "--warm", str(trace)], check=True)
        phases_file = tmp / "phases.json"
        cmds = commands(trace, folder, hta_python, phases_file, floor)
        rounds: list[dict[str, Run]] = []
        phases: list[dict[str, Any]] = []
        hta_done = False  # stopped once (timeout / memory): not run again on this file
        for r in range(n_rounds):
            order = list(cmds) if r % 2 == 0 else list(reversed(cmds))
            this: dict[str, Run] = {}
            for name in order:
                if name == "HTA" and hta_done:
                    continue
                cmd, env, cwd = cmds[name]
                phases_file.unlink(missing_ok=True)
                run = run_child(cmd, env=env, cwd=cwd, timeout_s=timeout_s if name == "HTA" else None,
                                max_rss=max_rss if name == "HTA" else None)
                ok = run.exit in (0, 1) if name == "gpuprof" else run.exit == 0  # gpuprof 1: findings at the bar
                if not ok and not run.stopped:
                    raise SystemExit(f"bench_hta: {name} failed on {path} (exit {run.exit}): {run.stderr[-400:]}")
                this[name] = run
                if name == "HTA":
                    hta_done = bool(run.stopped)
                    if phases_file.exists():
                        phases.append(json.loads(phases_file.read_text()))
                print(f"  round {r + 1} {name:8s} CPU {run.cpu_s:8.2f} s  wall {run.wall_s:8.2f} s  "
                      f"peak RSS {run.peak_rss / MB:7.0f} MB{'  ' + run.stopped if run.stopped else ''}", flush=True)
            rounds.append(this)
    return {"file": str(path), "bytes": size, "rounds": [{k: asdict(v) for k, v in r.items()} for r in rounds],
            "hta_phases_cpu_s": phases, **summarize(rounds)}


def default_files(workdir: Path) -> list[Path]:
    """The two 200 MB traces bench_floor.py uses (built here with the shared make_big.py when missing), then
    the 35 MB V100 source of one of them."""
    out = []
    for kind, source in SOURCES.items():
        if source.exists() and not missing():
            out.append(ensure_input(kind, 200, workdir))
    if SOURCES["v100"].exists():
        out.append(SOURCES["v100"])
    return out


def verdict(s: dict[str, Any]) -> str:
    """Against the target: met, not met, or unknown (HTA stopped below the target: only a lower bound)."""
    r = s.get("ratio_cpu_s")
    if not r:
        return "unknown (no paired round)"
    if r[0] >= TARGET:
        return "met"
    return "unknown (HTA stopped: a lower bound below the target)" if s["hta_lower_bound"] else "not met"


def _fmt_ratio(s: dict[str, Any], key: str) -> str:
    r = s.get(f"ratio_{key}")
    if not r:
        return "-"
    gt = ">" if s["hta_lower_bound"] else ""
    return f"{gt}{r[0]:.1f}x ({r[1]:.1f}-{r[2]:.1f})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hta-python", default="", help="a Python where `import hta` works (e.g. /work/venv-hta/bin/python)")
    ap.add_argument("--files", default="", help="comma-separated traces (.json or .json.gz); default: see the module docstring")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds before an HTA child is killed")
    ap.add_argument("--no-floor", action="store_true",
                    help="leave out the shared parse floor (bench/floor.py of GPUPROF_SHARED_TRACES) from the rounds")
    ap.add_argument("--max-rss-gb", type=float, default=12.0, help="HTA child killed past this RSS (0: no limit)")
    ap.add_argument("--workdir", type=Path, default=REPO / "bench" / "out",
                    help="where the default 200 MB traces are (built when missing)")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "out" / "hta_results.json", help="results (JSON)")
    a = ap.parse_args(argv)
    if a.rounds < 1:
        ap.error("--rounds must be at least 1")
    why = hta_importable(a.hta_python)
    if why:
        print(f"bench_hta: HolisticTraceAnalysis is not available ({why}): nothing to compare. "
              "Install it in a private venv as bench/compare_hta.py says and pass --hta-python.")
        return 0
    files = [Path(f) for f in a.files.split(",") if f.strip()] if a.files else default_files(a.workdir)
    missing = [str(f) for f in files if not f.is_file()]
    if missing or not files:
        print(f"bench_hta: no such trace file: {', '.join(missing) or '(none found)'}", file=sys.stderr)
        return 2
    max_rss = int(a.max_rss_gb * 1e9) if a.max_rss_gb > 0 else None
    if not a.no_floor and not FLOOR.is_file():
        print(f"bench_hta: the shared parse floor {FLOOR} is absent (set GPUPROF_SHARED_TRACES): rounds without it")
        a.no_floor = True
    out: dict[str, Any] = {"load_start": os.getloadavg(), "cpus": len(os.sched_getaffinity(0)),
                           "hta_python": a.hta_python, "timeout_s": a.timeout, "max_rss": max_rss, "files": []}
    print(f"load average at start {out['load_start'][0]:.2f} {out['load_start'][1]:.2f} {out['load_start'][2]:.2f} "
          f"({out['cpus']} CPUs)", flush=True)
    for f in files:
        print(f"{f} ({f.stat().st_size / MB:.0f} MB on disk)", flush=True)
        out["files"].append(bench_file(f, a.hta_python, a.rounds, a.timeout, max_rss, not a.no_floor))
    out["load_end"] = os.getloadavg()
    out["bench_peak_rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(out, indent=1) + "\n")
    print()
    print("| file | size | gpuprof CPU / wall | HTA CPU / wall | HTA / gpuprof CPU | HTA / gpuprof wall "
          "| peak RSS gpuprof / HTA | floor CPU | HTA / floor CPU | HTA rows |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for s in out["files"]:
        g, h, fl = s["gpuprof"], s.get("HTA"), s.get("floor")
        gt = ">" if s["hta_lower_bound"] else ""
        hta = f"{gt}{h['cpu_s']:.2f} s / {gt}{h['wall_s']:.2f} s" if h else "-"
        rss = f"{g['peak_rss'] / MB:.0f} MB / {gt}{h['peak_rss'] / MB:.0f} MB" if h else "-"
        hf = s.get("hta_over_floor_cpu_s")
        rows = ", ".join(str(v) for v in s["hta_phases_cpu_s"][0]["rows"].values()) if s["hta_phases_cpu_s"] else "-"
        floor_cpu = f"{fl['cpu_s']:.2f} s" if fl else "-"
        hta_floor = f"{gt}{hf[0]:.1f}x ({hf[1]:.1f}-{hf[2]:.1f})" if hf else "-"
        print(f"| {Path(s['file']).name} | {s['bytes'] / MB:.0f} MB | {g['cpu_s']:.2f} s / {g['wall_s']:.2f} s | {hta} "
              f"| {_fmt_ratio(s, 'cpu_s')} | {_fmt_ratio(s, 'wall_s')} | {rss} | {floor_cpu} | {hta_floor} | {rows} |")
    verdicts = [verdict(s) for s in out["files"]]
    print(f"\ntarget HTA / gpuprof CPU >= {TARGET:.0f}x (median of rounds; '>' = HTA stopped, a lower bound): "
          + ", ".join(f"{Path(s['file']).name} {v}" for s, v in zip(out["files"], verdicts)))
    print(f"load average at end {out['load_end'][0]:.2f} {out['load_end'][1]:.2f} {out['load_end'][2]:.2f}; "
          f"bench RSS {out['bench_peak_rss'] / MB:.0f} MB (no child's peak RSS can read lower); results in {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

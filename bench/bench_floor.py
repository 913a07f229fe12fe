"""Benchmark: ``gpuprof analyze`` CPU time against the shared parse floor, in one run.

The floor is the project's one yardstick for speed: ``bench/floor.py`` in the shared data folder
(``GPUPROF_SHARED_TRACES``, default ``../shared``; its README says what it is): one msgspec decode of
the file into structs of just the fields an analysis needs, not tracked by the garbage collector. There
is no copy of it in this repository, so every figure is against the same script; without the shared
folder this benchmark says so in one line and exits 2.

The inputs are the shared folder's, built by its ``bench/make_big.py`` (a real trace repeated with
shifted timestamps and ids), in ``--workdir`` (build them outside the repository, e.g. under /tmp):

* ``v100``: ``tbplugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz`` x 6
  (~200 MB) or x 28 (~1 GB): a V100 ResNet-50 run, mostly GPU events;
* ``small-events``: TraceLens's ``xdit_sd_3.5/profile_trace_rank_0.json.gz`` x 3 or x 16: many small
  CPU operators and kernels.

Then ``--rounds`` times, in alternating order, each in a fresh child process: the floor (``python
floor.py FILE``), ``gpuprof analyze FILE --format json -o /dev/null`` and ``json.load``. Figures are
CPU seconds (user + sys of the child, from ``wait4``), which a loaded machine disturbs less than wall
time, and each child's peak RSS. Ratios are taken per round (paired) and the median is reported, with
min and max, beside the load average. Targets (issue "Speed"): gpuprof <= 2.0x the floor's CPU time;
peak RSS <= 1.0x the file.

``--before DIR`` adds another checkout's ``gpuprof analyze`` (``PYTHONPATH=DIR``) to the same rounds:
a before/after of one run.

Usage: ``python bench/bench_floor.py [--sizes 200,1000] [--rounds 3] [--kinds v100,small-events]
[--workdir /tmp/gpuprof-bench] [--before DIR]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(1, str(REPO / "tests" / "support"))  # the test helpers (gpuprof_testing) live in tests/support/, outside the package

from gpuprof_testing.realtraces import ROOT, TRACES  # noqa: E402

FLOOR = ROOT / "bench" / "floor.py"
MAKE_BIG = ROOT / "bench" / "make_big.py"
TARGET = 2.0

SOURCES = {
    "v100": TRACES / "tbplugin" / "samples" / "resnet50_num_workers_0" / "worker0.1623143089861.pt.trace.json.gz",
    "small-events": TRACES / "hta" / "TraceLens" / "tests" / "traces" / "inference" / "xdit_sd_3.5" / "profile_trace_rank_0.json.gz",
}
# copies of each source for each size (MB), as the shared bench/README.md gives them
COPIES = {"v100": {200: 6, 1000: 28}, "small-events": {200: 3, 1000: 16}}


def missing() -> str:
    """One line saying what of the shared floor is missing; empty when both scripts are there."""
    absent = [str(p) for p in (FLOOR, MAKE_BIG) if not p.is_file()]
    if not absent:
        return ""
    return (f"the shared parse floor is absent ({', '.join(absent)}): set GPUPROF_SHARED_TRACES to the folder "
            "holding bench/floor.py and bench/make_big.py (default ../shared beside the repository)")


def floor_cmd(path: Path) -> list[str]:
    """The floor's command line for ``path`` (an uncompressed trace: the floor reads the bytes as they are)."""
    return [sys.executable, str(FLOOR), str(path)]


def input_path(kind: str, size: int, workdir: Path) -> Path:
    return workdir / f"floor_{kind}_{size}MB.json"


def ensure_input(kind: str, size: int, workdir: Path) -> Path:
    """The shared input of this kind and size, built with the shared make_big.py when missing (in a child, so
    that its memory is not this process's; to a temporary name first, so a killed build is never reused)."""
    path = input_path(kind, size, workdir)
    if path.exists():
        return path
    workdir.mkdir(parents=True, exist_ok=True)
    part = path.with_name(path.name + ".part")
    print(f"bench_floor: building {path} (make_big.py, {COPIES[kind][size]} copies)", file=sys.stderr, flush=True)
    try:
        subprocess.run([sys.executable, str(MAKE_BIG), str(SOURCES[kind]), str(part), str(COPIES[kind][size])],
                       check=True)
        os.replace(part, path)
    finally:
        part.unlink(missing_ok=True)
    return path


def warm(path: Path) -> None:
    """Read the file once: every command then sees a warm page cache."""
    with open(path, "rb") as fh:
        while fh.read(64 << 20):
            pass


def run(cmd: list[str], env: dict[str, str] | None = None) -> dict[str, float]:
    """CPU seconds (user + sys), wall seconds and peak RSS bytes of ``cmd`` in a fresh child."""
    t0 = time.perf_counter()
    # run from the checkout named by PYTHONPATH: ``python -m`` puts the working directory first on sys.path
    cwd = env["PYTHONPATH"] if env is not None else None
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=cwd)
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode("utf-8", "replace") if proc.stderr else ""
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{cmd[:4]} failed ({proc.returncode}): {err[-400:]}")
    return {"cpu_s": ru.ru_utime + ru.ru_stime, "wall_s": wall, "peak_rss": ru.ru_maxrss * 1024}


def commands(path: Path, before: Path | None = None) -> dict[str, tuple[list[str], dict[str, str] | None]]:
    """The commands of a round, each with its environment (None: this one's)."""
    py = sys.executable
    gpuprof = [py, "-m", "gpuprof", "analyze", str(path), "--format", "json", "-o", os.devnull, "--no-progress"]
    out: dict[str, tuple[list[str], dict[str, str] | None]] = {
        "floor": (floor_cmd(path), None),
        "gpuprof": (gpuprof, {**os.environ, "PYTHONPATH": str(REPO)}),
        "json.load": ([py, "-c", "import json, sys\nwith open(sys.argv[1], 'rb') as f: json.load(f)", str(path)], None),
    }
    if before is not None:  # another checkout, in the same rounds: an A/B of one run
        out["gpuprof-before"] = (gpuprof, {**os.environ, "PYTHONPATH": str(before)})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="200", help="input sizes in MB, comma-separated: 200 and/or 1000")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--kinds", default=",".join(SOURCES))
    ap.add_argument("--workdir", type=Path, default=REPO / "bench" / "out")
    ap.add_argument("--before", type=Path, help="another gpuprof checkout, run in the same rounds (an A/B)")
    ap.add_argument("--warm", metavar="PATH", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.warm:
        warm(Path(a.warm))
        return 0
    why = missing()
    if why:
        print(f"bench_floor: {why}", file=sys.stderr)
        return 2
    sizes = [int(x) for x in a.sizes.split(",") if x]
    kinds = [k for k in a.kinds.split(",") if k]
    bad = [f"size {x}" for x in sizes if x not in (200, 1000)] + [f"kind {k!r}" for k in kinds if k not in SOURCES]
    if bad:
        print(f"bench_floor: unknown {', '.join(bad)} (sizes: 200, 1000; kinds: {', '.join(SOURCES)})",
              file=sys.stderr)
        return 2
    out: dict[str, Any] = {"floor": str(FLOOR), "load_before": os.getloadavg(),
                           "cpus": len(os.sched_getaffinity(0)), "kinds": {}}
    for size in sizes:
        for kind in kinds:
            if not SOURCES[kind].exists():
                print(f"bench_floor: {kind}: source not found ({SOURCES[kind]}); skipped", file=sys.stderr)
                continue
            path = ensure_input(kind, size, a.workdir)
            fsize = path.stat().st_size
            subprocess.run([sys.executable, __file__, "--warm", str(path)], check=True)
            load0 = os.getloadavg()[0]
            rounds: list[dict[str, dict[str, float]]] = []
            cmds = commands(path, a.before)
            for r in range(a.rounds):
                order = list(cmds) if r % 2 == 0 else list(reversed(cmds))
                rounds.append({name: run(*cmds[name]) for name in order})
            ratios = [x["gpuprof"]["cpu_s"] / x["floor"]["cpu_s"] for x in rounds]
            vs_json = [x["gpuprof"]["cpu_s"] / x["json.load"]["cpu_s"] for x in rounds]
            rss = [x["gpuprof"]["peak_rss"] / fsize for x in rounds]
            row = {"file": path.name, "file_bytes": fsize, "rounds": rounds,
                   "load": [load0, os.getloadavg()[0]],
                   "gpuprof_over_floor_cpu": [statistics.median(ratios), min(ratios), max(ratios)],
                   "gpuprof_over_json_load_cpu": [statistics.median(vs_json), min(vs_json), max(vs_json)],
                   "gpuprof_rss_over_file": [statistics.median(rss), min(rss), max(rss)]}
            if a.before is not None:
                rb = [x["gpuprof-before"]["cpu_s"] / x["floor"]["cpu_s"] for x in rounds]
                row["before_over_floor_cpu"] = [statistics.median(rb), min(rb), max(rb)]
                row["before_rss_over_file"] = statistics.median(x["gpuprof-before"]["peak_rss"] / fsize for x in rounds)
            out["kinds"][f"{kind}_{size}MB"] = row
            med = {n: statistics.median(x[n]["cpu_s"] for x in rounds) for n in cmds}
            floor_rss = statistics.median(x["floor"]["peak_rss"] for x in rounds) / fsize
            row["floor_rss_over_file"] = floor_rss
            verdict = "met" if row["gpuprof_over_floor_cpu"][0] <= TARGET else "NOT met"
            print(f"{kind:13s} {fsize / 1e6:6.0f} MB | CPU s: floor {med['floor']:.2f}, gpuprof {med['gpuprof']:.2f}, "
                  f"json.load {med['json.load']:.2f} | gpuprof/floor {row['gpuprof_over_floor_cpu'][0]:.2f}x "
                  f"({min(ratios):.2f}-{max(ratios):.2f}; <= {TARGET}x: {verdict}) | gpuprof/json.load "
                  f"{row['gpuprof_over_json_load_cpu'][0]:.2f}x | peak RSS / file: gpuprof "
                  f"{row['gpuprof_rss_over_file'][0]:.2f}x, floor {floor_rss:.2f}x | load {load0:.1f}", flush=True)
            if a.before is not None:
                print(f"{'':13s} before ({a.before}): CPU {med['gpuprof-before']:.2f} s, "
                      f"{row['before_over_floor_cpu'][0]:.2f}x the floor, "
                      f"peak RSS {row['before_rss_over_file']:.2f}x the file", flush=True)
    out["load_after"] = os.getloadavg()
    out["bench_peak_rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    a.workdir.mkdir(parents=True, exist_ok=True)
    (a.workdir / "floor_results.json").write_text(json.dumps(out, indent=1))
    print(f"load average {out['load_before'][0]:.2f} before, {out['load_after'][0]:.2f} after; "
          f"bench RSS {out['bench_peak_rss'] / 1e6:.0f} MB (no child's peak RSS can read lower)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

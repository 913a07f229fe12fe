"""Benchmark: ``gpuprof analyze`` CPU time against the parse floor (``bench/floor.py``), in one run.

For each trace kind, a big uncompressed trace is built by repeating a real
shared trace end to end (``bench_analyze.build``: shifted times and ids):

* ``v100``: the V100 ResNet-50 tb_plugin sample (465 bytes per event);
* ``small-events``: TraceLens's xDiT SD3.5 inference trace (261 bytes per
  event: many small CPU operators and kernels).

Then ``--rounds`` times, in alternating order, each in a fresh child process:
the floor (``python bench/floor.py FILE``), ``gpuprof analyze FILE --format
json -o /dev/null`` and ``json.load``. Figures are CPU seconds (user + sys of
the child, from ``wait4``), which a loaded machine disturbs less than wall
time, and each child's peak RSS. Ratios are taken per round (paired) and the
median is reported, with min and max. Targets (issue "Speed"): gpuprof <= 2.0x
the floor's CPU time; peak RSS <= 1.0x the file.

``--before DIR`` adds another checkout's ``gpuprof analyze`` (``PYTHONPATH=DIR``)
to the same rounds: a before/after of one run.

Usage: ``python bench/bench_floor.py [--mb 200] [--rounds 3] [--kinds v100,small-events] [--workdir bench/out] [--before /work/main]``.
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
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO))

from bench_analyze import _Template, build, warm  # noqa: E402

from gpuprof.testing.realtraces import TRACES  # noqa: E402

SOURCES = {
    "v100": TRACES / "tbplugin" / "samples" / "resnet50_num_workers_0" / "worker0.1623143566756.pt.trace.json.gz",
    "small-events": TRACES / "hta" / "TraceLens" / "tests" / "traces" / "inference" / "xdit_sd_3.5" / "profile_trace_rank_0.json.gz",
}


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
        "floor": ([py, str(REPO / "bench" / "floor.py"), str(path)], None),
        "gpuprof": (gpuprof, {**os.environ, "PYTHONPATH": str(REPO)}),
        "json.load": ([py, "-c", "import json, sys\nwith open(sys.argv[1], 'rb') as f: json.load(f)", str(path)], None),
    }
    if before is not None:  # another checkout, in the same rounds: an A/B of one run
        out["gpuprof-before"] = (gpuprof, {**os.environ, "PYTHONPATH": str(before)})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--kinds", default=",".join(SOURCES))
    ap.add_argument("--workdir", type=Path, default=REPO / "bench" / "out")
    ap.add_argument("--before", type=Path, help="another gpuprof checkout, run in the same rounds (an A/B)")
    ap.add_argument("--build", nargs=3, metavar=("SOURCE", "PATH", "MB"), help=argparse.SUPPRESS)
    ap.add_argument("--warm", metavar="PATH", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.build:
        build(_Template(Path(a.build[0])), Path(a.build[1]), float(a.build[2]))
        return 0
    if a.warm:
        warm(Path(a.warm))
        return 0
    a.workdir.mkdir(parents=True, exist_ok=True)
    out: dict[str, Any] = {"load_before": os.getloadavg(), "cpus": len(os.sched_getaffinity(0)), "kinds": {}}
    for kind in a.kinds.split(","):
        source = SOURCES[kind]
        if not source.exists():
            print(f"bench_floor: {kind}: source not found ({source}); skipped", file=sys.stderr)
            continue
        path = a.workdir / f"floor_{kind}_{a.mb}MB.json"
        if not path.exists():  # in a child: the build's memory must not become the children's peak RSS
            subprocess.run([sys.executable, __file__, "--build", str(source), str(path), str(a.mb)], check=True)
        size = path.stat().st_size
        subprocess.run([sys.executable, __file__, "--warm", str(path)], check=True)
        rounds: list[dict[str, dict[str, float]]] = []
        cmds = commands(path, a.before)
        for r in range(a.rounds):
            order = list(cmds) if r % 2 == 0 else list(reversed(cmds))
            rounds.append({name: run(*cmds[name]) for name in order})
        ratios = [x["gpuprof"]["cpu_s"] / x["floor"]["cpu_s"] for x in rounds]
        vs_json = [x["gpuprof"]["cpu_s"] / x["json.load"]["cpu_s"] for x in rounds]
        rss = [x["gpuprof"]["peak_rss"] / size for x in rounds]
        row = {"file_bytes": size, "rounds": rounds,
               "gpuprof_over_floor_cpu": [statistics.median(ratios), min(ratios), max(ratios)],
               "gpuprof_over_json_load_cpu": [statistics.median(vs_json), min(vs_json), max(vs_json)],
               "gpuprof_rss_over_file": [statistics.median(rss), min(rss), max(rss)]}
        if a.before is not None:
            rb = [x["gpuprof-before"]["cpu_s"] / x["floor"]["cpu_s"] for x in rounds]
            row["before_over_floor_cpu"] = [statistics.median(rb), min(rb), max(rb)]
            row["before_rss_over_file"] = statistics.median(x["gpuprof-before"]["peak_rss"] / size for x in rounds)
        out["kinds"][kind] = row
        med = {n: statistics.median(x[n]["cpu_s"] for x in rounds) for n in cmds}
        floor_rss = statistics.median(x["floor"]["peak_rss"] for x in rounds) / size
        row["floor_rss_over_file"] = floor_rss
        print(f"{kind:13s} {size / 1e6:6.0f} MB | CPU s: floor {med['floor']:.2f}, gpuprof {med['gpuprof']:.2f}, "
              f"json.load {med['json.load']:.2f} | gpuprof/floor {row['gpuprof_over_floor_cpu'][0]:.2f}x "
              f"({min(ratios):.2f}-{max(ratios):.2f}) | gpuprof/json.load {row['gpuprof_over_json_load_cpu'][0]:.2f}x | "
              f"peak RSS / file: gpuprof {row['gpuprof_rss_over_file'][0]:.2f}x, floor {floor_rss:.2f}x")
        if a.before is not None:
            print(f"{'':13s} before ({a.before}): CPU {med['gpuprof-before']:.2f} s, {row['before_over_floor_cpu'][0]:.2f}x the floor, "
                  f"peak RSS {row['before_rss_over_file']:.2f}x the file")
    out["load_after"] = os.getloadavg()
    out["bench_peak_rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    (a.workdir / "floor_results.json").write_text(json.dumps(out, indent=1))
    print(f"load average {out['load_before'][0]:.2f} before, {out['load_after'][0]:.2f} after; "
          f"bench RSS {out['bench_peak_rss'] / 1e6:.0f} MB (no child's peak RSS can read lower)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

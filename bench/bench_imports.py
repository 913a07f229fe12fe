"""Benchmark: time ``gpuprof analyze`` spends importing modules before and while it runs.

For ``gpuprof analyze examples/sample_trace -o /dev/null`` (default format,
and ``--format json``), each in a fresh interpreter, ``--rounds`` times,
medians:

* **importtime**: ``python3 -X importtime -m gpuprof analyze ...``, the sum of
  the top-level (cumulative) entries: every import of the run, the lazy ones
  made while analysing included. ``-X importtime`` slows imports down
  itself, so this figure is an upper bound;
* **imports alone**: in a fresh interpreter, the modules that run imported
  at top level, imported again in the same order, timed with
  ``time.perf_counter`` and no instrumentation (the interpreter's own
  start-up, ``site``, ``encodings`` excluded);
* **floor**: the same for the third-party modules any analysis needs (numpy,
  msgspec, click) and nothing of gpuprof's;
* the module count and the number of gpuprof modules.

``--before DIR``: the same figures for another checkout (e.g. a ``git archive``
of main unpacked in /tmp), in the same run, interleaved.

``--bytecode``: how the modules' code is read, each a set of rows:

* ``cached``: from ``.pyc`` files, as a user's installed gpuprof does (pip
  compiles them when it installs). They are written to a private
  ``PYTHONPYCACHEPREFIX`` (a temporary folder, removed at the end, nothing
  written into the checkouts) by one warm-up run of each checkout first;
* ``none``: gpuprof's own modules compiled from source on every run, with
  ``PYTHONDONTWRITEBYTECODE=1``, as this VM's environment sets it for the
  checkouts (the standard library's and site-packages' ``.pyc`` files are
  read as before). The figures of bench/README.md before 2026-11-26 were
  taken so, and this part is ~60% of gpuprof's own import time there;
* ``both`` (the default).

``own`` is imports alone less the floor: the time gpuprof's modules add. The
``thread CPU`` figures are the same imports' CPU time in the importing thread
(``time.thread_time``): on a shared machine they move far less with the load
than the wall-clock ones, which count the time other processes held the CPUs.

Usage: ``python bench/bench_imports.py [--rounds 7] [--before DIR] [--bytecode both]``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SAMPLE = "examples/sample_trace"
_LINE = re.compile(r"import time:\s+(\d+) \|\s+(\d+) \| ( *)(\S+)")
_SKIP = {"site", "encodings", "zipimport", "_frozen_importlib_external", "io", "abc", "codecs", "_signal",
         "marshal", "posix", "_io", "time", "_abc", "_codecs", "_warnings", "_weakref", "_thread", "winreg",
         "_imp", "_frozen_importlib", "builtins", "sys"}

TIME_IMPORTS = r"""
import sys, time
names = sys.argv[1:]
t0, c0 = time.perf_counter(), time.thread_time()
for n in names:
    __import__(n)
print(time.perf_counter() - t0, time.thread_time() - c0)
"""


def environment(root: Path, pycache: str | None) -> dict[str, str]:
    """The subprocess environment: ``root`` on the path; ``pycache``: a private .pyc folder, None: no .pyc written."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")}
    env["PYTHONPATH"] = str(root)
    if pycache is None:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    else:
        env["PYTHONPYCACHEPREFIX"] = pycache
    return env


def stale_bytecode(root: Path) -> bool:
    """True when the checkout has .pyc files of its own, which a ``none`` row would read instead of compiling."""
    return any((root / "gpuprof").rglob("__pycache__"))


def importtime(root: Path, fmt: list[str], env: dict[str, str]) -> tuple[float, list[str], int, int]:
    """(seconds of top-level cumulative import time, top-level names in order, modules, gpuprof modules)."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "gpuprof", "analyze", SAMPLE, "-o", os.devnull,
                           *fmt], cwd=root, env=env, capture_output=True, text=True)
    total, top, names = 0, [], []
    for line in proc.stderr.splitlines():
        m = _LINE.match(line)
        if not m:
            continue
        names.append(m.group(4))
        if m.group(3) == "":  # depth 0: a top-level import, its cumulative time holds its children's
            total += int(m.group(2))
            if m.group(4) not in _SKIP:
                top.append(m.group(4))
    return total / 1e6, top, len(set(names)), len({n for n in names if n.startswith("gpuprof")})


def imports_alone(root: Path, names: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the importing thread: numpy's BLAS threads and other processes left out)."""
    out = subprocess.run([sys.executable, "-c", TIME_IMPORTS, *names], cwd=root, env=env, capture_output=True,
                         text=True, check=True)
    wall, cpu = out.stdout.split()
    return float(wall), float(cpu)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--before", default="", help="another checkout to measure in the same run")
    ap.add_argument("--bytecode", choices=("both", "cached", "none"), default="both",
                    help="cached: from .pyc files, as installed; none: gpuprof compiled on every run (this VM's "
                         "PYTHONDONTWRITEBYTECODE=1); both (default)")
    args = ap.parse_args(argv)
    roots = {"this": REPO}
    if args.before:
        roots = {"before": Path(args.before).resolve(), **roots}
    modes = ("cached", "none") if args.bytecode == "both" else (args.bytecode,)
    results: dict[str, Any] = {"loadavg_start": os.getloadavg(), "rows": []}
    with tempfile.TemporaryDirectory(prefix="bench_imports_pyc_") as pycache:
        for mode in modes:
            if mode == "none":
                for root in roots.values():
                    if stale_bytecode(root):
                        print(f"note: {root} has __pycache__ folders: its 'none' rows read them", file=sys.stderr)
            for fmt in ([], ["--format", "json"]):
                envs = {k: environment(r, pycache if mode == "cached" else None) for k, r in roots.items()}
                if mode == "cached":  # the warm-up: every module's .pyc written once, before any timing
                    for key, root in roots.items():
                        importtime(root, fmt, envs[key])
                acc: dict[str, dict[str, list[float]]] = {
                    k: {"importtime": [], "alone": [], "floor": [], "alone_cpu": [], "floor_cpu": []} for k in roots}
                info: dict[str, tuple[int, int]] = {}
                for _ in range(args.rounds):
                    for key, root in roots.items():
                        t, top, n, ng = importtime(root, fmt, envs[key])
                        acc[key]["importtime"].append(t)
                        for what, names in (("alone", top), ("floor", ["numpy", "msgspec", "click"])):
                            wall, cpu = imports_alone(root, names, envs[key])
                            acc[key][what].append(wall)
                            acc[key][what + "_cpu"].append(cpu)
                        info[key] = (n, ng)
                for key in roots:
                    row = {"checkout": key, "bytecode": mode, "format": " ".join(fmt) or "default (terminal)",
                           **{k: statistics.median(v) for k, v in acc[key].items()},
                           "modules": info[key][0], "gpuprof_modules": info[key][1]}
                    # per round, so that the floor and the run it is taken from share their moment's load
                    row["own"] = statistics.median(a - f for a, f in zip(acc[key]["alone"], acc[key]["floor"]))
                    row["own_cpu"] = statistics.median(a - f for a, f in zip(acc[key]["alone_cpu"],
                                                                             acc[key]["floor_cpu"]))
                    results["rows"].append(row)
    results["loadavg_end"] = os.getloadavg()
    print(f"load average at start {results['loadavg_start'][0]:.2f}, at end {results['loadavg_end'][0]:.2f}; "
          f"medians of {args.rounds}")
    for r in results["rows"]:
        print(f"{r['checkout']:>7} {r['bytecode']:<6} {r['format']:<18} importtime {r['importtime']:.3f} s  "
              f"imports alone {r['alone']:.3f} s  floor (numpy, msgspec, click) {r['floor']:.3f} s  "
              f"own {r['own']:.3f} s  modules {r['modules']} (gpuprof {r['gpuprof_modules']}); thread CPU: "
              f"alone {r['alone_cpu']:.3f} s  floor {r['floor_cpu']:.3f} s  own {r['own_cpu']:.3f} s")
    out = REPO / "bench" / "out"
    out.mkdir(parents=True, exist_ok=True)
    (out / "imports_results.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

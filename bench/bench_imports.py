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

Usage: ``python bench/bench_imports.py [--rounds 7] [--before DIR]``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
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
t0 = time.perf_counter()
for n in names:
    __import__(n)
print(time.perf_counter() - t0)
"""


def importtime(root: Path, fmt: list[str]) -> tuple[float, list[str], int, int]:
    """(seconds of top-level cumulative import time, top-level names in order, modules, gpuprof modules)."""
    env = dict(os.environ, PYTHONPATH=str(root))
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


def imports_alone(root: Path, names: list[str]) -> float:
    env = dict(os.environ, PYTHONPATH=str(root))
    out = subprocess.run([sys.executable, "-c", TIME_IMPORTS, *names], cwd=root, env=env, capture_output=True,
                         text=True, check=True)
    return float(out.stdout.strip())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--before", default="", help="another checkout to measure in the same run")
    args = ap.parse_args(argv)
    roots = {"this": REPO}
    if args.before:
        roots = {"before": Path(args.before).resolve(), **roots}
    results: dict[str, Any] = {"loadavg_start": os.getloadavg(), "rows": []}
    for fmt in ([], ["--format", "json"]):
        acc: dict[str, dict[str, list[float]]] = {k: {"importtime": [], "alone": [], "floor": []} for k in roots}
        info: dict[str, tuple[int, int]] = {}
        for _ in range(args.rounds):
            for key, root in roots.items():
                t, top, n, ng = importtime(root, fmt)
                acc[key]["importtime"].append(t)
                acc[key]["alone"].append(imports_alone(root, top))
                acc[key]["floor"].append(imports_alone(root, ["numpy", "msgspec", "click"]))
                info[key] = (n, ng)
        for key in roots:
            row = {"checkout": key, "format": " ".join(fmt) or "default (terminal)",
                   **{k: statistics.median(v) for k, v in acc[key].items()},
                   "modules": info[key][0], "gpuprof_modules": info[key][1]}
            results["rows"].append(row)
    results["loadavg_end"] = os.getloadavg()
    print(f"load average at start {results['loadavg_start'][0]:.2f}, at end {results['loadavg_end'][0]:.2f}; "
          f"medians of {args.rounds}")
    for r in results["rows"]:
        print(f"{r['checkout']:>7} {r['format']:<20} importtime {r['importtime']:.3f} s  imports alone "
              f"{r['alone']:.3f} s  floor (numpy, msgspec, click) {r['floor']:.3f} s  modules {r['modules']} "
              f"(gpuprof {r['gpuprof_modules']})")
    out = REPO / "bench" / "out"
    out.mkdir(parents=True, exist_ok=True)
    (out / "imports_results.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

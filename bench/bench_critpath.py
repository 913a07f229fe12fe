"""Benchmark: what the critical path and the what-if replay add to ``gpuprof analyze`` (CPU seconds, paired).

Each round runs ``gpuprof analyze FILE --format json -o /dev/null`` twice, each in a
fresh child process, in alternating order: once as shipped, once with the critical
path and the what-if switched off inside the child (``gpuprof.summarize.critical_path``
returns None, ``gpuprof.analysis.with_what_if`` passes the findings through: the only
two calls that reach ``gpuprof/trace/critpath``). The child's CPU seconds (user +
system, its descendants included) are read from ``resource.getrusage``. It prints each
pair and the median ratio; target: at most 1.15 (docs/critical-path.md, issue 35).

Inputs: ``--input FILE`` (repeatable), or by default a ~200 MB trace built by the shared
``bench/make_big.py`` (the V100 ResNet-50 sample x 6) in ``--workdir``; ``--rounds N``.

Usage: ``python bench/bench_critpath.py [--input FILE ...] [--rounds 3] [--workdir bench/out]``.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]

_CHILD = """
import sys
if sys.argv[1] == "off":
    import gpuprof.analysis, gpuprof.summarize
    gpuprof.summarize.critical_path = lambda m: None
    gpuprof.analysis.with_what_if = lambda m, findings: list(findings)
from gpuprof.cli import main
sys.argv = ["gpuprof", "analyze", sys.argv[2], "--format", "json", "-o", "/dev/null", "--fail-on", "never"]
main()
"""


def child_cpu(mode: str, path: Path) -> float:
    """CPU seconds of one analysis in a fresh child (``mode``: ``on`` as shipped, ``off`` without the path)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    env = dict(os.environ, PYTHONPATH=str(HERE))
    proc = subprocess.run([sys.executable, "-c", _CHILD, mode, str(path)], env=env, capture_output=True, text=True)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"gpuprof analyze {path} ({mode}) failed with exit {proc.returncode}: {proc.stderr[-400:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def default_input(workdir: Path) -> Path:
    """The ~200 MB shared-derived trace (built once with the shared ``make_big.py``)."""
    sys.path.insert(0, str(HERE))
    sys.path.insert(1, str(HERE / "tests" / "support"))  # the test helpers (gpuprof_testing) live in tests/support/, outside the package
    from gpuprof_testing.realtraces import TRACES, shared_path

    out = workdir / "v100x6.pt.trace.json"
    if not out.exists():
        src = shared_path("tbplugin", "samples", "resnet50_num_workers_0", "worker0.1623143089861.pt.trace.json.gz")
        make_big = TRACES.parent / "bench" / "make_big.py"
        if not make_big.exists():
            raise SystemExit(f"{make_big} is absent: give --input FILE")
        workdir.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, str(make_big), str(src), str(out), "6"], check=True)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--input", action="append", type=Path, default=[])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workdir", type=Path, default=HERE / "bench" / "out")
    args = ap.parse_args(argv)
    inputs = args.input or [default_input(args.workdir)]
    worst = 0.0
    for path in inputs:
        mb = path.stat().st_size / 1e6
        ratios = []
        for r in range(args.rounds):
            order = ("on", "off") if r % 2 == 0 else ("off", "on")  # alternate: drift on a shared machine cancels
            got = {mode: child_cpu(mode, path) for mode in order}
            ratios.append(got["on"] / got["off"])
            print(f"{path.name} ({mb:.0f} MB) round {r + 1}: with {got['on']:.2f} s, without {got['off']:.2f} s CPU, "
                  f"ratio {ratios[-1]:.3f}", flush=True)
        med = statistics.median(ratios)
        worst = max(worst, med)
        print(f"{path.name}: median CPU ratio with/without the critical path {med:.3f} (target <= 1.15)")
    return 0 if worst <= 1.15 else 1


if __name__ == "__main__":
    sys.exit(main())

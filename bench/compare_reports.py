"""No-behaviour-change check: the JSON reports of two gpuprof checkouts, field by field.

For every trace under ``--traces`` (default ``../shared/traces``), runs
``gpuprof analyze FILE --format json`` and ``gpuprof memory FILE --format json``
once with ``--before`` first on ``PYTHONPATH`` and once with this checkout,
each in a fresh process, and compares the two JSON documents field by field
(the exit status and the error line too, for files gpuprof refuses). Prints
one line per file and command (``same`` or the first differing fields) and
exits 1 when any differ.

    python bench/compare_reports.py --before /tmp/gpuprof-before [--traces DIR] [--jobs 1] [--ignore KEY ...]

``--ignore KEY``: object keys left out of the comparison at any depth (fields a change adds on
purpose, e.g. ``--ignore critical_path --ignore what_if_saving_us``), so every other field is held.

``--after-arg ARG``: an argument given to this checkout's ``gpuprof analyze`` only (repeatable), for a flag the
older checkout does not know: ``--after-arg=--timeline`` keeps the timeline that ``gpuprof analyze`` builds only
on request since issue 44, so the reports compare whole against a checkout that always built it.

``--before``: a directory holding an older ``gpuprof/`` package (e.g.
``git archive <commit> | tar -x -C DIR``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parents[1]
COMMANDS = ("analyze", "memory")


def run(root: Path, command: str, trace: Path, out: Path, jobs: int, extra: tuple[str, ...] = ()) -> tuple[int, Any, str]:
    env = dict(os.environ, PYTHONPATH=str(root), GPUPROF_JOBS=str(jobs))
    proc = subprocess.run(
        [sys.executable, "-m", "gpuprof", command, str(trace), "--format", "json", "-o", str(out), *extra],
        env=env, capture_output=True, text=True, timeout=600,
        cwd=out.parent,  # not a checkout: `python -m` puts the working directory first on sys.path
    )
    doc = json.loads(out.read_text()) if out.exists() else None
    if out.exists():
        out.unlink()
    # stderr: only the error line matters ("report written to" names the temp file)
    err = "\n".join(line for line in proc.stderr.splitlines() if "report written to" not in line)
    return proc.returncode, doc, err


def diff(a: Any, b: Any, path: str = "$", ignore: frozenset[str] = frozenset()) -> list[str]:
    """Paths where two JSON values differ (NaN equals NaN), object keys in ``ignore`` left out."""
    if type(a) is not type(b):
        return [f"{path}: {type(a).__name__} != {type(b).__name__}"]
    if isinstance(a, dict):
        out = [f"{path}.{k}: only in {'before' if k in a else 'after'}" for k in sorted(set(a) ^ set(b))
               if k not in ignore]
        for k in a:
            if k in b and k not in ignore:
                out += diff(a[k], b[k], f"{path}.{k}", ignore)
        return out
    if isinstance(a, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} items != {len(b)}"]
        out = []
        for i, (x, y) in enumerate(zip(a, b)):
            out += diff(x, y, f"{path}[{i}]", ignore)
        return out
    if a != b and not (isinstance(a, float) and a != a and b != b):
        return [f"{path}: {a!r} != {b!r}"]
    return []


def _shared_traces() -> Path:
    sys.path.insert(0, str(HERE))
    sys.path.insert(1, str(HERE / "tests" / "support"))  # the test helpers (gpuprof_testing) live in tests/support/, outside the package
    from gpuprof_testing.realtraces import TRACES  # GPUPROF_SHARED_TRACES, default ../shared

    return TRACES


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True, type=Path)
    ap.add_argument("--traces", type=Path, default=_shared_traces())
    ap.add_argument("--jobs", type=int, default=1, help="GPUPROF_JOBS for both sides")
    ap.add_argument("--ignore", action="append", default=[], metavar="KEY",
                    help="an object key left out of the comparison at any depth (repeatable)")
    ap.add_argument("--after-arg", action="append", default=[], metavar="ARG",
                    help="an argument for this checkout's `gpuprof analyze` only, e.g. --after-arg=--timeline")
    args = ap.parse_args(argv)
    files = sorted(p for p in args.traces.rglob("*") if p.is_file() and p.name.endswith((".json", ".json.gz")))
    differing = 0
    with tempfile.TemporaryDirectory(prefix="gpuprof-compare-") as tmp:
        for f in files:
            for command in COMMANDS:
                before = run(args.before, command, f, Path(tmp, "before.json"), args.jobs)
                extra = tuple(args.after_arg) if command == "analyze" else ()
                after = run(HERE, command, f, Path(tmp, "after.json"), args.jobs, extra)
                problems = []
                if before[0] != after[0]:
                    problems.append(f"exit {before[0]} != {after[0]}")
                if before[2] != after[2]:
                    problems.append(f"stderr {before[2]!r} != {after[2]!r}")
                problems += diff(before[1], after[1], ignore=frozenset(args.ignore))
                differing += bool(problems)
                status = "same" if not problems else "DIFFERENT: " + "; ".join(problems[:5])
                print(f"{command:8} exit {after[0]}  {f.relative_to(args.traces)}: {status}", flush=True)
    print(f"{len(files)} files x {len(COMMANDS)} commands, {differing} different")
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())

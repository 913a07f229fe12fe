"""Where ``gpuprof analyze --format json``'s CPU goes: imports / load / metrics / rules / critical path / views /
report, in one process (issue 44, item 5).

Runs ``gpuprof analyze FILE --format json -o /dev/null`` in this process (as ``python -m gpuprof`` does: the GC
off during the analysis, as ``gpuprof.analysis.analyze`` has it) with a CPU clock (``time.process_time``) around
the functions each part is made of; time spent in a nested part is charged to that part only, so the parts add
up to the whole run. Python's own start-up (before this script runs) is not in it.

| part | functions |
|---|---|
| imports | every ``import`` statement (``builtins.__import__``), gpuprof's lazy ones included |
| load | ``gpuprof.trace.load.load_trace`` (decode, the event model) |
| metrics | ``gpuprof.trace.metrics.compute_metrics`` |
| rules | the rule runner (``gpuprof.runner.run_rules``) |
| critical path | the step graph, the critical path, its timeline segments, the what-if replay (``gpuprof.trace.critpath``) |
| views | the report's tables (``gpuprof.views.build.trace_views``) and the timeline (``gpuprof.views.timeline``) |
| report | the trace summary less the views and the critical path, the rank summary, the findings' boundary, the JSON |
| other | the rest: click, the command's own code |

``--cprofile OUT``: also a cProfile of the same run (``python -m pstats OUT``), whose overhead inflates the
parts that make many small calls; the split is measured without it.

    python bench/profile_split.py FILE [--rounds 3] [--root OTHER_CHECKOUT] [-- EXTRA ANALYZE ARGS]

``--root``: measure another checkout (``git archive <commit> | tar -x -C DIR``); a function it lacks is left out
of its split. Each round is a fresh process; the table gives the median of each part.
"""

from __future__ import annotations

import argparse
import builtins
import importlib
import json
import os
import runpy
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

PARTS = ("imports", "load", "metrics", "rules", "critical path", "views", "report", "other")
# (module, function, part); a function a checkout lacks is skipped
FUNCTIONS = (
    ("gpuprof.trace.load", "load_trace", "load"),
    ("gpuprof.trace.metrics", "compute_metrics", "metrics"),
    ("gpuprof.runner", "run_rules", "rules"),
    ("gpuprof.flow", "run_rules", "rules"),
    ("gpuprof.trace.critpath.graph", "build_graph", "critical path"),
    ("gpuprof.trace.critpath.path", "critical_path", "critical path"),
    ("gpuprof.trace.critpath.path", "critical_segments", "critical path"),
    ("gpuprof.trace.critpath.whatif", "with_what_if", "critical path"),  # before issue 45
    ("gpuprof.rules.replayed", "with_what_if", "critical path"),
    ("gpuprof.views.build", "trace_views", "views"),
    ("gpuprof.views.timeline", "build_timeline", "views"),
    ("gpuprof.summarize", "trace_summary", "report"),
    ("gpuprof.distributed.summary", "summarize", "report"),
    ("gpuprof.flow", "finish", "report"),
    ("gpuprof.render.jsonout", "render_json", "report"),
)


class Clock:
    """CPU seconds per part, exclusive of nested parts."""

    def __init__(self) -> None:
        self.acc = dict.fromkeys(PARTS, 0.0)
        self.stack: list[str] = ["other"]
        self.mark = time.process_time()

    def enter(self, part: str) -> None:
        now = time.process_time()
        self.acc[self.stack[-1]] += now - self.mark
        self.mark = now
        self.stack.append(part)

    def leave(self) -> None:
        now = time.process_time()
        self.acc[self.stack.pop()] += now - self.mark
        self.mark = now

    def timed(self, fn: Callable[..., Any], part: str) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            self.enter(part)
            try:
                return fn(*args, **kwargs)
            finally:
                self.leave()

        wrapper.__wrapped__ = fn  # type: ignore[attr-defined]
        return wrapper


def child(path: str, extra: list[str], out: str, prof: str | None) -> None:
    clock = Clock()
    real_import = builtins.__import__
    builtins.__import__ = clock.timed(real_import, "imports")
    wrapped: dict[int, Callable[..., Any]] = {}
    for mod_name, fn_name, part in FUNCTIONS:
        clock.enter("imports")  # importlib does not go through builtins.__import__
        try:
            mod = importlib.import_module(mod_name)
        except ImportError:
            continue
        finally:
            clock.leave()
        fn = getattr(mod, fn_name, None)
        if fn is None or id(fn) in wrapped:
            continue
        wrapped[id(fn)] = clock.timed(fn, part)
    for name, mod in list(sys.modules.items()):  # every module that imported one of them by name
        if not name.startswith("gpuprof"):
            continue
        for attr, value in list(vars(mod).items()):
            if id(value) in wrapped and callable(value):
                setattr(mod, attr, wrapped[id(value)])
    sys.argv = ["gpuprof", "analyze", path, "--format", "json", "-o", os.devnull, "--no-progress", *extra]
    profiler = None
    if prof:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    try:
        runpy.run_module("gpuprof", run_name="__main__")
    except SystemExit:
        pass
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(prof)
    clock.leave()  # the outermost "other"
    builtins.__import__ = real_import
    Path(out).write_text(json.dumps(clock.acc))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--root", default=str(Path(__file__).resolve().parents[1]), help="the checkout to measure")
    ap.add_argument("--cprofile", metavar="OUT", help="also write a cProfile of one (extra) run to OUT")
    ap.add_argument("--child", metavar="OUT", help=argparse.SUPPRESS)
    ap.add_argument("extra", nargs="*", help="extra arguments for gpuprof analyze (after --)")
    a = ap.parse_args(argv)
    if a.child:
        child(a.file, a.extra, a.child, os.environ.get("PROFILE_SPLIT_CPROFILE"))
        return 0
    env = {**os.environ, "PYTHONPATH": a.root}
    runs: list[dict[str, float]] = []
    out = Path(os.environ.get("TMPDIR", "/tmp"), f"profile_split_{os.getpid()}.json")
    for i in range(a.rounds + bool(a.cprofile)):
        e = dict(env, PROFILE_SPLIT_CPROFILE=a.cprofile) if a.cprofile and i == a.rounds else env
        # from a folder outside the checkout: `python -m` would put the working directory first on sys.path
        subprocess.run([sys.executable, str(Path(__file__).resolve()), a.file, "--child", str(out), *(["--", *a.extra] if a.extra else [])],
                       env=e, check=True, cwd="/")
        if i < a.rounds:
            runs.append(json.loads(out.read_text()))
    out.unlink(missing_ok=True)
    med = {p: statistics.median(r[p] for r in runs) for p in PARTS}
    total = sum(med.values())
    print(f"{a.file} ({a.root}, {a.rounds} runs, load {os.getloadavg()[0]:.1f}): CPU s, median per part")
    print("| " + " | ".join(PARTS) + " | total |")
    print("|" + "---|" * (len(PARTS) + 1))
    print("| " + " | ".join(f"{med[p]:.3f} ({med[p] / total:.0%})" for p in PARTS) + f" | {total:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

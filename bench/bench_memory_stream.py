"""Benchmark: ``gpuprof memory show`` on snapshots of a million entries and of more than 1 GB, streamed.

Writes PyTorch-layout snapshots (``gpuprof_testing.synthpickle``: the opcodes
``torch.cuda.memory._dump_snapshot`` writes, a new frames list per entry, 17
frames a stack) to a temporary folder (deleted at the end; never committed),
then runs, each in a fresh child process, on the same file, in one run:

* ``gpuprof memory show FILE --html PAGE`` (the streaming loader, the analysis, the terminal report and the page),
* ``pickle.load`` of the file (what any reader that unpickles in whole pays first),
* PyTorch's own viewer, ``python -m torch.cuda._memory_viz trace_plot FILE -o OUT`` (and ``segment_plot``),
* gpuprof's whole-file loader (restricted unpickler, then parse and analysis: what ``gpuprof memory`` did
  before it streamed), on the smaller file.

Each child's CPU seconds (user + system) and peak RSS come from ``os.wait4``; CPU is the figure to compare on
a shared machine. The bench process itself stays small (it imports no torch): Linux starts a child's peak RSS
from its parent's at fork, so the bench's own RSS (printed) is the floor of every figure. A baseline whose memory the machine cannot spare (estimated from its ratio on the smaller
file against ``MemAvailable``) is skipped and says so. Prints one JSON line; docs/memory.md quotes it.

Usage: ``python bench/bench_memory_stream.py [--entries 1000000] [--large-bytes 1.1e9] [--no-torch]``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))  # the test helpers, outside the package
from gpuprof_testing.synthpickle import write_snapshot  # noqa: E402

_WHOLE = """
import sys
from gpuprof.memory.analysis import analyze_memory
from gpuprof.memory.snapshot.safeload import load_pickle_input
from gpuprof.memory.snapshot.parse import item_budget
from gpuprof.memory.snapshot import parse_snapshot
obj, n = load_pickle_input(sys.argv[1])
data = parse_snapshot(obj, sys.argv[1], max_items=item_budget(n))
del obj
analyze_memory(data)
"""


def _available() -> int:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def run_child(argv: list[str]) -> dict[str, Any]:
    """Run ``argv``; its CPU seconds, peak RSS (bytes) and exit code, from the kernel's accounting of it."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    proc.returncode = os.waitstatus_to_exitcode(status)
    out = {"cpu_s": round(ru.ru_utime + ru.ru_stime, 2), "wall_s": round(wall, 2),
           "peak_rss_bytes": ru.ru_maxrss * 1024, "rc": proc.returncode}
    if proc.returncode not in (0, 1):
        out["error"] = err.strip().splitlines()[-1:] if err.strip() else []
    return out


def measure(path: str, work: str, torch_: bool, whole: bool, estimates: dict[str, float] | None) -> dict[str, Any]:
    size = os.path.getsize(path)
    page = os.path.join(work, "page.html")
    cmds: dict[str, list[str]] = {
        "gpuprof_memory_show": [sys.executable, "-m", "gpuprof", "memory", "show", path, "--fail-on", "never",
                                "--html", page],
        "pickle_load": [sys.executable, "-c", "import pickle,sys; pickle.load(open(sys.argv[1], 'rb'))", path],
    }
    if torch_:
        for kind in ("trace_plot", "segment_plot"):
            cmds[f"torch_memory_viz_{kind}"] = [sys.executable, "-W", "ignore", "-m", "torch.cuda._memory_viz",
                                                kind, path, "-o", os.path.join(work, f"{kind}.html")]
    if whole:
        cmds["gpuprof_whole_file_loader"] = [sys.executable, "-c", _WHOLE, path]
    res: dict[str, Any] = {"file_bytes": size}
    for name, argv in cmds.items():
        need = (estimates or {}).get(name, 0.0) * size
        avail = _available()
        if need and need > 0.6 * avail:
            res[name] = {"skipped": f"would need about {need / 2**30:.1f} GiB (its ratio on the smaller file), "
                                    f"{avail / 2**30:.1f} GiB available"}
            continue
        res[name] = run_child(argv)
        if name == "gpuprof_memory_show" and os.path.exists(page):
            res[name]["html_page_bytes"] = os.path.getsize(page)
    g = res["gpuprof_memory_show"]
    g["peak_rss_per_file_byte"] = round(g["peak_rss_bytes"] / size, 3)
    ratios: dict[str, float] = {}
    for name, r in res.items():
        if name in ("file_bytes", "gpuprof_memory_show") or "cpu_s" not in r:
            continue
        ratios[f"{name}_cpu_over_gpuprof"] = round(r["cpu_s"] / g["cpu_s"], 2)
        ratios[f"{name}_rss_over_gpuprof"] = round(r["peak_rss_bytes"] / g["peak_rss_bytes"], 2)
        r["peak_rss_per_file_byte"] = round(r["peak_rss_bytes"] / size, 3)
    res["ratios"] = ratios
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--entries", type=int, default=1_000_000, help="history entries of the smaller snapshot")
    ap.add_argument("--large-bytes", type=float, default=1.1e9, help="size of the large snapshot (0: none)")
    ap.add_argument("--no-torch", action="store_true", help="leave out PyTorch's _memory_viz")
    ap.add_argument("--dir", default=None, help="where to write the snapshots (default: a temporary folder)")
    args = ap.parse_args()
    # Found, not imported: a child's peak RSS starts from this process's at fork (Linux keeps the high-water mark
    # across exec), so this process stays small.
    torch_ = not args.no_torch and importlib.util.find_spec("torch") is not None
    work = tempfile.mkdtemp(prefix="gpuprof-bench-stream-", dir=args.dir)
    import resource

    out: dict[str, Any] = {"bench": "memory_stream", "cpus": os.cpu_count(), "load_average": os.getloadavg()[0],
                           "bench_process_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
    try:
        small = os.path.join(work, "small.pickle")
        t = time.process_time()
        n = write_snapshot(small, args.entries)
        out["small"] = {"entries": n, "write_cpu_s": round(time.process_time() - t, 1),
                        **measure(small, work, torch_, True, None)}
        os.remove(small)
        if args.large_bytes > 0:
            est = {k: v["peak_rss_per_file_byte"] * 1.1 for k, v in out["small"].items()
                   if isinstance(v, dict) and "peak_rss_per_file_byte" in v}
            large = os.path.join(work, "large.pickle")
            t = time.process_time()
            n = write_snapshot(large, 0, min_bytes=int(args.large_bytes))
            out["large"] = {"entries": n, "write_cpu_s": round(time.process_time() - t, 1),
                            **measure(large, work, torch_, False, est)}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()

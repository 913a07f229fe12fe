"""Benchmark: ``gpuprof analyze`` on ~200 MB and ~1 GB traces, against ``json.load``.

Builds big uncompressed traces by repeating a real GPU trace (default: the
35 MB V100 ResNet-50 tb_plugin sample) end to end with shifted timestamps,
step numbers, External ids, correlation ids and flow ids, so every copy is
a new stretch of the same training run and ids stay unique. The output is
streamed copy by copy (nothing of the size of the output is held in RAM).

Then, for each size and in one run, each command runs in a fresh child
process and is measured for CPU seconds (user + system), wall time and peak memory: the larger of the
child's own peak RSS and the sampled peak of the RSS summed over the child
and its descendants (gpuprof's loader helper process) plus the helper's
scratch files (see :func:`measure`):

* ``gpuprof analyze FILE --format json -o /dev/null`` (end to end);
* ``python -m gpuprof.trace.load FILE`` (the loader alone);
* ``json.load`` of the same file (the in-run baseline for the ratios).

It prints a table (CPU s, wall s, MB/s, peak RSS, RSS/file size, gpuprof/json.load ratios of CPU,
wall and memory; on a shared machine the CPU ratio is the one to quote)
and writes ``<workdir>/results.json``. Targets: >= 150 MB/s end to end and
peak RSS <= 2x the file size. The file is read once before measuring so that
every command sees a warm page cache.

Usage: ``python bench/bench_analyze.py [--sizes 200,1000] [--workdir bench/out]``.
"""

from __future__ import annotations

import argparse
import glob
import gzip
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(1, str(REPO / "tests" / "support"))  # the test helpers (gpuprof_testing) live in tests/support/, outside the package
from gpuprof_testing.realtraces import TRACES  # noqa: E402 - GPUPROF_SHARED_TRACES decides where the real data are

DEFAULT_SOURCE = (TRACES / "tbplugin" / "samples" / "resnet50_num_workers_0"
                  / "worker0.1623143566756.pt.trace.json.gz")
MB = 1_000_000  # sizes and rates are in decimal MB, as file sizes are usually quoted
TARGET_MB_S = 150.0
TARGET_RSS_RATIO = 2.0

# Fields rewritten per copy. Times move by the source's span; ids by the source's largest id.
_FIELD_RE = re.compile(
    r'"(ts|external ts|External id|external id|correlation|id|Python id|Python parent id)": '
    r"(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)"
    r"|ProfilerStep#(\d+)"
)
_TIME_KEYS = frozenset({"ts", "external ts"})


# --------------------------------------------------------------------------- building


class _Template:
    """The source trace split into header, event text and trailer, with shift amounts."""

    def __init__(self, source: Path) -> None:
        raw = source.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        text = raw.decode("utf-8")
        m = re.search(r'"traceEvents"\s*:\s*\[', text)
        if m is None:
            raise SystemExit(f"{source}: no traceEvents array")
        events, end = json.JSONDecoder().raw_decode(text, m.end() - 1)  # end: just past the "]"
        close = text.rindex("]", m.end() - 1, end)
        self.head = text[: m.end()]
        self.body = text[m.end() : close].strip()
        self.tail = text[close:]
        ts = [e["ts"] for e in events if isinstance(e.get("ts"), (int, float)) and e.get("ph") != "M"]
        ends = [e["ts"] + e.get("dur", 0) for e in events
                if isinstance(e.get("ts"), (int, float)) and isinstance(e.get("dur", 0), (int, float))]
        self.span = max(ends) - min(ts) + 1000.0  # 1 ms between copies
        ids = [0]
        steps = [0]
        for e in events:
            a = e.get("args") or {}
            for k in ("External id", "external id", "correlation", "Python id"):
                if isinstance(a.get(k), int):
                    ids.append(a[k])
            if isinstance(e.get("id"), int):
                ids.append(e["id"])
            m2 = re.match(r"ProfilerStep#(\d+)$", str(e.get("name", "")))
            if m2:
                steps.append(int(m2.group(1)))
        self.id_step = max(ids) + 1
        self.step_step = max(steps) + 1
        self.copy_bytes = len(self.body.encode("utf-8")) + 2  # + ",\n" between copies
        self.num_events = len(events)

    def copy(self, k: int) -> str:
        """The event text of copy ``k`` (copy 0 is the source unchanged)."""
        if k == 0:
            return self.body
        dt = self.span * k
        did = self.id_step * k
        dstep = self.step_step * k

        def shift(m: re.Match[str]) -> str:
            if m.group(3) is not None:
                return f"ProfilerStep#{int(m.group(3)) + dstep}"
            key, val = m.group(1), m.group(2)
            if key in _TIME_KEYS:
                if "." in val or "e" in val or "E" in val:
                    return f'"{key}": {float(val) + dt!r}'
                return f'"{key}": {int(val) + int(dt)}'
            if "." in val or "e" in val or "E" in val:
                return m.group(0)
            v = int(val)
            return f'"{key}": {v + did if v > 0 else v}'  # 0 / -1 mean "no id": keep them

        return _FIELD_RE.sub(shift, self.body)


def build(template: _Template, path: Path, target_mb: float) -> tuple[int, int]:
    """Write a trace of about ``target_mb`` MB; returns (copies, bytes)."""
    copies = max(1, round(target_mb * MB / template.copy_bytes))
    tmp = path.with_suffix(".partial")
    with open(tmp, "w", encoding="utf-8") as out:
        out.write(template.head)
        out.write("\n")
        for k in range(copies):
            if k:
                out.write(",\n")
            out.write(template.copy(k))
        out.write("\n")
        out.write(template.tail)
    tmp.replace(path)
    return copies, path.stat().st_size


def ensure_trace(template: _Template, source: Path, workdir: Path, target_mb: int) -> Path:
    """Build ``trace_<N>MB.json`` unless an identical build is already there."""
    path = workdir / f"trace_{target_mb}MB.json"
    meta_path = path.with_suffix(".meta.json")
    want = {"source": str(source), "source_size": source.stat().st_size, "target_mb": target_mb, "version": 1}
    if path.exists() and meta_path.exists():
        try:
            if json.loads(meta_path.read_text()) == want:
                return path
        except ValueError:
            pass
    t0 = time.perf_counter()
    copies, size = build(template, path, target_mb)
    meta_path.write_text(json.dumps(want))
    print(f"built {path.name}: {copies} copies, {size / MB:.0f} MB in {time.perf_counter() - t0:.1f}s",
          file=sys.stderr)
    return path


# --------------------------------------------------------------------------- measuring

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_SCRATCH_GLOBS = ("/dev/shm/gpuprof-load-*", os.path.join(tempfile.gettempdir(), "gpuprof-load-*"))


def _tree_rss(root: int) -> int:
    """Resident bytes of process ``root`` and all its descendants, now (Linux /proc)."""
    total = 0
    pids = [root]
    while pids:
        pid = pids.pop()
        try:
            with open(f"/proc/{pid}/statm") as fh:
                total += int(fh.read().split()[1]) * _PAGE
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/children") as fh:
                    pids.extend(int(x) for x in fh.read().split())
        except (OSError, ValueError, IndexError):
            continue  # exited between the listing and the read
    return total


def _scratch_bytes() -> int:
    """Bytes in the loader helper's scratch files (in /dev/shm: memory that no RSS shows)."""
    total = 0
    for pattern in _SCRATCH_GLOBS:
        for d in glob.glob(pattern):
            for f in glob.glob(os.path.join(d, "*")):
                try:
                    total += os.stat(f).st_size
                except OSError:
                    continue
    return total


def measure(cmd: list[str], interval: float = 0.005) -> dict[str, Any]:
    """Run ``cmd`` in a fresh child: CPU seconds (user + system, from ``wait4``: the child and the
    descendants it waited for), wall seconds, peak memory bytes, exit code. On a shared machine the CPU
    seconds are the figure to compare: other processes stretch the wall clock, hardly the CPU.

    Peak memory is the larger of the child's own ``ru_maxrss`` (exact) and
    the largest sum, sampled every ``interval`` s, of the RSS of the child
    and all its descendants (gpuprof's loader helper) plus the helper's
    scratch files in /dev/shm. A sum is what the machine must hold, which
    ``/usr/bin/time`` and ``RUSAGE_CHILDREN`` (a maximum over processes) do not give.
    """
    with tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
        peak_tree = 0
        while True:
            pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
            if pid == proc.pid:
                break
            peak_tree = max(peak_tree, _tree_rss(proc.pid) + _scratch_bytes())
            time.sleep(interval)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: keep Popen from waiting again
        err.seek(0)
        stderr = err.read().decode("utf-8", "replace")
    own = ru.ru_maxrss * (1 if sys.platform == "darwin" else 1024)  # KiB on Linux
    return {"cpu_s": ru.ru_utime + ru.ru_stime, "wall_s": wall, "peak_rss": max(own, peak_tree), "own_peak_rss": own, "tree_peak_rss": peak_tree,
            "exit": proc.returncode, "stderr": _tail(stderr)}


def _tail(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.strip() and not ln.startswith(("\t", "@@bench"))]
    return "\n".join(lines[-3:])


def commands(path: Path, loader_only: bool) -> dict[str, list[str]]:
    py = sys.executable
    cmds = {
        "gpuprof analyze": [py, "-m", "gpuprof", "analyze", str(path), "--format", "json", "-o", os.devnull,
                            "--no-progress"],
        "json.load": [py, "-c", "import json, sys\nwith open(sys.argv[1], 'rb') as f: json.load(f)", str(path)],
    }
    if loader_only:
        cmds["loader only"] = [py, "-m", "gpuprof.trace.load", str(path)]
    return cmds


def warm(path: Path) -> None:
    with open(path, "rb") as fh:
        while fh.read(64 << 20):
            pass


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help="trace to repeat (.json or .json.gz)")
    ap.add_argument("--sizes", default="200,1000", help="target sizes in MB, comma-separated")
    ap.add_argument("--workdir", type=Path, default=REPO / "bench" / "out", help="where traces and results go")
    ap.add_argument("--no-loader", action="store_true", help="skip the loader-only measurement")
    ap.add_argument("--clean", action="store_true", help="delete the built traces afterwards (default: keep them)")
    args = ap.parse_args(argv)

    source = args.source.resolve()
    if not source.exists():
        print(f"bench_analyze: source trace not found: {source}", file=sys.stderr)
        return 2
    args.workdir.mkdir(parents=True, exist_ok=True)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    template = _Template(source)

    rows: list[dict[str, Any]] = []
    for target in sizes:
        path = ensure_trace(template, source, args.workdir, target)
        size = path.stat().st_size
        warm(path)
        base: dict[str, Any] | None = None
        results = {}
        for name, cmd in commands(path, not args.no_loader).items():
            r = measure(cmd)
            ok = r["exit"] in (0, 1)  # 1 = findings at/above --fail-on: a normal analysis
            results[name] = r
            if name == "json.load":
                base = r
            rows.append({
                "size_target_mb": target, "file_bytes": size, "command": name, "exit": r["exit"], "ok": ok,
                "cpu_s": round(r["cpu_s"], 3), "wall_s": round(r["wall_s"], 3),
                "mb_per_s": round(size / MB / r["wall_s"], 1), "mb_per_cpu_s": round(size / MB / max(r["cpu_s"], 1e-9), 1),
                "peak_rss_bytes": r["peak_rss"], "rss_over_file": round(r["peak_rss"] / size, 3),
                "own_peak_rss_bytes": r["own_peak_rss"], "tree_peak_rss_bytes": r["tree_peak_rss"],
                "error": "" if ok else r["stderr"],
            })
        assert base is not None
        for row in rows:
            if row["size_target_mb"] == target:
                row["time_vs_json_load"] = round(row["wall_s"] / base["wall_s"], 3)
                row["cpu_vs_json_load"] = round(row["cpu_s"] / max(base["cpu_s"], 1e-9), 3)
                row["rss_vs_json_load"] = round(row["peak_rss_bytes"] / base["peak_rss"], 3)

    _print_table(rows)
    out = {
        "source": str(source),
        "machine": {"python": platform.python_version(), "platform": platform.platform(),
                    "cpus": os.cpu_count()},
        "targets": {"mb_per_s": TARGET_MB_S, "rss_over_file": TARGET_RSS_RATIO},
        "rows": rows,
    }
    res = args.workdir / "results.json"
    res.write_text(json.dumps(out, indent=2) + "\n")
    print(f"\nresults written to {res}")
    if args.clean:
        for target in sizes:
            for p in (args.workdir / f"trace_{target}MB.json", args.workdir / f"trace_{target}MB.meta.json"):
                p.unlink(missing_ok=True)
    return 0 if all(r["ok"] for r in rows) else 1


def _print_table(rows: list[dict[str, Any]]) -> None:
    hdr = f"{'file':>8} {'command':<16} {'CPU s':>8} {'wall s':>8} {'MB/s':>7} {'peak mem MB':>12} " \
          f"{'mem/file':>9} {'cpu/json':>8} {'t/json':>7} {'mem/json':>9}  target"
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        verdict = ""
        if r["command"] == "gpuprof analyze":
            fast = r["mb_per_s"] >= TARGET_MB_S
            lean = r["rss_over_file"] <= TARGET_RSS_RATIO
            verdict = ("ok" if fast and lean else
                       ", ".join(x for x, bad in (("slow", not fast), ("RSS high", not lean)) if bad))
        if not r["ok"]:
            verdict = f"FAILED (exit {r['exit']}): {r['error'][-120:]}"
        print(f"{r['file_bytes'] / MB:>6.0f}MB {r['command']:<16} {r['cpu_s']:>8.2f} {r['wall_s']:>8.2f} "
              f"{r['mb_per_s']:>7.1f} {r['peak_rss_bytes'] / MB:>12.0f} {r['rss_over_file']:>9.2f} "
              f"{r['cpu_vs_json_load']:>8.2f} {r['time_vs_json_load']:>7.2f} {r['rss_vs_json_load']:>9.2f}  {verdict}")


if __name__ == "__main__":
    sys.exit(main())

"""Check a folder of recordings made by ``record_gpu_truth.py`` against its ``manifest.json``.

    PYTHONPATH=. python examples/gpu_truth_check.py tests/data/gpu     # one line per check, exit 1 on a failure

The recorder writes, next to each trace, snapshot or report it keeps, the
expectations it computed *at record time from the run itself*: the finding
codes each pathology must raise and its baseline must not, the step count and
GPU utilisation computed from the raw JSON with nothing from gpuprof, the
host-to-device bytes per step that the example knows from its batch, the
source line of the leak or of the ``.item()``, the numbers of the
out-of-memory error. This module re-analyses every file with ``gpuprof
analyze`` / ``gpuprof memory`` (the CLI, in-process) and compares. The tests
in ``tests/test_gpu_truth.py`` and the recorder's own final self-check both
call :func:`check_folder`.

Source lines: the capture's runtime findings (report.json) and the
allocator's own stacks (snapshots) carry exact lines, so those checks compare
file and line. Lines read from a *trace* are not exact for the training
loop's own frame: torch's Python tracer gives a frame that was already
running when the profiler started the line it was on at that moment (the
``prof.step()`` that opened the window), not the line of each later call.
Trace-based site checks therefore compare the file and function, and keep the
source line for the reader.

No torch here: like ``gpuprof analyze``, checking needs only gpuprof.
"""

from __future__ import annotations

import gzip
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

__all__ = ["CheckResult", "check_folder", "check_entry", "raw_step_count", "raw_gpu_utilization",
           "MANIFEST", "MANIFEST_VERSION"]

MANIFEST = "manifest.json"
MANIFEST_VERSION = 1
# analyzer utilisation vs the raw-JSON computation: the same definition, so only rounding differs
UTILIZATION_TOLERANCE = 0.03

_STEP = re.compile(r"ProfilerStep#\d+")
_GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset")


@dataclass(frozen=True)
class CheckResult:
    file: str
    check: str
    ok: bool
    detail: str

    def line(self) -> str:
        return f"{'ok  ' if self.ok else 'FAIL'} {self.file}: {self.check}: {self.detail}"


# --------------------------------------------------------------------------- raw JSON, nothing from gpuprof
def _raw_events(path: Path) -> list[dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:  # type: ignore[operator]
        data = json.load(fh)
    return data["traceEvents"] if isinstance(data, dict) else data


def raw_step_count(path: Path) -> int:
    """ProfilerStep#N ranges in the trace (any category: torch 2.x writes them as user annotations)."""
    return sum(1 for e in _raw_events(path) if e.get("ph") == "X" and _STEP.fullmatch(str(e.get("name"))))


def raw_gpu_utilization(path: Path) -> float | None:
    """GPU busy / profiled-step span from the raw JSON, or None without GPU activity.

    Busy = union of kernel, memcpy and memset intervals; the span runs from the
    first ProfilerStep start to the later of the last ProfilerStep end and the
    end of the GPU work that started within it (the definition in docs/metrics).
    """
    events = _raw_events(path)
    steps = [e for e in events if e.get("ph") == "X" and _STEP.fullmatch(str(e.get("name")))]
    gpu = sorted((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))) for e in events
                 if e.get("ph") == "X" and e.get("cat") in _GPU_CATS)
    if not steps or not gpu:
        return None
    lo = min(float(e["ts"]) for e in steps)
    hi = max(float(e["ts"]) + float(e["dur"]) for e in steps)
    gpu = [(s, e) for s, e in gpu if e > lo]
    if not gpu:
        return None
    hi = max(hi, max(e for _, e in gpu))
    busy = 0.0
    cur_s: float | None = None
    cur_e = 0.0
    for s, e in gpu:
        s = max(s, lo)
        if cur_s is None or s > cur_e:
            if cur_s is not None:
                busy += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_s is not None:
        busy += cur_e - cur_s
    return busy / (hi - lo)


# --------------------------------------------------------------------------- gpuprof, through its CLI
def _cli_json(args: list[str]) -> dict[str, Any]:
    """``gpuprof ARGS --format json``, in-process; the parsed report (exit 1 only says an error was found)."""
    from click.testing import CliRunner

    from gpuprof.cli import cli

    result = CliRunner().invoke(cli, [*args, "--format", "json", "--fail-on", "error"])
    if result.exit_code not in (0, 1):
        raise RuntimeError(f"gpuprof {' '.join(args)} exited {result.exit_code}: {result.output[-500:]}"
                           + (f" ({type(result.exception).__name__}: {result.exception})" if result.exception else ""))
    return json.loads(result.stdout)


class _Cache:
    """Each file analysed at most once per command."""

    def __init__(self) -> None:
        self._seen: dict[tuple[str, ...], dict[str, Any]] = {}

    def get(self, *args: str) -> dict[str, Any]:
        if args not in self._seen:
            self._seen[args] = _cli_json(list(args))
        return self._seen[args]


def _codes(report: dict[str, Any]) -> set[str]:
    return {f["code"] for f in report.get("findings", [])}


def _site_matches(site: dict[str, Any], want: dict[str, Any]) -> bool:
    return Path(str(site.get("file") or "")).name == want["file"] and site.get("line") == want["line"]


# --------------------------------------------------------------------------- the checks, by kind
def _codes_check(seen: set[str], spec: dict[str, Any]) -> tuple[bool, str]:
    missing = sorted(set(spec.get("must", ())) - seen)
    unwanted = sorted(set(spec.get("must_not", ())) & seen)
    ok = not missing and not unwanted
    return ok, (f"codes {sorted(seen)}" + (f"; missing {missing}" if missing else "")
                + (f"; must not have {unwanted}" if unwanted else ""))


def _analyze_codes(path: Path, spec: dict[str, Any], c: _Cache) -> tuple[bool, str]:
    return _codes_check(_codes(c.get("analyze", str(path))), spec)


def _report_codes(path: Path, spec: dict[str, Any], c: _Cache) -> tuple[bool, str]:
    report = json.loads(path.read_text(encoding="utf-8"))
    ok, detail = _codes_check(_codes(report), spec)
    for want in spec.get("locations", ()):
        locs = [f.get("location") or {} for f in report.get("findings", []) if f["code"] == want["code"]]
        found = any(_site_matches(loc, want) for loc in locs)
        ok = ok and found
        detail += (f"; {want['code']} at {want['file']}:{want['line']}: {found}"
                   + ("" if found else f" (at {[(loc.get('file'), loc.get('line')) for loc in locs]})"))
    text = spec.get("message_contains")
    if text:
        found = any(text in f.get("message", "") for f in report.get("findings", []))
        ok = ok and found
        detail += f"; a message names {text!r}: {found}"
    return ok, detail


def _steps(path: Path, spec: dict[str, Any], c: _Cache) -> tuple[bool, str]:
    got = c.get("analyze", str(path))["traces"][0]["num_steps"]
    return got == spec["count"], f"gpuprof analyze: {got} steps, raw JSON at record time: {spec['count']}"


def _utilization(path: Path, spec: dict[str, Any], c: _Cache) -> tuple[bool, str]:
    got = c.get("analyze", str(path))["traces"][0]["gpu_utilization"]
    want = spec["value"]
    if want is None or got is None:
        return got is None and want is None, f"gpuprof analyze: {got}, raw JSON: {want} (no GPU activity)"
    lo, hi = spec.get("range", (0.0, 1.0))
    ok = abs(got - want) <= spec.get("tolerance", UTILIZATION_TOLERANCE) and lo <= got <= hi
    return ok, f"gpuprof analyze: {got:.3f}, raw JSON: {want:.3f}, allowed range {lo}-{hi}"


def _h2d_bytes(path: Path, spec: dict[str, Any], c: _Cache) -> tuple[bool, str]:
    trace = c.get("analyze", str(path))["traces"][0]
    h2d = [x for x in trace["copies"] if x["direction"] == "HtoD"]
    steps = max(trace["num_steps"], 1)
    per_step = sum(x["bytes"] for x in h2d) / steps
    kinds = sorted({x["memory"] for x in h2d})
    ok = per_step == spec["bytes"] and kinds == [spec["memory"]]
    return ok, (f"gpuprof analyze: {per_step:,.0f} HtoD bytes per step from {kinds} memory; the example's "
                f"batch: {spec['bytes']:,} from {spec['memory']}")


def _sync_site(path: Path, spec: dict[str, Any], c: _Cache) -> tuple[bool, str]:
    trace = c.get("analyze", str(path))["traces"][0]
    hits = [s for s in trace["syncs"] if Path(str(s.get("location") or "").rsplit(":", 1)[0]).name == spec["file"]]
    count = sum(s["count"] for s in hits)
    need = spec.get("min_per_step", 1) * trace["num_steps"]
    return count >= need, (f"gpuprof analyze: {count} syncs in {spec['file']} (need {need}; the .item() is at "
                           f"line {spec['source_line']}); all: ") + ", ".join(
        f"{s['cause']}@{s.get('location')}x{s['count']}" for s in trace["syncs"][:5])


def _leak_site_trace(path: Path, spec: dict[str, Any], c: _Cache) -> tuple[bool, str]:
    """``gpuprof memory diff TRACE``: the site that grew most is the leak's line, and it grew every step."""
    report = c.get("memory", "diff", str(path))
    dev = next((d for d in report["sections"][0]["devices"] if d["device"].startswith(spec["device"])), None)
    if dev is None or not dev["sites"]:
        return False, f"no {spec['device']} growth table in gpuprof memory diff"
    top = dev["sites"][0]
    alloc = [s["allocated"] for s in dev["step_allocated"]]
    rising = all(b > a for a, b in zip(alloc, alloc[1:])) and len(alloc) >= 2
    ok = (Path(str(top.get("file") or "")).name == spec["file"] and top.get("function") == spec["function"]
          and top["growth"] > 0 and rising)
    return ok, (f"top growing site {top['site']} (+{top['growth']:,} bytes), want {spec['file']} "
                f"{spec['function']}() (the leak is at line {spec['source_line']}); allocated at step ends {alloc}")


def _leak_site_snapshot(path: Path, spec: dict[str, Any], c: _Cache) -> tuple[bool, str]:
    """``gpuprof memory SNAPSHOT``: of the sites with a source file, the leak's line holds the most at the peak."""
    report = c.get("memory", str(path))
    dev = next((d for d in report["sections"][0]["devices"] if d["device"].startswith("cuda")), None)
    if dev is None:
        return False, "no CUDA device in gpuprof memory"
    with_file = [s for s in dev["top_sites"] if s.get("file")]
    if not with_file:
        return False, f"no site with a source file among {[s['site'] for s in dev['top_sites']]}"
    top = with_file[0]
    return _site_matches(top, spec), f"top site with a file: {top['site']} ({top['bytes']:,} bytes), " \
                                     f"want {spec['file']}:{spec['line']}"


def _oom(path: Path, spec: dict[str, Any], c: _Cache) -> tuple[bool, str]:
    """``gpuprof memory OOM_SNAPSHOT``: GP512 with the request and the live bytes the run measured."""
    report = c.get("memory", str(path))
    f = next((f for f in report["findings"] if f["code"] == "GP512"), None)
    if f is None:
        return False, f"no GP512 in {sorted(_codes(report))}"
    ev = f["evidence"][0]
    requested, allocated = ev["value"], ev["extra"]["allocated"]
    ok = requested == spec["requested"] and spec["allocated"] <= allocated <= spec["allocated"] + spec["slack"]
    loc = f.get("location") or {}
    if spec.get("file"):
        ok = ok and _site_matches(loc, spec)
    return ok, (f"GP512 requested {requested:,} (want {spec['requested']:,}), allocated {allocated:,} "
                f"(want {spec['allocated']:,} + at most {spec['slack']:,}), at {loc.get('file')}:{loc.get('line')}")


def _size(path: Path, spec: dict[str, Any], c: _Cache) -> tuple[bool, str]:
    size = path.stat().st_size
    ok = size <= spec["max_bytes"] and (spec.get("sha256") is None or _sha256(path) == spec["sha256"])
    return ok, f"{size:,} bytes (cap {spec['max_bytes']:,}), sha256 as recorded: {ok}"


def _sha256(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


CHECKS: dict[str, Callable[[Path, dict[str, Any], _Cache], tuple[bool, str]]] = {
    "size": _size,
    "analyze_codes": _analyze_codes,
    "report_codes": _report_codes,
    "steps": _steps,
    "gpu_utilization": _utilization,
    "h2d_bytes_per_step": _h2d_bytes,
    "sync_site": _sync_site,
    "leak_site_trace": _leak_site_trace,
    "leak_site_snapshot": _leak_site_snapshot,
    "oom": _oom,
}


def check_entry(folder: Path, entry: dict[str, Any], cache: _Cache | None = None) -> list[CheckResult]:
    """Run every check the manifest lists for one file."""
    cache = cache or _Cache()
    path = folder / entry["file"]
    if not path.is_file():
        return [CheckResult(entry["file"], "exists", False, "listed in the manifest but missing")]
    out = []
    for spec in entry["checks"]:
        kind = spec["kind"]
        fn = CHECKS.get(kind)
        if fn is None:
            out.append(CheckResult(entry["file"], kind, False, "unknown check kind (newer recorder?)"))
            continue
        try:
            ok, detail = fn(path, spec, cache)
        except (RuntimeError, KeyError, IndexError, ValueError, OSError) as err:
            ok, detail = False, f"{type(err).__name__}: {err}"
        out.append(CheckResult(entry["file"], kind, ok, detail))
    return out


def check_folder(folder: str | Path) -> list[CheckResult]:
    """Every check of every file in ``folder/manifest.json``."""
    folder = Path(folder)
    manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    if manifest.get("version") != MANIFEST_VERSION:
        return [CheckResult(MANIFEST, "version", False, f"version {manifest.get('version')}, "
                                                        f"this checker reads {MANIFEST_VERSION}")]
    cache = _Cache()
    return [r for entry in manifest["files"] for r in check_entry(folder, entry, cache)]


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: gpu_truth_check.py FOLDER (holding manifest.json)", file=sys.stderr)
        return 2
    results = check_folder(argv[0])
    for r in results:
        print(r.line())
    failed = sum(not r.ok for r in results)
    print(f"{len(results) - failed} of {len(results)} checks passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Record real GPU traces and memory snapshots for gpuprof's tests (issue 14), in one command.

    PYTHONPATH=. python examples/record_gpu_truth.py tests/data/gpu

On a CUDA machine this runs every pathology example and its ``--baseline``
twin for a few steps under gpuprof's capture, checks that each pathology is
flagged and each baseline is not, and writes into OUT:

* ``<example>[_baseline].pt.trace.json.gz``: the recorded steps (gzip, at most
  ``--max-bytes``; a larger trace is cut to its first steps, and the manifest
  says so);
* ``<example>[_baseline].report.json``: the capture's report (runtime GP6xx
  findings cannot be re-derived from a trace);
* ``memory_leak.memory_snapshot.pickle``: the CUDA memory history of the
  leaking example's recorded steps (the planted leak);
* ``oom.memory_snapshot.pickle`` / ``oom.memory_stats.json`` / ``oom.report.json``:
  an out-of-memory error, provoked by allocating past
  ``torch.cuda.set_per_process_memory_fraction`` (1 GiB);
* ``manifest.json``: provenance (GPU, driver, CUDA, torch, gpuprof commit) and,
  for every file, the expectations computed from the run itself (codes, step
  count, GPU utilisation from the raw JSON, host-to-device bytes per step of
  the example's batch, the leak's and the ``.item()``'s source lines, the
  out-of-memory numbers). ``examples/gpu_truth_check.py`` checks a folder
  against it; ``tests/test_gpu_truth.py`` runs that check in CI;
* ``README.md``: the same, for people.

It then re-checks the folder with ``gpu_truth_check.py``, prints a summary
table and exits 1 if any expectation failed (every run is attempted; one
failing example does not stop the others), 0 otherwise. Without CUDA it says
so in one line and exits 0; ``--allow-cpu`` runs the CPU-capable examples
through the same pipeline instead (gpuprof's own tests use it; the leak and
out-of-memory snapshots are CUDA-only and are not made on CPU). CPU
recordings are refused in a folder named ``tests/data/gpu``.

Budget: 13 runs of roughly 5-20 s each on an H100 (expected under 5
minutes); ``--budget`` (default 360 s) stops starting new runs after that
long and ``--timeout`` (120 s) ends a run that hangs, so the whole command
stays within a 10-minute limit. ``--only pageable_copies oom`` re-records a few.

Running from a source tree: the script puts its checkout first on
``sys.path`` and in the examples' ``PYTHONPATH``. gpuprof itself needs the
wheels ``msgspec``, ``numpy``, ``click`` and ``rich`` (and ``torch`` to
record); ``tensorboard`` is optional (without it each example warns once and
writes no event files). For a machine without internet, carry them, e.g.::

    pip download msgspec click rich numpy --only-binary=:all: --python-version 3.12 \\
        --platform manylinux2014_x86_64 -d wheels/
    pip install --no-index wheels/*.whl      # on the GPU machine

A missing one is named in one line (exit 2) before anything runs.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import hashlib
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

EXAMPLES = Path(__file__).resolve().parent
REPO = EXAMPLES.parent
if str(REPO) not in sys.path:  # run from a source checkout: this gpuprof, not an installed one
    sys.path.insert(0, str(REPO))

REQUIRED = ("torch", "msgspec", "numpy", "click", "rich")
OPTIONAL = ("tensorboard",)
MAX_BYTES = 900_000  # "well under 1 MB" per file
FACTS_ENV = "GPUPROF_EXAMPLE_FACTS"  # examples/common.py writes what the example knows here
OOM_LIMIT = 1 << 30  # the per-process memory cap of the out-of-memory run
OOM_CHUNK = 96 << 20  # a multiple of 2 MiB: the allocator's request is exactly this
OOM_SLACK = 2 << 20  # allocated at the OOM: the held chunks plus at most this (profiler scratch)


@dataclass(frozen=True)
class Case:
    """One example run and what its report must (not) contain."""

    script: str
    baseline: bool
    steps: int
    must: frozenset[str]
    must_not: frozenset[str]
    exit_code: int = 0
    shows: str = ""

    @property
    def name(self) -> str:
        return Path(self.script).stem + ("_baseline" if self.baseline else "")


def _pair(script: str, steps: int, must: set[str], must_not: set[str], shows: str, baseline_shows: str,
          exit_code: int = 0) -> list[Case]:
    return [Case(script, False, steps, frozenset(must), frozenset(), exit_code, shows),
            Case(script, True, steps, frozenset(), frozenset(must_not), 0, baseline_shows)]


# Codes GP6xx come from the capture's runtime checks (report.json only); the others from the
# trace analyzer, which the checks re-run on the kept trace. Most important first (--budget).
CUDA_CASES: list[Case] = [
    *_pair("pageable_copies.py", 20, {"GP602", "GP201", "GP202"}, {"GP602", "GP201", "GP202"},
           "blocking host-to-device copies from pageable memory (pin_memory=False)",
           "the same batches copied from pinned memory, non_blocking"),
    *_pair("item_every_step.py", 20, {"GP630", "GP203"}, {"GP630", "GP203"},
           "loss.item() every step: the host waits for the GPU (host-sync locator)",
           "losses summed on the GPU, read once after the loop"),
    *_pair("fp32_vs_amp.py", 20, {"GP621", "GP302"}, {"GP621", "GP302"},
           "FP32 matmuls with TF32 disabled: tensor cores idle",
           "bf16 autocast: tensor-core GEMMs"),
    *_pair("memory_leak.py", 20, {"GP640"}, {"GP640"},
           "total_loss += loss with retain_graph: every step's activations kept",
           "total_loss += loss.item(): flat memory"),
    *_pair("dataloader_workers.py", 20, {"GP601"}, {"GP601", "GP102"},
           "num_workers=0: the loop waits for every batch",
           "2 persistent workers prefetch batches"),
    *_pair("device_mismatch.py", 20, {"GP612", "GP613"}, {"GP610", "GP611", "GP612", "GP613"},
           "the batch on the CPU, the model on CUDA: fails in step 0 (no trace, report only)",
           "the batch moved to the model's device", exit_code=1),
]
CPU_CASES: list[Case] = [
    *_pair("memory_leak.py", 12, {"GP640"}, {"GP640"},
           "total_loss += loss with retain_graph (CPU allocator, recorded steps)",
           "total_loss += loss.item(): flat memory"),
    *_pair("dataloader_workers.py", 20, {"GP601"}, {"GP601", "GP102"},
           "num_workers=0: the loop waits for every batch", "2 persistent workers prefetch batches"),
    *_pair("device_mismatch.py", 20, {"GP612", "GP613"}, {"GP610", "GP611", "GP612", "GP613"},
           "the batch on the meta device, the model on the CPU: fails in step 0 (report only)",
           "the batch on the model's device", exit_code=1),
]

# Source lines the checks expect gpuprof to name, found in the example that ran.
LEAK_LINE = ("memory_leak.py", "loss = loss_fn(model(x), y)")  # allocates the activations the leak keeps
ITEM_LINE = ("item_every_step.py", "losses.append(loss.item())")
# runtime findings (report.json) and where they must point: (code, script, text of the line)
RUNTIME_LINES: dict[str, tuple[str, str, str]] = {
    "dataloader_workers.py": ("GP601", "dataloader_workers.py", "for x, y in loader:"),
    "item_every_step.py": ("GP630", "item_every_step.py", "losses.append(loss.item())"),
    "device_mismatch.py": ("GP612", "device_mismatch.py", "return self.head(self.encoder(x))"),
}


@dataclass
class Run:
    """What one example run produced and how it measured up."""

    case: Case
    rc: int | None = None
    seconds: float = 0.0
    codes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    stderr_tail: str = ""

    @property
    def ok(self) -> bool:
        return self.rc is not None and not self.problems


# --------------------------------------------------------------------------- environment
def missing_packages() -> tuple[list[str], list[str]]:
    """(required, optional) packages that cannot be imported here."""
    def absent(names: tuple[str, ...]) -> list[str]:
        return [n for n in names if importlib.util.find_spec(n) is None]

    return absent(REQUIRED), absent(OPTIONAL)


def _version(dist: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def _nvidia_smi() -> dict[str, str]:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                              "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    if out.returncode != 0 or not out.stdout.strip():
        return {}
    name, driver, mem = (s.strip() for s in (out.stdout.splitlines()[0].split(",") + ["", ""])[:3])
    return {"name": name, "driver": driver, "memory": mem}


def environment(cuda: bool) -> dict[str, Any]:
    import torch

    import gpuprof

    env: dict[str, Any] = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if cuda else None,
        "packages": {p: _version(p) for p in ("msgspec", "numpy", "click", "rich", "tensorboard")},
        "gpuprof": gpuprof.__version__,
        "gpuprof_commit": _git("rev-parse", "HEAD"),
        "gpuprof_dirty": bool(_git("status", "--porcelain")) if _git("rev-parse", "HEAD") else None,
    }
    if cuda:
        props = torch.cuda.get_device_properties(0)
        smi = _nvidia_smi()
        env.update({
            "gpu": props.name,
            "gpu_count": torch.cuda.device_count(),
            "compute_capability": f"{props.major}.{props.minor}",
            "gpu_memory_bytes": props.total_memory,
            "driver": smi.get("driver") or "unknown (no nvidia-smi)",
        })
    return env


# --------------------------------------------------------------------------- running one example
def source_line(script: str, needle: str) -> int:
    """The 1-based line of ``script`` (in examples/) holding ``needle``; exactly one must."""
    lines = (EXAMPLES / script).read_text(encoding="utf-8").splitlines()
    hits = [i + 1 for i, text in enumerate(lines) if needle in text]
    if len(hits) != 1:
        raise ValueError(f"{script}: {len(hits)} lines contain {needle!r}, expected 1")
    return hits[0]


def _child_env(facts: Path, cpu: bool) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    env[FACTS_ENV] = str(facts)
    env.setdefault("PYTHONWARNINGS", "ignore")
    if cpu:
        env.setdefault("OMP_NUM_THREADS", "1")  # CI machines are small; the examples are tiny
    return env


def run_case(case: Case, device: str, work: Path, timeout: float) -> tuple[Run, Path, dict[str, Any]]:
    """Run one example under capture; the run, its run directory and the facts it wrote."""
    run = Run(case)
    logdir = work / case.name
    facts_path = work / f"{case.name}.facts.json"
    cmd = [sys.executable, str(EXAMPLES / case.script), "--logdir", str(logdir), "--run-name", "r",
           "--device", device, "--steps", str(case.steps), *(["--baseline"] if case.baseline else [])]
    facts = _run_child(run, cmd, facts_path, device == "cpu", timeout)
    return run, logdir / "r", facts


def _run_child(run: Run, cmd: list[str], facts_path: Path, cpu: bool, timeout: float) -> dict[str, Any]:
    """Run ``cmd`` in examples/, record its exit code, stderr tail and time in ``run``; the facts it wrote."""
    t0 = time.monotonic()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=str(EXAMPLES),
                              env=_child_env(facts_path, cpu))
        run.rc = proc.returncode
        run.stderr_tail = proc.stderr[-1500:]
    except subprocess.TimeoutExpired:
        run.problems.append(f"timed out after {timeout:.0f} s")
    run.seconds = time.monotonic() - t0
    return json.loads(facts_path.read_text(encoding="utf-8")) if facts_path.is_file() else {}


def judge(run: Run, run_dir: Path) -> dict[str, Any] | None:
    """Compare the run with its case; the capture's report, if it wrote one."""
    case = run.case
    if run.rc is not None and run.rc != case.exit_code:
        run.problems.append(f"exit code {run.rc}, expected {case.exit_code}")
    report_path = run_dir / "report.json"
    if not report_path.is_file():
        run.problems.append("no report.json")
        return None
    report = json.loads(report_path.read_text(encoding="utf-8"))
    run.codes = sorted({f["code"] for f in report.get("findings", [])})
    missing = sorted(case.must - set(run.codes))
    unwanted = sorted(case.must_not & set(run.codes))
    if missing:
        run.problems.append(f"pathology not flagged: {', '.join(missing)} missing")
    if unwanted:
        run.problems.append(f"baseline flagged: {', '.join(unwanted)}")
    return report


# --------------------------------------------------------------------------- keeping files small
def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _step_starts(events: list[dict[str, Any]]) -> list[float]:
    return sorted(float(e["ts"]) for e in events
                  if e.get("ph") == "X" and re.fullmatch(r"ProfilerStep#\d+", str(e.get("name"))))


def keep_trace(src: Path, dst: Path, max_bytes: int) -> dict[str, Any] | None:
    """Copy ``src`` to ``dst``; if larger than ``max_bytes``, keep only its first steps.

    Cutting at the start of the first dropped step keeps every event of the
    kept steps (and the GPU work they launched that finished before it); the
    metadata and device properties stay. Returns what was cut, or None.
    """
    shutil.copyfile(src, dst)
    if dst.stat().st_size <= max_bytes:
        return None
    with gzip.open(src, "rt", encoding="utf-8") as fh:
        data = json.load(fh)
    events = data["traceEvents"]
    starts = _step_starts(events)
    for keep in range(len(starts) - 1, 0, -1):
        cut = starts[keep]
        data["traceEvents"] = [e for e in events if "ts" not in e or e.get("ph") == "M" or float(e["ts"]) < cut]
        with gzip.open(dst, "wt", encoding="utf-8", compresslevel=9) as fh:
            json.dump(data, fh, separators=(",", ":"))
        if dst.stat().st_size <= max_bytes:
            return {"steps_recorded": len(starts), "steps_kept": keep, "bytes_recorded": src.stat().st_size}
    raise ValueError(f"{src.name}: over {max_bytes:,} bytes even cut to its first step")


def keep_snapshot(src: Path, dst: Path, max_bytes: int) -> dict[str, Any] | None:
    """Copy a snapshot pickle; if too large, keep only the newest history entries.

    That is what the allocator's ring buffer does with a smaller
    ``max_entries``: the state (segments and blocks) is untouched.
    """
    shutil.copyfile(src, dst)
    if dst.stat().st_size <= max_bytes:
        return None
    from gpuprof.memory.snapshot import dump_snapshot
    from gpuprof.memory.snapshot.safeload import load_pickle_file

    snap = load_pickle_file(src)
    traces = snap.get("device_traces") or []
    full = [len(t) for t in traces]
    keep = max(full, default=0)
    while keep > 0:
        keep //= 2
        snap["device_traces"] = [t[len(t) - min(keep, len(t)):] for t in traces]
        dump_snapshot(snap, dst)
        if dst.stat().st_size <= max_bytes:
            return {"history_entries_recorded": full, "history_entries_kept": min(keep, max(full))}
    raise ValueError(f"{src.name}: over {max_bytes:,} bytes even without history")


# --------------------------------------------------------------------------- the out-of-memory run
def oom_child(logdir: str, facts_path: str) -> int:
    """Allocate past a 1 GiB per-process cap under gpuprof's capture (runs in its own process)."""
    import torch

    import gpuprof
    from gpuprof.capture import Schedule

    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(OOM_LIMIT / total)
    facts: dict[str, Any] = {"limit_bytes": OOM_LIMIT, "chunk_bytes": OOM_CHUNK, "device_total_bytes": total}
    held: list[Any] = []
    try:
        with gpuprof.profile(logdir, run="r", schedule=Schedule(wait=1, warmup=1, active=20)) as prof:
            for _ in range(2 * OOM_LIMIT // OOM_CHUNK):
                facts["allocated_before_bytes"] = torch.cuda.memory_allocated()
                held.append(torch.empty(OOM_CHUNK, dtype=torch.uint8, device="cuda"))  # OOM here
                prof.step()
    except torch.cuda.OutOfMemoryError as err:
        facts["oom_message"] = str(err).strip().splitlines()[0]
    facts["held_chunks"] = len(held)
    Path(facts_path).write_text(json.dumps(facts), encoding="utf-8")
    return 0 if "oom_message" in facts else 1


def run_oom(work: Path, timeout: float) -> tuple[Run, Path, dict[str, Any]]:
    case = Case("oom", False, 0, frozenset({"GP641"}), frozenset(), 0,
                "allocations of 96 MiB past a 1 GiB set_per_process_memory_fraction cap")
    run = Run(case)
    facts_path = work / "oom.facts.json"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--oom-child", str(work / "oom"), str(facts_path)]
    facts = _run_child(run, cmd, facts_path, False, timeout)
    if run.rc is not None and "oom_message" not in facts:
        run.problems.append("no out-of-memory error happened")
    return run, work / "oom" / "r", facts


# --------------------------------------------------------------------------- manifest entries
def _runtime_split(codes: frozenset[str]) -> list[str]:
    return sorted(c for c in codes if not c.startswith("GP6"))


def trace_checks(case: Case, trace: Path, device: str, facts: dict[str, Any]) -> list[dict[str, Any]]:
    """The expectations of one kept trace, from the run (nothing here asks gpuprof)."""
    sys.path.insert(0, str(EXAMPLES))
    from gpu_truth_check import raw_gpu_utilization, raw_step_count

    checks: list[dict[str, Any]] = [
        {"kind": "analyze_codes", "must": _runtime_split(case.must), "must_not": _runtime_split(case.must_not)},
        {"kind": "steps", "count": raw_step_count(trace)},
        {"kind": "gpu_utilization", "value": raw_gpu_utilization(trace), "range": [0.0, 1.0]},
    ]
    stem = Path(case.script).stem
    if device == "cuda" and stem == "pageable_copies" and "h2d_bytes_per_step" in facts:
        checks.append({"kind": "h2d_bytes_per_step", "bytes": facts["h2d_bytes_per_step"],
                       "memory": "pinned" if case.baseline else "pageable"})
    # trace-based sites: file and function only (see gpu_truth_check's docstring), the line for the reader
    if device == "cuda" and stem == "item_every_step" and not case.baseline:
        checks.append({"kind": "sync_site", "file": ITEM_LINE[0], "source_line": source_line(*ITEM_LINE),
                       "min_per_step": 1})
    if stem == "memory_leak" and not case.baseline:
        checks.append({"kind": "leak_site_trace", "device": device, "file": LEAK_LINE[0], "function": "main",
                       "source_line": source_line(*LEAK_LINE)})
    return checks


def _entry(out: Path, name: str, kind: str, run: str, shows: str, checks: list[dict[str, Any]], max_bytes: int,
           cut: dict[str, Any] | None = None) -> dict[str, Any]:
    path = out / name
    size = {"kind": "size", "max_bytes": max_bytes, "sha256": _sha256(path)}
    return {"file": name, "kind": kind, "run": run, "shows": shows, "bytes": path.stat().st_size,
            "cut": cut, "checks": [size, *checks]}


def record_case(case: Case, device: str, work: Path, out: Path, args: argparse.Namespace,
                files: list[dict[str, Any]]) -> Run:
    """Run one case and keep its files; every failure becomes a problem of the run."""
    run, run_dir, facts = run_case(case, device, work, args.timeout)
    report = judge(run, run_dir)
    try:
        if report is not None:
            name = f"{case.name}.report.json"
            shutil.copyfile(run_dir / "report.json", out / name)
            spec: dict[str, Any] = {"kind": "report_codes", "must": sorted(case.must),
                                    "must_not": sorted(case.must_not)}
            if case.script == "device_mismatch.py" and not case.baseline:
                spec["message_contains"] = "Net.encoder.0"  # GP612/GP613 name the module path
            where = RUNTIME_LINES.get(case.script)
            if where and not case.baseline and where[0] in case.must:
                spec["locations"] = [{"code": where[0], "file": where[1], "line": source_line(where[1], where[2])}]
            files.append(_entry(out, name, "report", case.name, case.shows, [spec], args.max_bytes))
            run.files.append(name)
        traces = sorted(run_dir.glob("*.pt.trace.json.gz"))
        if case.exit_code == 0 and len(traces) != 1:
            run.problems.append(f"{len(traces)} traces written, expected 1")
        if traces and case.exit_code == 0:
            name = f"{case.name}.pt.trace.json.gz"
            cut = keep_trace(traces[0], out / name, args.max_bytes)
            files.append(_entry(out, name, "trace", case.name, case.shows,
                                trace_checks(case, out / name, device, facts), args.max_bytes, cut))
            run.files.append(name)
        snaps = sorted(run_dir.glob("*.memory_snapshot.pickle"))
        if device == "cuda" and case.script == "memory_leak.py" and not case.baseline:
            if not snaps:
                run.problems.append("no memory history snapshot written")
            else:
                name = "memory_leak.memory_snapshot.pickle"
                cut = keep_snapshot(snaps[0], out / name, args.max_bytes)
                check = {"kind": "leak_site_snapshot", "file": LEAK_LINE[0], "line": source_line(*LEAK_LINE)}
                files.append(_entry(out, name, "snapshot", case.name,
                                    "CUDA memory history of the recorded steps of the planted leak", [check],
                                    args.max_bytes, cut))
                run.files.append(name)
    except (OSError, ValueError, KeyError) as err:
        run.problems.append(f"keeping the files failed: {type(err).__name__}: {err}")
    return run


def record_oom(work: Path, out: Path, args: argparse.Namespace, files: list[dict[str, Any]]) -> Run:
    run, run_dir, facts = run_oom(work, args.timeout)
    report = judge(run, run_dir)
    try:
        snaps = sorted(run_dir.glob("*.oom.*.memory_snapshot.pickle"))
        stats = sorted(run_dir.glob("*.oom.*.memory_stats.gpuprof.json"))
        if not snaps or not stats:
            run.problems.append("the out-of-memory observer wrote no snapshot/stats")
        elif "oom_message" in facts:
            held = int(facts["held_chunks"])
            name = "oom.memory_snapshot.pickle"
            cut = keep_snapshot(snaps[0], out / name, args.max_bytes)
            check = {"kind": "oom", "requested": OOM_CHUNK, "allocated": held * OOM_CHUNK, "slack": OOM_SLACK,
                     "file": Path(__file__).name, "line": _oom_line()}
            files.append(_entry(out, name, "snapshot", "oom",
                                f"out-of-memory at chunk {held + 1} of 96 MiB past the 1 GiB cap "
                                f"({facts['oom_message'][:120]})", [check], args.max_bytes, cut))
            shutil.copyfile(stats[0], out / "oom.memory_stats.json")
            files.append(_entry(out, "oom.memory_stats.json", "stats", "oom",
                                "torch.cuda.memory_stats() and the observer's arguments at the OOM", [],
                                args.max_bytes))
            run.files += [name, "oom.memory_stats.json"]
        if report is not None:
            shutil.copyfile(run_dir / "report.json", out / "oom.report.json")
            files.append(_entry(out, "oom.report.json", "report", "oom", "the capture's report: GP641",
                                [{"kind": "report_codes", "must": ["GP641"], "must_not": []}], args.max_bytes))
            run.files.append("oom.report.json")
    except (OSError, ValueError, KeyError) as err:
        run.problems.append(f"keeping the files failed: {type(err).__name__}: {err}")
    return run


def _oom_line() -> int:
    lines = Path(__file__).read_text(encoding="utf-8").splitlines()
    return next(i + 1 for i, t in enumerate(lines) if t.rstrip().endswith("# OOM here"))


# --------------------------------------------------------------------------- manifest, README, summary
def write_readme(out: Path, manifest: dict[str, Any]) -> None:
    env = manifest["environment"]
    gpu = (f"{env['gpu']} (compute capability {env['compute_capability']}, "
           f"{env['gpu_memory_bytes'] / 2**30:.1f} GiB), driver {env['driver']}"
           if manifest["device"] == "cuda" else "none: CPU run (--allow-cpu), for gpuprof's own tests")
    lines = [
        "# Real recordings for gpuprof's tests",
        "",
        f"Recorded {manifest['recorded_at']} by `{' '.join(manifest['command'])}` "
        "(examples/record_gpu_truth.py). Do not edit: re-record instead.",
        "",
        f"- GPU: {gpu}",
        f"- CUDA (torch build): {env['torch_cuda']}, cuDNN {env['cudnn']}",
        f"- torch {env['torch']}, Python {env['python']}, {env['platform']}",
        f"- gpuprof {env['gpuprof']}, commit {env['gpuprof_commit'] or 'unknown (no git)'}"
        + (" (with uncommitted changes)" if env.get("gpuprof_dirty") else ""),
        f"- packages: {', '.join(f'{k} {v}' for k, v in env['packages'].items())}",
        "",
        "| file | bytes | what it shows | checked by tests/test_gpu_truth.py |",
        "|---|---:|---|---|",
    ]
    for f in manifest["files"]:
        checks = ", ".join(_describe(c) for c in f["checks"] if c["kind"] != "size") or "size only"
        cut = f" (cut to {f['cut']})" if f.get("cut") else ""
        lines.append(f"| `{f['file']}` | {f['bytes']:,} | {f['shows']}{cut} | {checks} |")
    lines += ["", "| run | seconds | result | codes in report.json |", "|---|---:|---|---|"]
    for r in manifest["runs"]:
        lines.append(f"| {r['name']} | {r['seconds']:.1f} | {'ok' if r['ok'] else '; '.join(r['problems'])} "
                     f"| {' '.join(r['codes'])} |")
    lines += ["", "Re-check: `PYTHONPATH=. python examples/gpu_truth_check.py " + "tests/data/gpu`.", ""]
    (out / "README.md").write_text("\n".join(lines), encoding="utf-8")


def _describe(c: dict[str, Any]) -> str:
    k = c["kind"]
    if k == "report_codes" and c.get("locations"):
        return (f"report: has {' '.join(c['must']) or '-'} at "
                + ", ".join(f"{w['file']}:{w['line']}" for w in c["locations"]))
    if k in ("analyze_codes", "report_codes"):
        return (f"{'analyze' if k == 'analyze_codes' else 'report'}: has {' '.join(c['must']) or '-'}, "
                f"not {' '.join(c['must_not']) or '-'}")
    if k == "steps":
        return f"{c['count']} steps"
    if k == "gpu_utilization":
        return "no GPU activity" if c["value"] is None else f"GPU utilisation {c['value']:.3f}"
    if k == "h2d_bytes_per_step":
        return f"{c['bytes']:,} HtoD bytes/step ({c['memory']})"
    if k == "leak_site_snapshot":
        return f"leak at {c['file']}:{c['line']}"
    if k in ("sync_site", "leak_site_trace"):  # a trace names the file (and function), not the exact line
        return f"{k.replace('_', ' ')} in {c['file']} (source line {c['source_line']})"
    if k == "oom":
        return f"OOM request {c['requested']:,} B, {c['allocated']:,} B allocated, at {c['file']}:{c['line']}"
    return k


def summary_table(runs: list[Run], checks_failed: int, checks_total: int) -> str:
    width = max((len(r.case.name) for r in runs), default=10)
    rows = [f"{'run':<{width}}  {'rc':>4}  {'s':>6}  result"]
    for r in runs:
        rc = "-" if r.rc is None else str(r.rc)
        result = "ok" if r.ok else "FAIL: " + "; ".join(r.problems)
        rows.append(f"{r.case.name:<{width}}  {rc:>4}  {r.seconds:6.1f}  {result}")
    rows.append(f"file checks: {checks_total - checks_failed} of {checks_total} passed")
    return "\n".join(rows)


def _parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path, help="folder for the recordings (created; its old recordings are replaced)")
    p.add_argument("--allow-cpu", action="store_true",
                   help="without CUDA, run the CPU-capable examples through the same pipeline (for tests)")
    p.add_argument("--only", nargs="+", metavar="EXAMPLE", help="only these examples (e.g. memory_leak oom)")
    p.add_argument("--max-bytes", type=int, default=MAX_BYTES, help=f"cap per file (default {MAX_BYTES:,})")
    # budget + one run's timeout + the final check stay under a 10-minute session limit
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per run (default 120)")
    p.add_argument("--budget", type=float, default=360.0,
                   help="start no new run after this many seconds (default 360)")
    return p.parse_args(argv)


def main(argv: list[str]) -> int:
    if argv[:1] == ["--oom-child"]:
        return oom_child(argv[1], argv[2])
    args = _parse(argv)
    required, optional = missing_packages()
    if required:
        print(f"record_gpu_truth: missing Python packages {', '.join(required)}: install or carry their wheels "
              "(see this script's docstring); nothing recorded", file=sys.stderr)
        return 2
    import torch

    cuda = torch.cuda.is_available()
    if not cuda and not args.allow_cpu:
        print(f"record_gpu_truth: no CUDA device (torch {torch.__version__}, CUDA build {torch.version.cuda}): "
              "nothing recorded; run this on a CUDA machine")
        return 0
    out: Path = args.out.resolve()
    if not cuda and out.parts[-3:] == ("tests", "data", "gpu"):
        print("record_gpu_truth: refusing to write a CPU recording into tests/data/gpu", file=sys.stderr)
        return 2
    device = "cuda" if cuda else "cpu"
    cases = CUDA_CASES if cuda else CPU_CASES
    wanted = set(args.only or [])
    cases = [c for c in cases if not wanted or Path(c.script).stem in wanted]
    do_oom = cuda and (not wanted or "oom" in wanted)
    if optional:
        print(f"record_gpu_truth: {', '.join(optional)} not installed: the examples warn once each and write "
              "no TensorBoard files (the recordings are not affected)", file=sys.stderr)

    out.mkdir(parents=True, exist_ok=True)
    for old in [*out.glob("*.pt.trace.json.gz"), *out.glob("*.report.json"), *out.glob("*.pickle"),
                *out.glob("*.memory_stats.json"), out / "manifest.json"]:
        old.unlink(missing_ok=True)
    started = time.monotonic()
    recorded_at = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    runs: list[Run] = []
    files: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="gpu_truth_") as tmp:
        work = Path(tmp)
        jobs: list[Case | None] = [*cases, *([None] if do_oom else [])]
        for job in jobs:
            name = "oom" if job is None else job.name
            if time.monotonic() - started > args.budget:
                skipped = Run(job or Case("oom", False, 0, frozenset(), frozenset()))
                skipped.problems.append(f"not run: the {args.budget:.0f} s budget was spent")
                runs.append(skipped)
                continue
            print(f"record_gpu_truth: {name} ...", file=sys.stderr, flush=True)
            try:
                run = (record_oom(work, out, args, files) if job is None
                       else record_case(job, device, work, out, args, files))
            except Exception as err:  # noqa: BLE001 - a bug here fails this run, not the others; it is reported
                run = Run(job or Case("oom", False, 0, frozenset(), frozenset()))
                run.problems.append(f"recorder error: {type(err).__name__}: {err}")
                traceback.print_exc()
            runs.append(run)
            if not run.ok:
                print(f"  FAIL {name}: {'; '.join(run.problems)}\n  {run.stderr_tail[-600:]}", file=sys.stderr)

    manifest = {
        "version": 1,
        "recorded_at": recorded_at,
        "command": ["python", "examples/record_gpu_truth.py", *argv],
        "device": device,
        "environment": environment(cuda),
        "max_bytes": args.max_bytes,
        "runs": [{"name": r.case.name, "script": r.case.script, "baseline": r.case.baseline,
                  "steps": r.case.steps, "rc": r.rc, "seconds": round(r.seconds, 1), "codes": r.codes,
                  "must": sorted(r.case.must), "must_not": sorted(r.case.must_not), "ok": r.ok,
                  "problems": r.problems, "files": r.files} for r in runs],
        "files": files,
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1), encoding="utf-8")
    write_readme(out, manifest)

    sys.path.insert(0, str(EXAMPLES))
    from gpu_truth_check import check_folder

    results = check_folder(out)
    failed = [r for r in results if not r.ok]
    for r in failed:
        print(r.line(), file=sys.stderr)
    print(summary_table(runs, len(failed), len(results)))
    print(f"record_gpu_truth: {len(files)} files in {out} ({time.monotonic() - started:.0f} s)")
    return 1 if failed or not all(r.ok for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Agreement of gpuprof's GPU time figures with HolisticTraceAnalysis's temporal breakdown.

For every Chrome trace under a folder (default: ``../shared/traces``) this
prints, side by side, HTA's ``TraceAnalysis.get_temporal_breakdown`` (idle /
compute / non-compute, % of HTA's span) and gpuprof's figures for the same
trace, and the differences in percentage points.

gpuprof's figures, from ``gpuprof.trace.metrics`` (main device):

* idle % = 100 - GPU utilisation (busy time / step time, summed over steps);
* compute % = the ``kernel`` part of the step-time breakdown (non-collective
  kernels) / step time;
* non-compute % = the ``communication`` + ``memcpy`` + ``memset`` parts
  (GPU work not overlapped by a compute kernel) / step time.

HTA's span is first to last GPU event of all the trace's steps except the last
(when there are at least two), or of the whole trace without steps; gpuprof's
window is its steps (``ProfilerStep#`` ranges, the last included) or, without
them, the trace after its lead-in. The windows differ by design, so the
differences are expected to be small, not zero; each row says which windows
were compared.

HTA is not a dependency of gpuprof or of its tests. Install it in a private
virtual environment that reuses the system torch, then run this script with
that interpreter::

    python3 -m venv --system-site-packages /work/venv-hta
    /work/venv-hta/bin/pip install --no-deps HolisticTraceAnalysis==0.5.0
    /work/venv-hta/bin/pip install pandas==2.2.3 networkx plotly pydot psutil
    PYTHONPATH=$PWD /work/venv-hta/bin/python bench/compare_hta.py [FOLDER] [--markdown]

Without HTA the script says so and exits 0 (nothing to compare). Each trace
runs in its own process (HTA's memory is released, a crash stays one row).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

_REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(_REPO))
sys.path.insert(1, str(_REPO / "tests" / "support"))  # the test helpers (gpuprof_testing) live in tests/support/, outside the package
from gpuprof_testing.realtraces import TRACES as _DEFAULT  # noqa: E402 - GPUPROF_SHARED_TRACES, default ../shared

_SKIP_PARTS = ("plugin_outputs", "test_resources", "execution_trace/benchmark_simple_add_et")


def _traces(root: Path) -> list[Path]:
    out = []
    for p in sorted(root.rglob("*")):
        name = p.name
        if not p.is_file() or not (name.endswith(".json") or name.endswith(".json.gz")):
            continue
        if any(s in str(p) for s in _SKIP_PARTS):
            continue  # plugin outputs and Chakra execution traces are not Chrome traces
        out.append(p)
    return out


def _one(path: str) -> dict:
    """Both tools' figures for one trace (run in a child process)."""
    row: dict = {"trace": path}
    from gpuprof.trace.load import load_trace
    from gpuprof.trace.metrics import compute_metrics

    m = compute_metrics(load_trace(path))
    total = m.total_time
    if m.main_device is not None and total > 0:
        b = m.mean_breakdown()
        n = m.num_steps
        row["gpuprof"] = {
            "idle": 100.0 * (1.0 - (m.gpu_utilization or 0.0)),
            "compute": 100.0 * b["kernel"] * n / total,
            "non_compute": 100.0 * (b["communication"] + b["memcpy"] + b["memset"]) * n / total,
            "window": f"{n} step(s)" if m.has_step_markers else "whole trace after lead-in",
        }
    try:
        import contextlib
        import io

        from hta.trace_analysis import TraceAnalysis

        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            ta = TraceAnalysis(trace_files={0: path}, trace_dir=str(Path(path).parent))
            df = ta.get_temporal_breakdown(visualize=False)
        r = df.iloc[0]
        row["hta"] = {
            "idle": float(r["idle_time_pctg"]),
            "compute": float(r["compute_time_pctg"]),
            "non_compute": float(r["non_compute_time_pctg"]),
        }
    except Exception as err:  # noqa: BLE001 - HTA's own failure is one row of the table, said as such
        row["hta_error"] = " ".join(f"{type(err).__name__}: {err}".split())[:120]
    return row


def _fmt(d: dict | None) -> str:
    if not d:
        return "–"
    return f"{d['idle']:.1f} / {d['compute']:.1f} / {d['non_compute']:.1f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", nargs="?", default=str(_DEFAULT))
    ap.add_argument("--one", help=argparse.SUPPRESS)  # internal: child process for one trace
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per trace")
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(_one(args.one)))
        return 0
    try:
        import hta  # noqa: F401
    except ImportError:
        print("HolisticTraceAnalysis is not installed in this interpreter: nothing to compare (see the module docstring)")
        return 0
    root = Path(args.folder).resolve()
    if not root.is_dir():
        print(f"{root}: no such folder of traces")
        return 0
    rows = []
    for p in _traces(root):
        try:
            cp = subprocess.run([sys.executable, __file__, "--one", str(p)], capture_output=True, text=True,
                                timeout=args.timeout, env=os.environ.copy())
            lines = [ln for ln in cp.stdout.splitlines() if ln.startswith("{")]
            row = json.loads(lines[-1]) if lines else {"trace": str(p), "error": (cp.stderr.strip().splitlines() or ["?"])[-1][:120]}
        except subprocess.TimeoutExpired:
            row = {"trace": str(p), "error": f"timed out after {args.timeout:.0f} s"}
        rows.append(row)
    print("| trace | gpuprof idle/compute/non-compute % | HTA idle/compute/non-compute % | Δ idle / compute / non-compute (pp) | gpuprof window | note |")
    print("|---|---|---|---|---|---|")
    diffs = []
    for r in rows:
        g, h = r.get("gpuprof"), r.get("hta")
        delta = "–"
        if g and h:
            d = [g[k] - h[k] for k in ("idle", "compute", "non_compute")]
            diffs.append(d)
            delta = " / ".join(f"{x:+.1f}" for x in d)
        note = r.get("hta_error") or r.get("error") or ("" if g else "gpuprof: no GPU activity")
        print(f"| {os.path.relpath(r['trace'], root)} | {_fmt(g)} | {_fmt(h)} | {delta} | {(g or {}).get('window', '–')} | {note} |")
    if diffs:
        for i, k in enumerate(("idle", "compute", "non-compute")):
            vals = sorted(abs(d[i]) for d in diffs)
            within = sum(v <= 2.0 for v in vals)
            print(f"{k}: {len(vals)} traces compared, median |Δ| {vals[len(vals) // 2]:.2f} pp, max {vals[-1]:.1f} pp, "
                  f"{within} within 2 pp")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark: the timeline's size and draw time in the ``--html`` page, and what building it adds to ``analyze``.

For each trace (default: the largest shared trace and the V100 ResNet-50 sample; ``--sizes 200,1000`` measures
instead, or beside the traces named, the shared-derived big inputs that ``../shared/bench/make_big.py`` builds
into ``--workdir``):

1. ``gpuprof analyze FILE --html PAGE`` in a fresh child: its CPU seconds (user+sys), the page's bytes and the
   bytes of the timeline data in it (``traces[].timeline`` of the page's JSON), the events in the recorded steps
   and the rows kept;
2. in this process, the trace loaded once, :func:`gpuprof.analysis.analyze_trace` (which builds the timeline)
   and :func:`gpuprof.views.timeline.build_timeline` alone, alternately, CPU seconds best of ``--repeat``: the
   share of the analysis the timeline costs;
3. the page in headless Chromium (playwright, offline, 1280x900): milliseconds from navigation to the page
   drawn, ``GP.timeline`` drawing the timeline again, and one zoom repaint, best of ``--repeat``.

Figures are printed and written to ``--workdir/timeline.json``; nothing is asserted (times depend on the
machine). Usage: ``python bench/bench_timeline.py [TRACE ...] [--sizes 200] [--repeat 3]``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(1, str(REPO / "tests" / "support"))  # the test helpers (gpuprof_testing) live in tests/support/, outside the package

V100 = ("tbplugin", "samples", "resnet50_num_workers_0", "worker0.1623143089861.pt.trace.json.gz")


def default_traces() -> list[Path]:
    from gpuprof_testing.realtraces import TRACES as root  # GPUPROF_SHARED_TRACES, default ../shared

    if not root.is_dir():
        return []
    largest = max(root.rglob("*.json.gz"), key=lambda p: p.stat().st_size)
    v100 = root.joinpath(*V100)
    return [largest] + ([v100] if v100.exists() and v100 != largest else [])


def big_input(size_mb: int, workdir: Path) -> Path | None:
    """The shared-derived ~``size_mb`` MB V100 input (shared/bench/README.md: 6 copies ~200 MB, 28 ~1 GB)."""
    from gpuprof_testing.realtraces import ROOT, TRACES

    make_big = ROOT / "bench" / "make_big.py"
    src = TRACES.joinpath(*V100)
    if not make_big.exists() or not src.exists():
        return None
    out = workdir / f"timeline_v100_{size_mb}MB.json"
    if not out.exists():
        copies = max(1, round(size_mb * 6 / 200))
        subprocess.run([sys.executable, str(make_big), str(src), str(out), str(copies)], check=True)
    return out


def child_cpu(cmd: list[str]) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, check=False, stdout=subprocess.DEVNULL, env=dict(os.environ, PYTHONPATH=str(REPO)))
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def in_process(path: Path, repeat: int) -> dict[str, float]:
    from gpuprof.analysis import analyze_trace
    from gpuprof.trace.load import load_trace
    from gpuprof.trace.metrics import compute_metrics
    from gpuprof.views.timeline import build_timeline

    trace = load_trace(path)
    full, tl = [], []
    gc.disable()
    try:
        for _ in range(repeat):
            t0 = time.process_time()
            metrics = compute_metrics(trace)
            _, findings = analyze_trace(trace, metrics=metrics)
            t1 = time.process_time()
            build_timeline(metrics, findings)
            t2 = time.process_time()
            full.append(t1 - t0)
            tl.append(t2 - t1)
    finally:
        gc.enable()
    return {"analysis_cpu_s": min(full), "timeline_cpu_s": min(tl), "share": min(tl) / min(full)}


def draw_times(page: Path, repeat: int) -> dict[str, float] | None:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    out: dict[str, list[float]] = {"page_ms": [], "timeline_ms": [], "zoom_ms": []}
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium, args=["--headless", "--no-sandbox", "--disable-gpu"])
        try:
            for _ in range(repeat):
                pg = b.new_context(offline=True, viewport={"width": 1280, "height": 900}).new_page()
                t0 = time.perf_counter()
                pg.goto(page.as_uri())
                pg.wait_for_function("document.body.dataset.rendered === '1'", timeout=120_000)
                out["page_ms"].append(1000 * (time.perf_counter() - t0))
                out["timeline_ms"].append(pg.evaluate("""() => { const t = performance.now();
                    GP.timeline(document.getElementById('timeline'), D.traces[0].timeline, D.findings);
                    return performance.now() - t; }"""))
                out["zoom_ms"].append(pg.evaluate("""() => { const b = document.querySelector('#timeline button');
                    const t = performance.now(); b.click(); return performance.now() - t; }"""))
                pg.context.close()
        finally:
            b.close()
    return {k: min(v) for k, v in out.items()}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("traces", nargs="*", type=Path)
    ap.add_argument("--sizes", default="", help="shared-derived V100 inputs to add, MB (e.g. 200,1000)")
    ap.add_argument("--workdir", type=Path, default=REPO / "bench" / "out")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    traces = list(args.traces) or ([] if args.sizes else default_traces())
    for s in filter(None, args.sizes.split(",")):
        got = big_input(int(s), args.workdir)
        if got is not None:
            traces.append(got)
    if not traces:
        print("no traces (the shared traces folder is absent; set GPUPROF_SHARED_TRACES): nothing measured")
        return 0
    rows: list[dict[str, Any]] = []
    for path in traces:
        page = args.workdir / (path.name.split(".")[0] + ".timeline.html")
        cpu = child_cpu([sys.executable, "-m", "gpuprof", "analyze", str(path), "--html", str(page), "--fail-on", "never"])
        text = page.read_text(encoding="utf-8")
        data = json.loads(text.split('<script id="data" type="application/json">', 1)[1].split("</script>", 1)[0])
        tl = data["traces"][0]["timeline"] or {}
        row = {"trace": str(path), "file_bytes": path.stat().st_size, "analyze_html_cpu_s": round(cpu, 2),
               "page_bytes": len(text.encode()), "timeline_bytes": len(json.dumps(tl, separators=(",", ":")).encode()),
               "events_total": tl.get("events_total"), "events_kept": tl.get("events_kept"),
               "lanes": len(tl.get("lanes", [])), "steps": len(tl.get("steps", [])), "resolution_us": tl.get("resolution_us"),
               "step_resolution_us": tl.get("step_resolution_us")}
        row.update({k: round(v, 4) for k, v in in_process(path, args.repeat).items()})
        drawn = draw_times(page, args.repeat)
        if drawn:
            row.update({k: round(v, 1) for k, v in drawn.items()})
        rows.append(row)
        print(json.dumps(row))
    (args.workdir / "timeline.json").write_text(json.dumps(rows, indent=1), encoding="utf-8")
    print(f"\n{'trace':44} {'file MB':>8} {'page KB':>8} {'timeline KB':>11} {'events':>9} {'rows':>6} "
          f"{'tl/analysis':>11} {'page ms':>8} {'draw ms':>8} {'zoom ms':>8}")
    for r in rows:
        print(f"{Path(r['trace']).name[:44]:44} {r['file_bytes'] / 1e6:8.1f} {r['page_bytes'] / 1e3:8.0f} "
              f"{r['timeline_bytes'] / 1e3:11.0f} {r['events_total'] or 0:9} {r['events_kept'] or 0:6} "
              f"{r['share']:11.1%} {r.get('page_ms', float('nan')):8.0f} {r.get('timeline_ms', float('nan')):8.1f} "
              f"{r.get('zoom_ms', float('nan')):8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

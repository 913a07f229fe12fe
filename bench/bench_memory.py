"""Benchmark: ``gpuprof memory`` on a snapshot with a million history entries.

Builds a synthetic PyTorch-format snapshot (``segments`` + ``device_traces``)
of ``--entries`` trace entries (training-loop pattern: 200 allocation sites
with shared frame lists as PyTorch writes them, a slow leak), writes it as
gpuprof writes snapshots (pickle protocol 4), then times, in one run (CPU seconds of this process,
``*_cpu_s``, the figures to compare on a shared machine, and wall seconds, ``*_s``):

* safe load (restricted unpickler) + parse,
* the analysis (``gpuprof memory``'s section and findings),
* the HTML page data (aggregation in Python) and the page size,
* plain ``pickle.load`` of the same file, as the in-run baseline for ratios,
* optionally the page's first render in headless Chromium (``--browser``).

It prints one JSON line; the figures quoted in docs/memory.md come from it.
Usage: ``python bench/bench_memory.py [--entries 1000000] [--browser]``.

``--trace FILE`` measures a profiler trace instead: the peak memory
(``ru_maxrss`` of a fresh child), CPU and wall time of ``gpuprof memory FILE`` and
of ``gpuprof analyze FILE`` on the same file, ``--runs`` times each,
interleaved, and their ratio (target: memory within 1.2x analyze). ``--root``
measures another checkout (its ``gpuprof/`` first on the path), for a
before/after comparison.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time

from gpuprof.memory.analysis import analyze_memory
from gpuprof.memory.html import build_page_data, render_html
from gpuprof.memory.snapshot import dump_snapshot, load_snapshot

MiB = 1 << 20


def synthetic_snapshot(entries: int) -> dict:
    stacks = [[{"filename": "/usr/lib/python3/dist-packages/torch/nn/modules/module.py", "line": 1736,
                "name": "_call_impl"},
               {"filename": f"/home/u/proj/model_{k % 20}.py", "line": 10 + k, "name": "forward"},
               {"filename": "/home/u/proj/train.py", "line": 50, "name": "main"}] for k in range(200)]
    leak = [{"filename": "/home/u/proj/train.py", "line": 61, "name": "main"}]
    trace = []
    t = 1_700_000_000_000_000
    base = 0x7F0000000000
    seg_size = 2 << 30
    trace.append({"action": "segment_alloc", "addr": base, "size": seg_size, "stream": 0, "time_us": t,
                  "frames": stacks[0]})
    live_leak = []
    nxt = base
    step = 0
    while len(trace) < entries:
        step += 1
        addrs = []
        for k in range(100):  # forward: 100 activations
            t += 3
            size = (1 + (k * 7919) % 16) * MiB // 4
            trace.append({"action": "alloc", "addr": nxt, "size": size, "stream": 0, "time_us": t,
                          "frames": stacks[(k + step) % 200]})
            addrs.append((nxt, size, stacks[(k + step) % 200]))
            nxt += size
        for a, size, fr in reversed(addrs):  # backward frees them
            t += 2
            trace.append({"action": "free_requested", "addr": a, "size": size, "stream": 0, "time_us": t,
                          "frames": fr})
            trace.append({"action": "free_completed", "addr": a, "size": size, "stream": 0, "time_us": t,
                          "frames": fr})
        t += 1
        trace.append({"action": "alloc", "addr": nxt, "size": 4096, "stream": 0, "time_us": t, "frames": leak})
        live_leak.append(nxt)
        nxt = base + 4096 * len(live_leak)  # activations reuse the same range each step
    del trace[entries:]
    blocks = [{"address": a, "size": 4096, "requested_size": 4096, "state": "active_allocated", "frames": leak}
              for a in live_leak]
    used = 4096 * len(live_leak)
    blocks.append({"address": base + used, "size": seg_size - used, "requested_size": 0, "state": "inactive",
                   "frames": []})
    return {"segments": [{"device": 0, "address": base, "total_size": seg_size, "stream": 0,
                          "segment_type": "large", "allocated_size": used, "active_size": used,
                          "requested_size": used, "is_expandable": False, "frames": stacks[0], "blocks": blocks}],
            "device_traces": [trace]}


def _child_peak(cmd: list[str], root: str) -> tuple[float, int, int, float]:
    """(wall s, peak RSS bytes, exit status, CPU s) of ``cmd`` in a fresh child (nothing else of ours runs)."""
    import subprocess

    env = dict(os.environ, PYTHONPATH=root)
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=tempfile.gettempdir(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, ru = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return time.perf_counter() - t0, ru.ru_maxrss * 1024, proc.returncode, ru.ru_utime + ru.ru_stime


def trace_main(trace: str, runs: int, root: str) -> None:
    import statistics
    import sys

    cmds = {c: [sys.executable, "-m", "gpuprof", c, trace, "--format", "json", "-o", os.devnull] for c in ("analyze", "memory")}
    got: dict[str, list[tuple[float, int, int, float]]] = {c: [] for c in cmds}
    for _ in range(runs):
        for c, cmd in cmds.items():  # interleaved: a change in the machine's load hits both
            got[c].append(_child_peak(cmd, root))
    out: dict = {"trace": trace, "root": root}
    for c, rows in got.items():
        out[c] = {"peak_mb": [round(r[1] / MiB, 1) for r in rows], "cpu_s": [round(r[3], 2) for r in rows],
                  "wall_s": [round(r[0], 2) for r in rows], "exit": sorted({r[2] for r in rows})}
    out["memory_peak_over_analyze"] = round(
        statistics.median(m[1] / a[1] for m, a in zip(got["memory"], got["analyze"])), 2)
    print(json.dumps(out))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--entries", type=int, default=1_000_000)
    ap.add_argument("--browser", action="store_true", help="also time the first render in headless Chromium")
    ap.add_argument("--trace", help="measure gpuprof memory vs gpuprof analyze on this profiler trace instead")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                    help="checkout whose gpuprof is measured (--trace)")
    args = ap.parse_args()
    if args.trace:
        trace_main(os.path.abspath(args.trace), args.runs, os.path.abspath(args.root))
        return
    out: dict = {"entries": args.entries}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "big.pickle")
        t0 = time.perf_counter()
        dump_snapshot(synthetic_snapshot(args.entries), path)
        out["build_and_write_s"] = round(time.perf_counter() - t0, 2)
        # each stage in CPU seconds of this process (``*_cpu_s``; what a busy machine leaves alone) and wall
        # seconds (``*_s``); the ratio to a plain pickle.load is taken from the CPU seconds
        out["file_mb"] = round(os.path.getsize(path) / 1e6, 1)

        # Baseline in the same run: plain (unsafe) pickle.load of the same file.
        import pickle

        c0, t0 = time.process_time(), time.perf_counter()
        with open(path, "rb") as fh:
            pickle.load(fh)
        plain = time.process_time() - c0
        out["plain_pickle_load_cpu_s"], out["plain_pickle_load_s"] = round(plain, 2), round(time.perf_counter() - t0, 2)
        c0, t0 = time.process_time(), time.perf_counter()
        data = load_snapshot(path)
        out["load_cpu_s"], out["load_s"] = round(time.process_time() - c0, 2), round(time.perf_counter() - t0, 2)
        c0, t0 = time.process_time(), time.perf_counter()
        section, findings, analyses = analyze_memory(data)
        out["analyze_cpu_s"], out["analyze_s"] = round(time.process_time() - c0, 2), round(time.perf_counter() - t0, 2)
        c0, t0 = time.process_time(), time.perf_counter()
        page = build_page_data(data, analyses, findings)
        html = render_html(page)
        out["html_cpu_s"], out["html_s"] = round(time.process_time() - c0, 2), round(time.perf_counter() - t0, 2)
        out["total_cpu_s"] = round(out["load_cpu_s"] + out["analyze_cpu_s"] + out["html_cpu_s"], 2)
        out["total_s"] = round(out["load_s"] + out["analyze_s"] + out["html_s"], 2)
        # Ratios, comparable across machines: the whole analysis against just unpickling the file (CPU).
        out["total_vs_plain_pickle"] = round(out["total_cpu_s"] / plain, 2) if plain else None
        out["html_kb"] = round(len(html.encode()) / 1e3, 1)
        out["html_points"] = len(page["devices"][0]["t"])
        out["peak_allocated"] = section.devices[0]["allocated"]["peak"]
        if args.browser:
            out["browser_first_render_s"] = _browser(html, tmp)
    print(json.dumps(out))


def _browser(html: str, tmp: str) -> float | None:
    exe = shutil.which("chromium")
    if exe is None:
        return None
    from playwright.sync_api import sync_playwright

    p = os.path.join(tmp, "page.html")
    with open(p, "w") as fh:
        fh.write(html)
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=exe, args=["--no-sandbox"])
        pg = b.new_page()
        t0 = time.perf_counter()
        pg.goto("file://" + p)
        pg.wait_for_function("+document.body.dataset.rendered >= 1")
        first = time.perf_counter() - t0
        # a redraw after a zoom: what "responsive" means to the user
        t0 = time.perf_counter()
        pg.evaluate("() => { const c = document.getElementById('c'); c.dispatchEvent(new MouseEvent('dblclick')); }")
        redraw = time.perf_counter() - t0
        b.close()
    return round(first, 3) if redraw < 1 else round(first + redraw, 3)


if __name__ == "__main__":
    main()

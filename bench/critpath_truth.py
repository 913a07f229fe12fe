"""An independent look at GPU-bound steps, from a trace's raw JSON events (no gpuprof code).

Per trace: the ``ProfilerStep#N`` ranges; the main device (the one with the most GPU time); the time its GPU work
(kernels, copies, memsets) covered inside the steps (the union over its streams), as a share of the steps; the
kernels' and copies' own shares; and how far the host ran ahead of the GPU: for each GPU event whose launch call
(matched by correlation id) started before the previous work of its stream ended, the time from that call to the
event's start (the launch queue), median and mean. ``tests/trace/test_critpath_truth.py`` holds the step graph's
critical path to these figures on the shared traces (docs/critical-path.md).

    python3 bench/critpath_truth.py ../shared/traces/hta/TraceLens/tests/traces/torch_compile_triton/trace.json.gz
"""

from __future__ import annotations

import gzip
import json
import re
import sys
from collections import defaultdict
from typing import Any

GPU_CATS = {"kernel": "kernel", "gpu_memcpy": "copy", "gpu_memset": "copy"}
STEP = re.compile(r"^ProfilerStep#\d+$")


def _events(path: str) -> list[dict[str, Any]]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:  # type: ignore[operator]
        doc = json.load(fh)
    events = doc.get("traceEvents", []) if isinstance(doc, dict) else doc
    return [e for e in events if isinstance(e, dict) and e.get("ph") == "X" and "dur" in e and "ts" in e]


def _union(spans: list[tuple[float, float]]) -> float:
    total, hi = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b <= hi:
            continue
        total += b - max(a, hi)
        hi = b
    return total


def truth(path: str) -> dict[str, Any] | None:
    """The figures above for one trace file (None: no step or no GPU work in the steps)."""
    events = _events(path)
    steps = sorted((float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in events
                   if STEP.match(str(e.get("name", ""))) and str(e.get("cat", "")).lower() != "gpu_user_annotation")
    gpu = [e for e in events if str(e.get("cat", "")).lower() in GPU_CATS]
    if not steps or not gpu:
        return None
    per_dev: dict[Any, float] = defaultdict(float)
    for e in gpu:
        per_dev[(e.get("args") or {}).get("device", e.get("pid"))] += float(e["dur"])
    dev = max(per_dev, key=lambda d: per_dev[d])
    gpu = [e for e in gpu if (e.get("args") or {}).get("device", e.get("pid")) == dev]
    launch: dict[Any, float] = {}
    for e in events:
        cat = str(e.get("cat", "")).lower()
        corr = (e.get("args") or {}).get("correlation")
        if corr is not None and cat in ("cuda_runtime", "cuda_driver", "runtime", "hip_runtime"):
            launch.setdefault(corr, float(e["ts"]))
    lo, hi = steps[0][0], steps[-1][1]
    span = sum(b - a for a, b in steps)

    def clipped(kinds: set[str]) -> list[tuple[float, float]]:
        out = []
        for e in gpu:
            if GPU_CATS[str(e["cat"]).lower()] not in kinds:
                continue
            a, b = float(e["ts"]), float(e["ts"]) + float(e["dur"])
            for s, t in steps:
                if a < t and b > s:
                    out.append((max(a, s), min(b, t)))
        return out

    ahead: list[float] = []
    by_stream: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for e in gpu:
        by_stream[(e.get("args") or {}).get("stream", e.get("tid"))].append(e)
    for evs in by_stream.values():
        evs.sort(key=lambda e: float(e["ts"]))
        prev_end = float("-inf")
        for e in evs:
            a = float(e["ts"])
            at = launch.get((e.get("args") or {}).get("correlation"))
            if lo <= a <= hi and at is not None and at < prev_end:
                ahead.append(a - at)
            prev_end = max(prev_end, a + float(e["dur"]))
    ahead.sort()
    return {
        "steps": len(steps),
        "step_mean_us": span / len(steps),
        "busy_share": _union(clipped({"kernel", "copy"})) / span,
        "kernel_share": _union(clipped({"kernel"})) / span,
        "copy_share": _union(clipped({"copy"})) / span,
        "queued_events": len(ahead),
        "ahead_median_us": ahead[len(ahead) // 2] if ahead else 0.0,
        "ahead_mean_us": sum(ahead) / len(ahead) if ahead else 0.0,
    }


def main(argv: list[str]) -> int:
    for path in argv:
        got = truth(path)
        print(path, json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in got.items()})
              if got else "no step or no GPU work")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

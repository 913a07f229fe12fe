"""The figures this change moved, re-checked on the seven real snapshots against the test's own count over the
raw pickle (a restricted unpickler and plain loops, none of gpuprof's code): memory from before the history at
the peak (no phantom bytes from the history recording requests and the blocks their rounded size), the peak
allocated, the library workspaces, and that no request of theirs is called fragmentation."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gpuprof.cli import cli
from gpuprof_testing.realtraces import shared_snapshot

ALL = ["cs336_magma_memory_snapshot.pickle", "ftcourse_memory_snapshot.pickle", "cs336_silmont_fwd_bf16_128.pickle",
       "eor_nn_snapshot.pickle", "cs336kk_2p7b_compiled_fwd.pickle", "cs336kk_ctx128_fwd_fp32.pickle",
       "cs336kk_ctx128_fwd_mixed.pickle"]
PRE = "<allocated before the recorded history>"
WS = ("at::cuda::getNewWorkspace", "getCUDABlasLtWorkspace", "getCurrentCUDABlasLtHandle",
      "at::cuda::getCurrentCUDABlasHandle")


class _Plain(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"{module}.{name}")


def independent(path: Path) -> dict[str, int]:
    with open(path, "rb") as f:
        raw = _Plain(f).load()
    ev = [e for e in raw["device_traces"][0] if e["action"] in ("alloc", "free_requested")]
    live_end = {b["address"]: b for s in raw["segments"] for b in s["blocks"] if b["state"] == "active_allocated"}
    # which recorded allocation made each block live at the end (its last alloc, never freed after)
    last: dict[int, int] = {}
    for i, e in enumerate(ev):
        if e["action"] == "alloc":
            last[e["addr"]] = i
        else:
            last.pop(e["addr"], None)
    made = {i: live_end[a]["size"] for a, i in last.items() if a in live_end}
    # live at the end, never allocated in it, and no stack of its own (a block keeps its stack: then its site)
    older = [b["size"] for a, b in live_end.items() if a not in last and not b.get("frames")]
    # replay: a block is its block's size when it is live at the end, else its recorded size
    cur, live, orphans = 0, {}, []
    for i, e in enumerate(ev):
        if e["action"] == "alloc":
            live[e["addr"]] = made.get(i, e["size"])
            cur += live[e["addr"]]
        elif e["addr"] in live:
            cur -= live.pop(e["addr"])
        else:
            orphans.append((i, e["size"]))  # freed, its allocation older than the history
            cur -= e["size"]
    # the level before the history: what the end holds minus what the history changed
    start = sum(b["size"] for b in live_end.values()) - cur
    level, peak, peak_at = start, start, -1
    live = {}
    for i, e in enumerate(ev):
        if e["action"] == "alloc":
            live[e["addr"]] = made.get(i, e["size"])
            level += live[e["addr"]]
        else:
            level -= live.pop(e["addr"], e["size"])
        if level > peak:
            peak, peak_at = level, i
    pre_at_peak = sum(older) + sum(sz for i, sz in orphans if i > peak_at)
    ws = sum(b["size"] for b in live_end.values()
             if any(str(f.get("name", "")).startswith(WS) for f in b.get("frames") or ()))
    return {"peak": peak, "pre_at_peak": pre_at_peak, "workspaces": ws, "initial": start}


@pytest.mark.slow  # seven real snapshots analysed whole
@pytest.mark.parametrize("name", ALL)
def test_moved_figures_equal_an_independent_count(name: str) -> None:
    path = shared_snapshot(name)
    want = independent(path)
    res = CliRunner().invoke(cli, ["memory", str(path), "--format", "json"])
    dev = json.loads(res.output)["sections"][0]["devices"][0]
    assert dev["allocated"]["peak"] == want["peak"]
    assert dev["allocated"]["initial"] == want["initial"]
    pre = sum(r["bytes"] for r in dev["top_sites"] if r["site"] == PRE)
    assert pre == want["pre_at_peak"]
    assert dev["categories"]["library_workspaces"] == want["workspaces"]
    assert not dev["ooms"]  # none of these ran out of memory: nothing to call fragmentation

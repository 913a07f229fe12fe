"""The history records requested sizes, the blocks their rounded size: no phantom "allocated before the recorded
history" bytes come from the difference (PyTorch's ``alloc`` entries carry the request, a block its size)."""

from __future__ import annotations

from gpuprof.memory.analysis import analyze_memory
from gpuprof.memory.frames import SiteTable
from gpuprof.memory.snapshot import parse_snapshot
from gpuprof_testing.snapshots import MiB, SnapshotBuilder


def test_rounding_of_live_blocks_is_not_memory_from_before_the_history() -> None:
    b = SnapshotBuilder(requested_sizes=True)  # history from the start: nothing was allocated before it
    s = b.stack(("/home/u/proj/model.py", 9, "forward"))
    for _ in range(1000):
        b.alloc(1000, s)  # a 1000-byte request is a 1024-byte block
    big = b.alloc(3 * MiB + 100, s)
    b.free(big)
    snap = b.snapshot()
    blocks = [blk for seg in snap["segments"] for blk in seg["blocks"] if blk["state"] == "active_allocated"]
    assert sum(blk["size"] for blk in blocks) == 1000 * 1024  # independent: the blocks the allocator holds
    section, findings, analyses = analyze_memory(parse_snapshot(snap, "s.pickle"))
    dev = section.devices[0]
    pre = SiteTable().sites[SiteTable.PRE_TRACE].label
    assert all(r["site"] != pre for r in dev["top_sites"])  # was 24,000 bytes "before the recorded history"
    assert dev["allocated"]["initial"] == 0
    assert dev["allocated"]["final"] == 1000 * 1024
    # the peak: every small block (its block size) plus the 3 MiB one while it lived (its recorded request)
    assert dev["allocated"]["peak"] == 1000 * 1024 + 3 * MiB + 100
    assert dev["categories"]["unattributed"] == 0
    assert "GP515" not in {f.code for f in findings}

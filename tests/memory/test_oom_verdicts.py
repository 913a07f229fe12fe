"""Out-of-memory verdicts: fragmentation only when the pool the allocator searched held more free bytes than the
request in no piece big enough (both figures given); a request larger than what is free is said to be so, never
fragmentation, and the fixes are ranked by bytes. Planted snapshots (gpuprof_testing.snapshots), numbers exact."""

from __future__ import annotations

import pytest

from gpuprof.findings import Severity
from gpuprof.memory.analysis import analyze_memory
from gpuprof.memory.snapshot import parse_snapshot
from gpuprof_testing.snapshots import GiB, MiB, SnapshotBuilder

from .conftest import build_fragmented_oom, model_weights


def _request_larger_than_free() -> SnapshotBuilder:
    """1 GiB device: 12 x 64 MiB live tensors (own segments), 10 x 6 MiB activations in 20 MiB segments of which
    three are freed (split pieces); then a 200 MiB request. The device has 176 MiB free, the cache 38 MiB in
    pieces: 214 MiB in all, more than the request, yet the cache alone holds far less than it (the shape of the
    real 4-rank FSDP OOM: 3.91 GiB asked, 806.57 MiB free in the cache)."""
    b = SnapshotBuilder(device_memory=1 * GiB, requested_sizes=True)
    big = b.stack(("/home/u/proj/fsdp.py", 80, "all_gather"), ("/home/u/proj/train.py", 40, "main"))
    act = b.stack(("/home/u/proj/model.py", 30, "forward"), ("/home/u/proj/train.py", 50, "main"))
    for _ in range(12):
        b.alloc(64 * MiB, big)
    xs = [b.alloc(6 * MiB, act) for _ in range(10)]
    for x in (xs[0], xs[4], xs[8]):
        b.free(x)
    with pytest.raises(MemoryError):
        b.alloc(200 * MiB, big)
    return b


def test_request_larger_than_free_is_not_fragmentation() -> None:
    b = _request_larger_than_free()
    section, findings, _ = analyze_memory(parse_snapshot(b.snapshot(), "rank0.pickle"))
    codes = {f.code for f in findings}
    assert "GP511" not in codes  # the former code called it fragmentation (request <= cache + device free)
    oom = next(f for f in findings if f.code == "GP512")
    ev = oom.evidence[0].extra
    # independent figures from the model allocator's own state
    free_pieces = [blk.size for seg in b._segs[0] for blk in seg.blocks if blk.state == "inactive"]
    assert ev["free_in_pool"] == sum(free_pieces) == 38 * MiB
    assert ev["largest_free_block"] == max(free_pieces) == 14 * MiB
    assert ev["device_free"] == 1 * GiB - 12 * 64 * MiB - 4 * 20 * MiB == 176 * MiB
    assert ev["fragmentation"] is False and "expandable_segments" not in ev["advice"][:1]
    assert "exceeds_free" in ev["advice"]
    assert "would fit" not in oom.advice
    assert "exceeds what was free: 38.00 MiB in the allocator's large pool (largest free block 14.00 MiB) and " \
           "176.00 MiB on the device" in oom.advice
    assert "it needed 24.00 MiB more free on the device" in oom.advice
    assert "Ranked by the bytes each saves here" in oom.advice
    fixes = section.devices[0]["fixes"]
    assert fixes and [f["saves_bytes"] for f in fixes] == sorted((f["saves_bytes"] for f in fixes), reverse=True)


def test_planted_fragmentation_gives_both_figures() -> None:
    b = build_fragmented_oom()
    _, findings, _ = analyze_memory(parse_snapshot(b.snapshot(), "oom.pickle"))
    frag = next(f for f in findings if f.code == "GP511")
    assert frag.severity is Severity.WARNING
    ev = frag.evidence[0].extra
    free_pieces = [blk.size for seg in b._segs[0] for blk in seg.blocks
                   if blk.state == "inactive" and not seg.small]
    assert ev["free_in_pool"] == sum(free_pieces) == 440 * MiB
    assert ev["largest_free_block"] == max(free_pieces) == 8 * MiB
    assert ev["pool"] == "large"
    assert "440.00 MiB free in the large pool" in frag.message and "the largest 8.00 MiB" in frag.message


def test_free_space_on_another_stream_is_not_searched() -> None:
    """Each stream has its own blocks: 440 MiB free in pieces on stream 7 is no fragmentation for a request on
    the default stream; the request is said to exceed what is free there."""
    b = SnapshotBuilder(device_memory=1 * GiB)
    model_weights(b)  # 160 MiB on the default stream
    act = b.stack(("/home/u/proj/model.py", 30, "forward"))
    xs = [b.alloc(6 * MiB, act, stream=7) for _ in range(120)]
    for x in xs[::2]:
        b.free(x)
    with pytest.raises(MemoryError):
        b.alloc(100 * MiB, act)
    _, findings, _ = analyze_memory(parse_snapshot(b.snapshot(), "s.pickle"))
    assert "GP511" not in {f.code for f in findings}
    ev = next(f for f in findings if f.code == "GP512").evidence[0].extra
    assert ev["free_in_pool"] == 0 and ev["fragmentation"] is False

"""gpuprof memory on planted snapshots: the numbers the findings report are the planted ones."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuprof.findings import Severity
from gpuprof.memory.analysis import MemoryOptions, analyze_memory, memory_report
from gpuprof.memory.frames import SiteTable
from gpuprof.memory.snapshot import load_snapshot, parse_snapshot
from gpuprof_testing.snapshots import GiB, MiB, SnapshotBuilder

from .conftest import build_fragmented_oom, model_weights, train_steps


def _codes(report) -> dict[str, list]:  # type: ignore[no-untyped-def]
    out: dict[str, list] = {}
    for f in report.findings:
        out.setdefault(f.code, []).append(f)
    return out


def test_clean_snapshot_has_no_warning(clean_snapshot: Path) -> None:
    report = memory_report(str(clean_snapshot))
    assert report.count_at_or_above(Severity.WARNING) == 0, [f.message for f in report.findings]
    dev = report.sections[0].devices[0]
    # 4 x 40 MiB weights + 8 x 6 MiB activations + 3 MiB gradient at the peak
    assert dev["allocated"]["peak"] == 160 * MiB + 48 * MiB + 3 * MiB
    assert dev["allocated"]["final"] == 160 * MiB
    assert dev["num_allocations"] == 4 + 5 * 9


def test_peak_holders_by_first_user_frame_sum_to_the_peak(clean_snapshot: Path) -> None:
    dev = memory_report(str(clean_snapshot)).sections[0].devices[0]
    sites = {s["site"]: s for s in dev["top_sites"]}
    # torch's own frames (module.py _call_impl) are skipped: the site is the user's line
    assert set(sites) == {"/home/u/proj/model.py:12 (__init__)", "/home/u/proj/model.py:30 (forward)",
                          "/home/u/proj/train.py:55 (main)"}
    assert sites["/home/u/proj/model.py:30 (forward)"]["bytes"] == 48 * MiB
    assert sites["/home/u/proj/model.py:30 (forward)"]["blocks"] == 8
    assert sites["/home/u/proj/model.py:12 (__init__)"]["line"] == 12
    assert sum(s["bytes"] for s in dev["top_sites"]) == dev["allocated"]["peak"]
    classes = {c["class"]: c for c in dev["size_classes"]}
    assert classes["10-100 MiB"]["blocks"] == 4 and classes["1-10 MiB"]["blocks"] == 9


def test_cpp_frames_are_skipped_too() -> None:
    b = SnapshotBuilder(cpp_frames=True)
    b.alloc(MiB, b.stack(("/home/u/x.py", 7, "f")))
    d = parse_snapshot(b.snapshot(), "s")
    _, _, analyses = analyze_memory(d)
    assert analyses[0].top_sites[0]["site"] == "/home/u/x.py:7 (f)"
    assert analyses[0].top_sites[0]["stack"][0].startswith("??")  # full stack kept for display


def test_planted_fragmentation_oom_numbers() -> None:
    b = build_fragmented_oom()
    d = parse_snapshot(b.snapshot(), "oom.pickle")
    section, findings, _ = analyze_memory(d)
    by = {f.code: f for f in findings}
    oom, frag = by["GP512"], by["GP511"]
    assert oom.severity is Severity.ERROR and frag.severity is Severity.WARNING
    ev = frag.evidence[0].extra
    assert ev["requested"] == 100 * MiB
    assert ev["device_free"] == 1 * GiB - 960 * MiB  # 48 segments of 20 MiB + 4 of 40 MiB reserved
    assert ev["unallocated_reserved"] == 440 * MiB  # 60 freed 6 MiB blocks + 40 x 2 MiB segment tails
    assert ev["largest_free_block"] == 8 * MiB  # a freed 6 MiB block merged with a 2 MiB tail
    assert ev["inactive_split_blocks"] == 80
    oev = oom.evidence[0].extra
    assert oev["allocated"] == 160 * MiB + 60 * 6 * MiB
    assert oev["reserved"] == 960 * MiB
    assert oev["advice"][0] == "expandable_segments"
    assert "expandable_segments:True" in oom.advice
    assert oom.location is not None and (oom.location.file, oom.location.line) == ("/home/u/proj/model.py", 44)
    dev = section.devices[0]
    assert dev["ooms"][0]["top_live_sites"][0]["site"] == "/home/u/proj/model.py:30 (forward)"


def test_oom_when_live_tensors_fill_the_device_advises_batch_checkpointing_amp() -> None:
    b = SnapshotBuilder(device_memory=1 * GiB)
    act = b.stack(("/home/u/m.py", 3, "forward"))
    for _ in range(9):
        b.alloc(100 * MiB, act)
    with pytest.raises(MemoryError):
        b.alloc(200 * MiB, act)
    _, findings, _ = analyze_memory(parse_snapshot(b.snapshot(), "s"))
    oom = next(f for f in findings if f.code == "GP512")
    kinds = oom.evidence[0].extra["advice"]
    assert "expandable_segments" not in kinds
    assert {"smaller_batch", "activation_checkpointing", "amp"} <= set(kinds)
    assert not any(f.code == "GP511" and f.severity is Severity.WARNING for f in findings)


def test_oom_with_references_kept_across_iterations_advises_freeing_them() -> None:
    b = SnapshotBuilder(device_memory=1 * GiB)
    train_steps(b, 1, leak_every_step=False)
    keep = b.stack(("/home/u/proj/train.py", 61, "main"))
    for _ in range(40):  # losses.append(loss): one 20 MiB block kept per step
        train_steps(b, 1, leak_every_step=False)
        b.alloc(20 * MiB, keep)
    with pytest.raises(MemoryError):
        for _ in range(100):
            train_steps(b, 1, leak_every_step=False)
            b.alloc(20 * MiB, keep)
    _, findings, _ = analyze_memory(parse_snapshot(b.snapshot(), "s"))
    oom = next(f for f in findings if f.code == "GP512")
    assert "free_references" in oom.evidence[0].extra["advice"]
    assert "/home/u/proj/train.py:61" in oom.advice


def test_near_capacity_warning_uses_device_memory() -> None:
    b = SnapshotBuilder(device_memory=1 * GiB)
    b.alloc(950 * MiB, b.stack(("/home/u/m.py", 1, "f")))
    _, findings, _ = analyze_memory(parse_snapshot(b.snapshot(), "s"))
    f = next(f for f in findings if f.code == "GP510")
    assert f.evidence[0].extra["peak_reserved"] == 950 * MiB
    # without a known capacity there is nothing to compare with
    _, findings, _ = analyze_memory(parse_snapshot(b.snapshot(device_info=False), "s"))
    assert not any(f.code == "GP510" for f in findings)


def test_record_stream_blocks_are_reported() -> None:
    b = SnapshotBuilder(device_memory=16 * GiB)
    model_weights(b)
    side = b.stack(("/home/u/proj/prefetch.py", 9, "load"))
    buf = [b.alloc(64 * MiB, side, stream=0) for _ in range(4)]
    for x in buf:
        b.free(x, pending=True)  # used on a copy stream: freed, but not reusable yet
    act = b.stack(("/home/u/proj/model.py", 30, "forward"))
    y = b.alloc(32 * MiB, act)
    for x in buf[:2]:
        b.complete_free(x)
    b.free(y)
    section, findings, _ = analyze_memory(parse_snapshot(b.snapshot(), "s"), MemoryOptions())
    f = next(f for f in findings if f.code == "GP513")
    assert f.evidence[0].extra["max_bytes_waiting"] == 4 * 64 * MiB
    assert f.evidence[0].extra["deferred_frees"] == 2
    assert f.severity is Severity.WARNING  # 256 MiB waiting vs a 416 MiB peak
    assert section.devices[0]["fragmentation"]["pending_free"] == 2 * 64 * MiB  # still waiting at snapshot time


def test_truncated_history_attributes_old_blocks_to_pre_history() -> None:
    b = SnapshotBuilder(device_memory=16 * GiB, max_entries=60)
    model_weights(b)  # these entries fall out of the ring buffer
    train_steps(b, 6, leak_every_step=False)
    d = parse_snapshot(b.snapshot(), "s")
    section, findings, analyses = analyze_memory(d)
    dev = section.devices[0]
    assert dev["history_events"] == 60
    assert dev["allocated"]["initial"] >= 160 * MiB
    assert dev["allocated"]["peak"] == 160 * MiB + 48 * MiB + 3 * MiB
    # the weights are still live at snapshot time, so their frames come from the segments' blocks
    sites = {s["site"]: s["bytes"] for s in dev["top_sites"]}
    assert sites["/home/u/proj/model.py:12 (__init__)"] == 160 * MiB
    assert sum(sites.values()) == dev["allocated"]["peak"]


def test_pre_history_block_freed_in_history_is_counted_at_the_peak() -> None:
    b = SnapshotBuilder(device_memory=16 * GiB, max_entries=12)
    w = b.stack(("/home/u/a.py", 1, "f"))
    old = b.alloc(100 * MiB, w)
    for _ in range(4):
        b.free(b.alloc(MiB, w))
    x = b.alloc(50 * MiB, w)  # peak: 150 MiB, the old block's allocation is no longer recorded
    b.free(old)
    b.free(x)
    d = parse_snapshot(b.snapshot(), "s")
    _, findings, analyses = analyze_memory(d)
    da = analyses[0]
    assert da.totals.peak_allocated == 150 * MiB
    h = da.replay.holders[da.peak_moment]
    assert h.by_site[SiteTable.PRE_TRACE][0] == 100 * MiB
    assert any(f.code == "GP515" for f in findings)


def test_snapshot_without_history_and_old_block_history_format() -> None:
    frames = [{"filename": "/home/u/old.py", "line": 5, "name": "g"}]
    snap = [{  # torch.cuda.memory_snapshot(): a bare list of segments, PyTorch 2.0 block "history"
        "device": 0, "address": 1000, "total_size": 20 * MiB, "stream": 0, "segment_type": "large",
        "blocks": [{"size": 6 * MiB, "state": "active_allocated",
                    "history": [{"addr": 1000, "real_size": 6 * MiB - 7, "frames": frames}]},
                   {"size": 14 * MiB, "state": "inactive"}],
    }]
    d = parse_snapshot(snap, "old")
    assert any("no allocation history" in n for n in d.notes)
    section, findings, _ = analyze_memory(d)
    dev = section.devices[0]
    assert dev["allocated"]["peak"] == 6 * MiB and dev["reserved"]["peak"] == 20 * MiB
    assert dev["top_sites"][0]["site"] == "/home/u/old.py:5 (g)"
    assert dev["fragmentation"]["largest_free_block"] == 14 * MiB


def test_entries_without_time_use_event_order() -> None:
    b = SnapshotBuilder()
    model_weights(b)
    snap = b.snapshot()
    for e in snap["device_traces"][0]:
        del e["time_us"]
    d = parse_snapshot(snap, "s")
    assert not d.devices[0].has_time
    section, _, _ = analyze_memory(d)
    assert section.devices[0]["time_unit"] == "event"
    assert section.devices[0]["allocated"]["peak"] == 160 * MiB


def test_load_from_file_matches_in_memory(oom_snapshot: Path) -> None:
    d = load_snapshot(oom_snapshot)
    assert d.source_type == "snapshot" and len(d.devices) == 1
    assert len(d.devices[0].ooms) == 1 and d.devices[0].ooms[0].size == 100 * MiB


def test_fragmentation_without_oom_is_info_only() -> None:
    b = SnapshotBuilder(device_memory=16 * GiB)
    act = b.stack(("/home/u/proj/model.py", 30, "forward"))
    xs = [b.alloc(6 * MiB, act) for _ in range(300)]  # 100 segments of 20 MiB
    for x in xs[::3] + xs[1::3]:
        b.free(x)
    _, findings, analyses = analyze_memory(parse_snapshot(b.snapshot(), "s"))
    frag = [f for f in findings if f.code == "GP511"]
    assert len(frag) == 1 and frag[0].severity is Severity.INFO
    assert frag[0].evidence[0].extra["unallocated"] == 2000 * MiB - 100 * 6 * MiB
    assert frag[0].evidence[0].extra["largest_free_block"] == 12 * MiB


def test_no_torch_import() -> None:
    import subprocess
    import sys

    code = "import sys, gpuprof.memory, gpuprof.memory.html, gpuprof.cli.memory; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"

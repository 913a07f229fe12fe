"""Out-of-memory observer dumps: recognised (GP512, exit 1) with or without history; the file-name signal only
where no device recorded its OOM; a single history event draws the segments view, not an empty timeline."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from gpuprof.cli import cli
from gpuprof_testing.realtraces import shared_snapshot
from gpuprof_testing.snapshots import GiB, MiB, SnapshotBuilder


class _Plain(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"{module}.{name}")


def _raw(path: Path) -> dict[str, Any]:
    with open(path, "rb") as f:
        return _Plain(f).load()


def _run(path: Path) -> tuple[int, dict[str, Any]]:
    res = CliRunner().invoke(cli, ["memory", str(path), "--format", "json"])
    return res.exit_code, json.loads(res.output)


def test_a_real_oom_dump_without_history_is_recognised_and_exits_1(tmp_path: Path) -> None:
    raw = _raw(shared_snapshot("cs336_magma_memory_snapshot.pickle"))
    raw["device_traces"] = [[] for _ in raw["device_traces"]]
    named = tmp_path / "oom_rank0.pickle"
    named.write_bytes(pickle.dumps(raw))
    code, rep = _run(named)
    assert code == 1
    f = [x for x in rep["findings"] if x["code"] == "GP512"]
    assert len(f) == 1 and f[0]["severity"] == "error" and "not recorded" in f[0]["message"]
    reserved = sum(s["total_size"] for s in raw["segments"])
    allocated = sum(b["size"] for s in raw["segments"] for b in s["blocks"] if b["state"] == "active_allocated")
    assert f[0]["evidence"][0]["extra"]["reserved"] == reserved
    assert f[0]["evidence"][0]["extra"]["allocated"] == allocated
    # the same file under a neutral name, without history: nothing says it was an OOM
    plain = tmp_path / "state.pickle"
    plain.write_bytes(pickle.dumps(raw))
    code, rep = _run(plain)
    assert code == 0 and not any(x["code"] == "GP512" for x in rep["findings"])


def test_gpuprofs_observer_records_the_request_even_without_history(tmp_path: Path) -> None:
    """The observer writes the failed request into the snapshot ("gpuprof": {"oom": ...}): GP512 with the size
    and the device's free bytes, and the categories at that moment, with no history recorded."""
    raw = _raw(shared_snapshot("eor_nn_snapshot.pickle"))
    raw["device_traces"] = [[]]
    raw["gpuprof"] = {"devices": [{"id": 0, "name": "Tesla T4", "total_memory": 16 * GiB}],
                      "oom": {"device": 0, "requested_bytes": 3 * GiB, "device_free_bytes": 2 * GiB}}
    p = tmp_path / "snapshot.pickle"
    p.write_bytes(pickle.dumps(raw))
    code, rep = _run(p)
    assert code == 1
    g = [x for x in rep["findings"] if x["code"] == "GP512"]
    assert len(g) == 1 and g[0]["evidence"][0]["value"] == 3 * GiB
    dev = rep["sections"][0]["devices"][0]
    o = dev["ooms"][0]
    reserved = sum(s["total_size"] for s in raw["segments"])
    assert o["reserved"] == reserved and o["device_free"] == 2 * GiB
    # memory not PyTorch's: the device total minus its free bytes minus what PyTorch reserved
    assert o["at_oom"]["categories"]["non_pytorch"] == 16 * GiB - 2 * GiB - reserved
    assert sum(v for k, v in o["at_oom"]["categories"].items() if k != "non_pytorch") == reserved


def test_the_oom_name_note_only_where_no_device_recorded_its_oom(tmp_path: Path) -> None:
    b = SnapshotBuilder(devices=2, device_memory=1 * GiB)
    st = b.stack(("/home/u/proj/train.py", 10, "main"))
    b.alloc(64 * MiB, st, device=0)
    b.alloc(600 * MiB, st, device=1)
    try:
        b.alloc(600 * MiB, st, device=1)
    except MemoryError:
        pass
    p = Path(b.dump(tmp_path / "oom_dump.pickle"))
    code, rep = _run(p)
    assert code == 1
    notes = rep["sections"][0]["notes"]
    assert not any("out-of-memory observer" in n for n in notes)
    assert [x["code"] for x in rep["findings"] if x["code"] == "GP512"] == ["GP512"]  # the recorded one only


def test_a_single_history_event_draws_the_segments_view(tmp_path: Path) -> None:
    from gpuprof.memory.analysis import analyze_memory
    from gpuprof.memory.html import build_page_data, render_html
    from gpuprof.memory.load import load_memory

    b = SnapshotBuilder()
    b.alloc(4 * MiB, b.stack(("/home/u/proj/train.py", 10, "main")))
    snap = b.snapshot()
    snap["device_traces"] = [[e for e in snap["device_traces"][0] if e["action"] == "alloc"]]
    assert len(snap["device_traces"][0]) == 1
    p = tmp_path / "one.pickle"
    p.write_bytes(pickle.dumps(snap))
    data = load_memory(str(p))
    _, findings, analyses = analyze_memory(data)
    page = build_page_data(data, analyses, findings)
    dev = page["devices"][0]
    assert dev["no_history"] is True and dev["events"] == 1
    assert sum(g["size"] for g in dev["segments"]) == sum(s["total_size"] for s in snap["segments"])
    assert "Only one allocation event was recorded" in render_html(page)


def test_fixes_at_an_oom_are_ranked_by_bytes_computed_from_the_snapshot(tmp_path: Path) -> None:
    """EoR_NN's state as an OOM dump: each fix's bytes against the test's own count over the raw blocks."""
    from .test_categories import expected_state

    raw = _raw(shared_snapshot("eor_nn_snapshot.pickle"))
    raw["device_traces"] = [[]]
    raw["gpuprof"] = {"oom": {"device": 0, "requested_bytes": 1 * GiB, "device_free_bytes": 0}}
    p = tmp_path / "snap.pickle"
    p.write_bytes(pickle.dumps(raw))
    code, rep = _run(p)
    assert code == 1
    fixes = {f["fix"]: f["saves_bytes"] for f in rep["sections"][0]["devices"][0]["fixes"]}
    cats = expected_state(raw)[0]["cats"]
    split_free = sum(b["size"] for s in raw["segments"] if len(s["blocks"]) > 1
                     for b in s["blocks"] if b["state"] == "inactive")
    assert fixes["optimizer_state_precision"] == cats["optimizer_state"] * 3 // 4
    assert fixes["smaller_micro_batch"] == (cats["activations"] + cats["temporaries"]) // 2
    assert fixes["expandable_segments"] == split_free
    saves = [f["saves_bytes"] for f in rep["sections"][0]["devices"][0]["fixes"]]
    assert saves == sorted(saves, reverse=True) and all(s > 0 for s in saves)
    gp512 = next(f for f in rep["findings"] if f["code"] == "GP512")
    assert "Ranked by the bytes each saves here" in gp512["advice"]


def test_no_fixes_without_an_oom_or_a_near_capacity_peak() -> None:
    code, rep = _run(shared_snapshot("eor_nn_snapshot.pickle"))
    assert rep["sections"][0]["devices"][0]["fixes"] == []


def test_pinned_host_memory_is_shown_when_the_dump_records_it(tmp_path: Path) -> None:
    raw = _raw(shared_snapshot("eor_nn_snapshot.pickle"))
    raw["gpuprof"] = {"host_pinned": {"allocated_bytes": 64 * MiB, "active_bytes": 16 * MiB}}
    p = tmp_path / "snap.pickle"
    p.write_bytes(pickle.dumps(raw))
    code, rep = _run(p)
    assert rep["sections"][0]["pinned_host"] == {"allocated_bytes": 64 * MiB, "active_bytes": 16 * MiB}
    res = CliRunner().invoke(cli, ["memory", str(p)], env={"COLUMNS": "160"})
    assert "pinned host memory held by PyTorch: 64.00 MiB (16.00 MiB in use)" in res.output
    assert "Memory by category" in res.output and "optimizer state" in res.output
    _, plain = _run(shared_snapshot("eor_nn_snapshot.pickle"))
    assert plain["sections"][0]["pinned_host"] is None

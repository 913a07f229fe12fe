"""Real CUDA memory snapshots (../shared/snapshots): sites named for what they are, capacity, device-aware advice."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gpuprof.cli import cli
from gpuprof.frames import is_user_file
from gpuprof.memory.devices import bf16_support, precision_advice
from gpuprof.memory.frames import SiteTable
from gpuprof_testing.realtraces import shared_snapshot

NAMES = ["cs336_magma_memory_snapshot.pickle", "ftcourse_memory_snapshot.pickle",
         "cs336_silmont_fwd_bf16_128.pickle", "eor_nn_snapshot.pickle"]


def _memory(path: Path, *args: str) -> dict[str, Any]:
    res = CliRunner().invoke(cli, ["memory", str(path), "--format", "json", *args])
    assert res.exit_code in (0, 1), res.output
    return json.loads(res.output)


class _Plain(pickle.Unpickler):
    """The test's own reader (not gpuprof's): plain containers only."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"{module}.{name}")


def _raw(path: Path) -> dict[str, Any]:
    with open(path, "rb") as f:
        return _Plain(f).load()


@pytest.mark.parametrize("name", NAMES)
def test_cpp_frames_are_never_named_as_the_users_line(name: str) -> None:
    rep = _memory(shared_snapshot(name))
    for dev in rep["sections"][0]["devices"]:
        for s in dev["top_sites"]:
            if s["origin"] == "user":
                assert is_user_file(s["file"]) and not s["file"].endswith((".o", ".so")) and s["file"] != "??"
            else:
                assert s["file"] is None or s["origin"] == "library"
    for f in rep["findings"]:
        if f["code"] == "GP514" and "This line is where" in f["advice"]:
            top = rep["sections"][0]["devices"][0]["top_sites"][0]
            assert top["origin"] == "user" and f["location"]["file"] == top["file"]


def test_backward_thread_allocations_are_named_for_what_they_are() -> None:
    """EoR_NN: the autograd engine's backward thread records C++ frames only; the test finds them in the raw
    pickle and checks the site gpuprof gives each such stack."""
    raw = _raw(shared_snapshot("eor_nn_snapshot.pickle"))
    sites = SiteTable()
    cpp_only = 0
    for trace in raw["device_traces"]:
        for e in trace:
            frames = e.get("frames") or []
            if e.get("action") != "alloc" or not frames:
                continue
            if any(str(f.get("filename", "")).endswith(".py") for f in frames):
                continue
            cpp_only += 1
            site = sites.sites[sites.site_of(frames)]
            assert site.origin == "native" and site.file == "" and "??" not in site.label
            if any("torch::autograd::Engine" in str(f.get("name")) for f in frames):
                assert site.label.startswith("<autograd engine, backward pass")
    assert cpp_only > 0
    rep = _memory(shared_snapshot("eor_nn_snapshot.pickle"))
    labels = [s["site"] for s in rep["sections"][0]["devices"][0]["top_sites"]]
    assert not any(label.startswith("??") for label in labels)
    assert any(label.startswith("<autograd engine, backward pass") for label in labels)


def test_a_native_thread_frame_is_not_user_code() -> None:
    sites = SiteTable()
    frames = [{"filename": "??", "line": 0, "name": "torch::unwind::unwind()"},
              {"filename": "thread48.o", "line": 0, "name": "execute_native_thread_routine"}]
    site = sites.sites[sites.site_of(frames)]
    assert site.origin == "native" and "thread48.o" not in site.label and site.label.startswith("<autograd engine")
    only_unwind = sites.sites[sites.site_of([{"filename": "??", "line": 0, "name": "torch::unwind::unwind()"}])]
    assert only_unwind.origin == "native" and only_unwind.label == "<C++ stack only: torch::unwind::unwind()>"
    assert not is_user_file("thread48.o") and not is_user_file("/usr/lib/libtorch_cuda.so.2")
    assert is_user_file("train.py")


def test_unknown_capacity_is_said_with_how_to_give_it() -> None:
    path = shared_snapshot("cs336_silmont_fwd_bf16_128.pickle")
    notes = _memory(path)["sections"][0]["notes"]
    assert any("capacity is unknown" in n and "--device-memory" in n for n in notes)
    given = _memory(path, "--device-memory", "850MiB")
    assert not any("capacity is unknown" in n for n in given["sections"][0]["notes"])
    gp510 = next(f for f in given["findings"] if f["code"] == "GP510")
    # a forward pass only, no no_grad/inference_mode frame either: the mode is unknown, so a GradScaler only "if you
    # train" (an out-of-memory in a training run's forward never reaches backward)
    assert "GradScaler if you train" in gp510["advice"]


def test_training_snapshot_gets_training_advice() -> None:
    rep = _memory(shared_snapshot("eor_nn_snapshot.pickle"), "--device-memory", "140MiB")
    gp510 = next(f for f in rep["findings"] if f["code"] == "GP510")
    assert "activation checkpointing" in gp510["advice"] and "inference" not in gp510["advice"]


def test_precision_advice_checks_the_device_and_the_mode() -> None:
    assert bf16_support("nvidia", (7, 5), "Tesla T4") is False
    assert bf16_support("", None, "Tesla T4") is False
    assert bf16_support("nvidia", (8, 0), "NVIDIA A100-SXM4-80GB") is True
    assert bf16_support("amd", None, "AMD Instinct MI300X") is True
    assert bf16_support("", None, "") is None
    t4 = precision_advice(False, "training")
    assert "bfloat16" not in t4.replace("no bfloat16", "") and "GradScaler" in t4
    assert "bfloat16" in precision_advice(True, "training") and "GradScaler" not in precision_advice(True, "training")
    for bf16 in (True, False, None):
        assert "GradScaler" not in precision_advice(bf16, "inference")
    assert "bfloat16" not in precision_advice(False, "inference")


def test_run_mode_from_the_stacks() -> None:
    from gpuprof.memory.devices import run_mode

    def table(*stacks: list[dict[str, Any]]) -> SiteTable:
        t = SiteTable()
        for frames in stacks:
            t.site_of(frames)
        return t

    fwd = [{"filename": "/home/u/m.py", "line": 3, "name": "forward"}]
    nograd = [{"filename": "/usr/lib/python3/site-packages/torch/utils/_contextlib.py", "line": 116,
               "name": "decorate_context"}, {"filename": "/home/u/serve.py", "line": 9, "name": "predict"}]
    bwd = [{"filename": "??", "line": 0, "name": "torch::autograd::generated::MulBackward0::apply(x)"}]
    assert run_mode(table(fwd)) == "unknown"
    assert run_mode(table(fwd, nograd)) == "inference"
    assert run_mode(table(fwd, nograd, bwd)) == "training"


def test_cached_memory_is_not_called_fragmentation() -> None:
    """MAGMA27's snapshot: 90% of the reserved memory is free, nearly all of it whole free segments (cached).
    The test counts the free pieces of split segments from the raw pickle itself."""
    path = shared_snapshot("cs336_magma_memory_snapshot.pickle")
    raw = _raw(path)
    split_free = whole_free = reserved = 0
    for seg in raw["segments"]:
        reserved += seg["total_size"]
        blocks = seg["blocks"]
        free = sum(b["size"] for b in blocks if b["state"] == "inactive")
        if len(blocks) == 1 and blocks[0]["state"] == "inactive":
            whole_free += free
        else:
            split_free += free
    assert whole_free > 0.8 * reserved and split_free < 0.1 * reserved
    rep = _memory(path)
    frag = rep["sections"][0]["devices"][0]["fragmentation"]
    assert frag["inactive_split_bytes"] == split_free and frag["reserved"] == reserved
    assert "GP511" not in {f["code"] for f in rep["findings"]}  # cached, not fragmented
    # the same snapshot with a low bar: GP511 names the split pieces, and the cached rest as cached
    low = _memory(path, "--option", "GP511.fragmentation_ratio=0.01")
    gp511 = next(f for f in low["findings"] if f["code"] == "GP511")
    assert gp511["evidence"][0]["value"] == pytest.approx(split_free / reserved, abs=1e-4)
    assert "simply cached in whole free segments" in gp511["message"]


def test_a_snapshot_without_history_gets_a_segment_view(tmp_path: Path) -> None:
    """MAGMA27's snapshot with its history removed (torch.cuda.memory._snapshot() without _record_memory_history):
    the page shows the allocator's segments and blocks, not an empty timeline."""
    from gpuprof.memory.analysis import analyze_memory
    from gpuprof.memory.html import build_page_data, render_html
    from gpuprof.memory.load import load_memory

    raw = _raw(shared_snapshot("cs336_magma_memory_snapshot.pickle"))
    raw["device_traces"] = [[] for _ in raw["device_traces"]]
    path = tmp_path / "nohistory.pickle"
    path.write_bytes(pickle.dumps(raw))
    data = load_memory(str(path))
    _, findings, analyses = analyze_memory(data)
    page = build_page_data(data, analyses, findings)
    dev = page["devices"][0]
    assert dev["no_history"] is True
    assert sum(g["size"] for g in dev["segments"]) == sum(s["total_size"] for s in raw["segments"])
    for g, seg in zip(dev["segments"], sorted(raw["segments"], key=lambda s: -s["total_size"])):
        assert g["size"] == seg["total_size"] and sum(b[0] for b in g["blocks"]) == seg["total_size"]
    assert any("no recorded history" in n or "no history" in n or "state at snapshot time" in n for n in page["notes"])
    assert "No allocation history was recorded" in render_html(page)
    with_history = build_page_data(*_load_and_analyse(shared_snapshot("cs336_magma_memory_snapshot.pickle")))
    assert with_history["devices"][0]["no_history"] is False and with_history["devices"][0]["segments"] == []


def _load_and_analyse(path: Path) -> tuple[Any, Any, Any]:
    from gpuprof.memory.analysis import analyze_memory
    from gpuprof.memory.load import load_memory

    data = load_memory(str(path))
    _, findings, analyses = analyze_memory(data)
    return data, analyses, findings


def test_an_oom_observer_dump_is_recognised(tmp_path: Path) -> None:
    """MAGMA27's snapshot as an OOM observer would have dumped it: the allocator released its whole free segments
    (segment_free, as it does before giving up) and no OOM event was recorded."""
    raw = _raw(shared_snapshot("cs336_magma_memory_snapshot.pickle"))
    trace = raw["device_traces"][0]
    t = max(e.get("time_us", 0) for e in trace)
    keep = []
    for seg in raw["segments"]:
        blocks = seg["blocks"]
        if len(blocks) == 1 and blocks[0]["state"] == "inactive":
            t += 1
            trace.append({"action": "segment_free", "addr": seg["address"], "size": seg["total_size"],
                          "stream": seg.get("stream", 0), "time_us": t, "frames": []})
        else:
            keep.append(seg)
    raw["segments"] = keep
    path = tmp_path / "after_release.pickle"
    path.write_bytes(pickle.dumps(raw))
    rep = _memory(path)
    assert any("out-of-memory observer" in n and "no OOM event" in n for n in rep["sections"][0]["notes"])
    # the same state under a neutral name without the release: not an observer dump
    plain = _memory(shared_snapshot("cs336_magma_memory_snapshot.pickle"))
    assert not any("out-of-memory observer" in n for n in plain["sections"][0]["notes"])
    named = tmp_path / "oom_snapshot.pickle"
    named.write_bytes(shared_snapshot("cs336_magma_memory_snapshot.pickle").read_bytes())
    assert any("out-of-memory observer" in n for n in _memory(named)["sections"][0]["notes"])

"""Memory by category, stage and module, checked against the test's own count over the raw snapshot pickles.

The counter below reads each real snapshot with a plain unpickler and applies the rules docs/memory.md states
("Memory by category") with its own loops over the frames; it never calls gpuprof's attribution.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gpuprof.cli import cli
from gpuprof.memory.attribution import CATEGORIES
from gpuprof_testing.realtraces import shared_snapshot
from gpuprof_testing.snapshots import MiB, SnapshotBuilder

ALL = ["cs336_magma_memory_snapshot.pickle", "ftcourse_memory_snapshot.pickle", "cs336_silmont_fwd_bf16_128.pickle",
       "eor_nn_snapshot.pickle", "cs336kk_2p7b_compiled_fwd.pickle", "cs336kk_ctx128_fwd_fp32.pickle",
       "cs336kk_ctx128_fwd_mixed.pickle"]


class _Plain(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"{module}.{name}")


def _raw(path: Path) -> dict[str, Any]:
    with open(path, "rb") as f:
        return _Plain(f).load()


def _memory(path: Path | str) -> dict[str, Any]:
    res = CliRunner().invoke(cli, ["memory", str(path), "--format", "json"])
    assert res.exit_code in (0, 1), res.output
    return json.loads(res.output)


# ----------------------------------------------------------------------------- the independent counter

PARAM_FNS = {"_apply", "to", "cuda", "half", "float", "double", "bfloat16", "type", "to_empty", "load_state_dict",
             "_load_from_state_dict", "register_parameter", "register_buffer"}
LIB_PARAM_FNS = {"from_pretrained", "_load_pretrained_model", "_load_state_dict_into_meta_model",
                 "set_module_tensor_to_device", "load_checkpoint_and_dispatch", "dispatch_model"}


def _category_and_stage(frames: list[dict[str, Any]]) -> tuple[str, str]:
    """(category, stage) of one stack by the documented rules, first rule that matches wins."""
    if not frames:
        return "unattributed", "unknown"
    frames = frames[:512]
    files = []
    funcs = []
    for f in frames:
        files.append(str(f.get("filename", "")).replace("\\", "/"))
        funcs.append(str(f.get("name", "")))
    backward = any("torch::autograd::Engine" in fn or "AccumulateGrad" in fn for fn in funcs)
    for fl, fn in zip(files, funcs):  # a library's workspace, asked for by its C++ frame
        if not fl.endswith(".py") and (fn.startswith(("at::cuda::getNewWorkspace", "getCUDABlasLtWorkspace",
                                                      "getCurrentCUDABlasLtHandle", "at::cuda::getCurrentCUDABlasHandle"))
                                       or ("cudnn" in fn.lower() and "workspace" in fn.lower())):
            return "library_workspaces", "backward" if backward else "other"
    for fl in files:
        if "/torch/optim/" in fl and "lr_scheduler" not in fl:
            return "optimizer_state", "optimizer"
    for fn in funcs:
        if "AccumulateGrad" in fn:
            return "gradients", "backward"
    for fl, fn in zip(files, funcs):
        if "torch::autograd::Engine" in fn or "torch::autograd::generated::" in fn:
            return "temporaries", "backward"
        if fn in ("backward", "_engine_run_backward", "run_backward", "grad") and (
                "/torch/autograd/" in fl or fl.endswith("torch/_tensor.py")):
            return "temporaries", "backward"
        if fn in ("backward", "call_compiled_backward") and "/_aot_autograd/" in fl:
            return "temporaries", "backward"
    for fl, fn in zip(files, funcs):
        if fl.endswith("torch/nn/modules/module.py") and fn in PARAM_FNS:
            return "parameters", "setup"
        if fl.endswith(("torch/nn/init.py", "torch/nn/parameter.py")) or fn in LIB_PARAM_FNS:
            return "parameters", "setup"
        if "/torch/nn/modules/" in fl and fn in ("__init__", "reset_parameters"):
            return "parameters", "setup"
    in_module = False
    for fl, fn in zip(files, funcs):
        if "torchinductor_" in fl and fl.endswith(".py"):
            in_module = True
        if fl.endswith("torch/nn/modules/module.py") and fn in ("_call_impl", "_wrapped_call_impl"):
            in_module = True
    if in_module:
        return "activations", "forward"  # none of these snapshots runs an evaluation function
    for fl, fn in zip(files, funcs):
        if fn == "__init__" and (fl.endswith(".py") or fl.startswith("<")) and "/torch/" not in fl \
                and "/site-packages/" not in fl:
            return "parameters", "setup"
    if any("/torch/utils/data/" in fl for fl in files):
        return "temporaries", "data"
    if any(fl.endswith(".py") or fl.startswith("<") for fl in files):
        return "temporaries", "other"
    return "unattributed", "unknown"


def expected_state(raw: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """Per device: reserved bytes and category bytes at snapshot time, from the segments' own blocks."""
    out: dict[int, dict[str, Any]] = {}
    traces = raw.get("device_traces") or []
    for seg in raw["segments"]:
        dev = seg.get("device", 0)
        d = out.setdefault(dev, {"reserved": 0, "allocated": 0, "cats": dict.fromkeys(CATEGORIES, 0)})
        d["reserved"] += seg["total_size"]
    for dev, d in out.items():
        # when each address was last allocated, and the last allocation outside the backward pass
        last_alloc: dict[int, float] = {}
        last_not_backward = None
        for k, e in enumerate(traces[dev] if dev < len(traces) else []):
            if e["action"] != "alloc":
                continue
            t = e.get("time_us", k)  # older files have no clock: the entry's position orders them
            last_alloc[e["addr"]] = t
            if _category_and_stage(e.get("frames") or [])[1] not in ("backward", "unknown"):
                last_not_backward = t
        for seg in raw["segments"]:
            if seg.get("device", 0) != dev:
                continue
            for b in seg["blocks"]:
                if b["state"] != "active_allocated":
                    continue
                cat, stage = _category_and_stage(b.get("frames") or [])
                t = last_alloc.get(b["address"])
                if (cat == "temporaries" and stage == "backward" and t is not None and last_not_backward is not None
                        and t < last_not_backward):
                    cat = "gradients"  # made by the backward pass and outlived it
                d["cats"][cat] += b["size"]
                d["allocated"] += b["size"]
        d["cats"]["allocator_cache"] = d["reserved"] - d["allocated"]
        d["cats"]["non_pytorch"] = None  # these files do not record the device's free memory
    return out


# ----------------------------------------------------------------------------- the checks


@pytest.mark.slow  # slow pass: a real trace (or job) analysed whole; the README's fast command stays under 300 CPU s on a 2-core VM
@pytest.mark.parametrize("name", ALL)
def test_categories_match_an_independent_count_and_add_up_to_reserved(name: str) -> None:
    path = shared_snapshot(name)
    want = expected_state(_raw(path))
    rep = _memory(path)
    devices = rep["sections"][0]["devices"]
    assert len(devices) == len(want)
    for dev in devices:
        exp = want[int(dev["device"].split(":")[1])]
        assert dev["reserved_bytes"] == exp["reserved"]
        assert dev["categories"] == exp["cats"]
        cats = dev["categories"]
        assert set(cats) == set(CATEGORIES)
        assert sum(v for k, v in cats.items() if k != "non_pytorch") == dev["reserved_bytes"]
        assert dev["unattributed_share"] == pytest.approx(cats["unattributed"] / exp["allocated"])
        # stages, modules and files split the same allocated bytes
        assert sum(r["bytes"] for r in dev["stages"]) == exp["allocated"]
        assert sum(r["bytes"] for r in dev["files"]) == exp["allocated"]
        peak = dev["at_peak"]
        assert peak["allocated_bytes"] == dev["allocated"]["peak"]
        if peak["reserved_bytes"] is not None:
            assert sum(v for k, v in peak["categories"].items() if k != "non_pytorch") == peak["reserved_bytes"]


def test_a_real_training_step_has_optimizer_state_and_its_cublas_workspace() -> None:
    """EoR_NN is recorded after full steps (stacks='all'): Adam's state is live, and the cuBLAS workspace the
    backward pass's first matmul asked for (8,519,680 bytes, at::cuda::getNewWorkspace under
    getCurrentCUDABlasHandle) is a library workspace, not a gradient (the former code called it one: the only
    "gradient" it found here)."""
    path = shared_snapshot("eor_nn_snapshot.pickle")
    ws = [b["size"] for s in _raw(path)["segments"] for b in s["blocks"] if b["state"] == "active_allocated"
          and any(str(f.get("name", "")).startswith("at::cuda::getNewWorkspace") for f in b.get("frames") or [])]
    assert ws == [8519680]
    dev = _memory(path)["sections"][0]["devices"][0]
    assert dev["categories"]["optimizer_state"] > 0
    assert dev["categories"]["library_workspaces"] == sum(ws)
    assert dev["categories"]["gradients"] == 0
    stages = {r["stage"] for r in dev["at_peak"]["stages"]}
    assert {"forward", "backward", "optimizer"} <= stages


def test_compiled_graphs_are_attributed_to_the_graph_and_function_not_to_generated_lines() -> None:
    path = shared_snapshot("cs336kk_2p7b_compiled_fwd.pickle")
    raw = _raw(path)
    # the independent count: live bytes per Inductor-generated file at snapshot time
    per_graph: dict[str, int] = {}
    for seg in raw["segments"]:
        for b in seg["blocks"]:
            if b["state"] != "active_allocated":
                continue
            for f in b.get("frames") or []:
                fl = str(f.get("filename", ""))
                if "torchinductor_" in fl and fl.endswith(".py"):
                    key = fl.rsplit("/", 1)[-1][:12]
                    per_graph[key] = per_graph.get(key, 0) + b["size"]
                    break
    dev = _memory(path)["sections"][0]["devices"][0]
    modules = {r["module"]: r["bytes"] for r in dev["modules"]}
    assert len(per_graph) >= 2
    for graph, nbytes in per_graph.items():
        rows = [m for m in modules if m.startswith(f"compiled graph {graph}")]
        assert len(rows) == 1, (graph, modules)
        assert modules[rows[0]] == nbytes
    # a forward graph names the user function it was compiled from, not a generated line; a backward graph
    # (run by the autograd engine, no user function calls it) names the function its traced source lines are in
    forward = [m for m in modules if "(transformer.py:" in m]
    backward = [m for m in modules if "(backward of transformer.py forward)" in m]
    assert forward and backward
    assert max(modules[m] for m in forward) >= 3 << 30 and max(modules[m] for m in backward) >= 7 << 30
    assert not any("torchinductor" in m for m in modules)


def test_stage_from_record_function_annotations_where_the_stack_names_none(tmp_path: Path) -> None:
    """A stack-less allocation inside an annotated 'backward' range is counted in the backward stage."""
    b = SnapshotBuilder()
    b.alloc(4 * MiB, [])
    snap = b.snapshot()
    t = next(e["time_us"] for e in snap["device_traces"][0] if e["action"] == "alloc")
    snap["external_annotations"] = [
        {"stage": "START", "name": "## backward ##", "device": 0, "time_us": t - 1},
        {"stage": "END", "name": "## backward ##", "device": 0, "time_us": t + 1},
    ]
    p = tmp_path / "a.pickle"
    with open(p, "wb") as fh:
        pickle.dump(snap, fh)
    dev = _memory(p)["sections"][0]["devices"][0]
    assert dev["categories"]["unattributed"] == 4 * MiB  # the annotation names a stage, not an owner
    assert [(r["stage"], r["bytes"]) for r in dev["stages"]] == [("backward", 4 * MiB)]


def test_the_captures_registered_tensors_name_blocks_no_stack_names(tmp_path: Path) -> None:
    """The compiled 2.7B model's weights were allocated before the history (no frames): unattributed by stacks.
    Registered by the capture as parameters (storage pointers inside the blocks), they are counted as such."""
    raw = _raw(shared_snapshot("cs336kk_2p7b_compiled_fwd.pickle"))
    stackless = [(b["address"], b["size"]) for s in raw["segments"] for b in s["blocks"]
                 if b["state"] == "active_allocated" and not b.get("frames")]
    assert stackless
    chosen = stackless[: len(stackless) // 2]
    raw["gpuprof"] = {"tensors": [{"device": 0, "ptr": a + 16 if sz > 16 else a, "bytes": sz,
                                   "category": "parameters"} for a, sz in chosen]
                      + [{"device": 0, "ptr": 1, "bytes": 4, "category": "parameters"},  # in no block: ignored
                         {"device": 0, "ptr": chosen[0][0], "bytes": 4, "category": "nonsense"}]}
    p = tmp_path / "registered.pickle"
    p.write_bytes(pickle.dumps(raw))
    before = _memory(shared_snapshot("cs336kk_2p7b_compiled_fwd.pickle"))["sections"][0]["devices"][0]
    dev = _memory(p)["sections"][0]["devices"][0]
    registered = sum(sz for _, sz in chosen)
    assert dev["categories"]["parameters"] == before["categories"]["parameters"] + registered
    assert dev["categories"]["unattributed"] == before["categories"]["unattributed"] - registered
    assert dev["reserved_bytes"] == before["reserved_bytes"]


@pytest.mark.parametrize("name", ["eor_nn_snapshot.pickle", "cs336_magma_memory_snapshot.pickle"])
def test_the_stage_timeline_peaks_at_what_the_history_allocated(name: str) -> None:
    """Over time, per stage: the highest bucket holds the most bytes the recorded allocations had live at once
    (the test's own running sum over the raw history), and each stage's bytes are those its stacks name."""
    raw = _raw(shared_snapshot(name))
    # an allocation still live at the end counts its block's size (the history records the request, the block
    # holds it rounded: gpuprof.memory.replay.align_history_sizes), any other its recorded size
    ev = raw["device_traces"][0]
    final = {b["address"]: b["size"] for s in raw["segments"] for b in s["blocks"] if b["state"] == "active_allocated"}
    last: dict[int, int] = {}
    for i, e in enumerate(ev):
        if e["action"] == "alloc":
            last[e["addr"]] = i
        elif e["action"] == "free_requested":
            last.pop(e["addr"], None)
    at_end = {i: final[a] for a, i in last.items() if a in final}
    live: dict[int, int] = {}
    cur = best = 0
    for i, e in enumerate(ev):
        if e["action"] == "alloc":
            live[e["addr"]] = at_end.get(i, e["size"])
            cur += live[e["addr"]]
        elif e["action"] == "free_requested" and e["addr"] in live:
            cur -= live.pop(e["addr"])
        best = max(best, cur)
    tl = _memory(shared_snapshot(name))["sections"][0]["devices"][0]["stage_timeline"]
    assert max(sum(r) for r in tl["bytes"]) == best
    assert len(tl["t"]) == len(tl["bytes"]) and all(len(r) == len(tl["stages"]) for r in tl["bytes"])
    assert "forward" in tl["stages"]


def test_the_page_and_the_tensorboard_tab_carry_the_same_categories() -> None:
    from gpuprof.memory.analysis import analyze_memory
    from gpuprof.memory.html import build_page_data, render_html
    from gpuprof.memory.load import load_memory

    data = load_memory(str(shared_snapshot("eor_nn_snapshot.pickle")))
    section, findings, analyses = analyze_memory(data)
    page = build_page_data(data, analyses, findings)
    dev, sec = page["devices"][0], section.devices[0]
    assert dev["categories"]["now"] == sec["categories"] and dev["categories"]["peak"] == sec["at_peak"]["categories"]
    assert dev["categories"]["now_reserved"] == sec["reserved_bytes"]
    assert dev["stages"] == sec["at_peak"]["stages"] and dev["modules"] == sec["at_peak"]["modules"]
    html = render_html(page)
    assert 'id="cats"' in html and 'id="stages"' in html and 'id="modules"' in html and 'id="fixes"' in html


def test_the_page_script_builds_the_category_tables(tmp_path: Path) -> None:
    """The page's own script, run under a minimal DOM in Node (no browser here), fills the new tables."""
    import shutil
    import subprocess

    node = shutil.which("node")
    if node is None:
        pytest.skip("needs node")
    page = tmp_path / "p.html"
    res = CliRunner().invoke(cli, ["memory", str(shared_snapshot("eor_nn_snapshot.pickle")), "--device-memory",
                                   "130MiB", "--html", str(page)])
    assert res.exit_code in (0, 1), res.output
    out = subprocess.run([node, str(Path(__file__).with_name("memory_page_shim.js")), str(page)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    drawn = json.loads(out.stdout)
    assert drawn["cats"].startswith("categoryat the peakat the end") and "optimizer state" in drawn["cats"]
    assert "= reserved by PyTorch128.00 MiB128.00 MiB" in drawn["cats"]
    assert drawn["stages"].startswith("stagebytesshare") and "backward" in drawn["stages"]
    assert "latent_cnn.py" in drawn["modules"]
    assert drawn["fixes"].startswith("Fixes ranked by the bytes each saves")

"""Step-level and per-module MFU (docs/views.md, "MFU"), checked against an independent reading of real traces.

The independent side reads the trace's JSON itself: the ``ProfilerStep#`` window, each kernel's launching
runtime call (by correlation id), the innermost operator around that call whose FLOPs
:func:`gpuprof.trace.flops.estimate_flops` gives (that estimator is checked against torch's own in
tests/diff/test_flops.py), and the GEMM/convolution kernels by name. It shares no code with
:mod:`gpuprof.rules.flopwork`.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from typing import Any

import pytest

from gpuprof.analysis import analyze
from gpuprof.trace.flops import estimate_flops
from gpuprof_testing.realtraces import shared_path

H100 = ("hta", "TraceLens", "tests", "traces", "h100")
BF16_PEAK = {"h100": 989.4, "mi300x": 1307.4}
_GEMM = re.compile(r"gemm|gemv|conv|fprop|dgrad|wgrad|xmma|^Cijk_", re.I)  # Cijk_: Tensile (ROCm) GEMMs


def _events(path: Path) -> list[dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as fh:  # type: ignore[operator]
        return json.load(fh)["traceEvents"]  # type: ignore[no-any-return]


def _independent(path: Path) -> dict[str, Any]:
    """Step wall time, compute-kernel time, FLOPs and known-FLOP kernel time of the trace's steps; and the same
    per outermost ``nn.Module`` frame (its kernels: those launched while it was open on its thread)."""
    ev = _events(path)
    marks = [e for e in ev if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")]
    assert len(marks) == 1  # one-step traces: the step runs to the later of its host end and its GPU work's end
    runtime = {e["args"]["correlation"]: e for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver")
               and "correlation" in e.get("args", {})}
    start, host_end = marks[0]["ts"], marks[0]["ts"] + marks[0]["dur"]
    launched = [g["ts"] + g["dur"] for g in ev if g.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
                and (r := runtime.get(g["args"].get("correlation"))) is not None and start <= r["ts"] <= host_end]
    steps = [(start, max([host_end, *launched]))]
    ops: dict[Any, list[dict[str, Any]]] = {}
    for e in ev:
        if e.get("cat") == "cpu_op" and e.get("dur", 0) > 0:
            ops.setdefault(e["tid"], []).append(e)
    by_ext = {e["args"]["External id"]: e for e in reversed(ev) if e.get("cat") == "cpu_op"
              and "External id" in e.get("args", {})}
    modules = [e for e in ev if e.get("cat") == "python_function" and e["name"].startswith("nn.Module: ")]

    def flops_of(o: dict[str, Any]) -> float | None:
        a = o.get("args", {})
        dims = a.get("Input Dims")
        conc = a.get("Concrete Inputs")
        return estimate_flops(o["name"], json.dumps(dims) if dims is not None else None,
                              json.dumps(conc) if conc is not None else None)

    total = known = 0.0
    per_op: dict[int, tuple[float, list[dict[str, Any]]]] = {}
    for k in ev:
        if k.get("cat") != "kernel" or "nccl" in k["name"].lower():
            continue
        if not any(a <= k["ts"] <= b for a, b in steps):
            continue
        total += k["dur"]
        r = runtime.get(k["args"].get("correlation"))
        if r is None:  # a launch the trace lost: its operator by the kernel's External id
            o = by_ext.get(k["args"].get("External id"))
            r = {"tid": o["tid"], "ts": o["ts"]} if o is not None else None
        if r is None or not _GEMM.search(k["name"]):
            continue
        around = [o for o in ops.get(r["tid"], []) if o["ts"] <= r["ts"] <= o["ts"] + o["dur"]]
        for o in sorted(around, key=lambda o: -o["ts"]):  # innermost first
            f = flops_of(o)
            if f is not None:
                per_op.setdefault(id(o), (f, []))[1].append({"kernel": k, "launch": r})
                known += k["dur"]
                break
    flops = sum(f for f, _ in per_op.values())
    roots = {}
    for mod in modules:
        kd = [(f * x["kernel"]["dur"] / sum(y["kernel"]["dur"] for y in ks), x)
              for f, ks in per_op.values() for x in ks
              if x["launch"]["tid"] == mod["tid"] and mod["ts"] <= x["launch"]["ts"] <= mod["ts"] + mod["dur"]]
        roots.setdefault(mod["name"][len("nn.Module: "):], []).append(sum(f for f, _ in kd))
    wall = sum(b - a for a, b in steps)
    return {"wall": wall, "total": total, "known": known, "flops": flops, "module_flops": roots}


@pytest.mark.parametrize(("folder", "name", "row"), [
    (H100, "Falconsai_nsfw_image_detection__1016002.json.gz", "h100"),
    (H100, "Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz", "h100"),
    (H100, "facebook_timesformer-base-finetuned-k400__1016002.json.gz", "h100"),
    (("hta", "TraceLens", "tests", "traces", "mi300"), "Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz", "mi300x"),
])
@pytest.mark.slow  # a real trace analysed whole / a bounded hostile wait: the slow pass
def test_step_mfu_equals_an_independent_count_from_raw_events(folder: tuple[str, ...], name: str, row: str) -> None:
    path = shared_path(*folder, name)
    mine = analyze(str(path)).to_dict()["traces"][0]["mfu"]
    theirs = _independent(path)
    assert mine["peak_source"] == row
    assert set(mine["flops_by_precision"]) <= {"bf16", "fp32"}  # bf16 models; a few fp32 GEMMs in Qwen
    bf16 = mine["flops_by_precision"]["bf16"]
    fp32 = mine["flops_by_precision"].get("fp32", 0.0)
    assert fp32 < bf16 * 1e-6  # ... too few to move the figure
    assert bf16 + fp32 == pytest.approx(theirs["flops"], rel=1e-9)
    assert mine["known_flops_share"] == pytest.approx(theirs["known"] / theirs["total"], rel=1e-9)
    assert mine["value"] == pytest.approx(theirs["flops"] / (BF16_PEAK[row] * 1e6) / theirs["wall"], rel=1e-5)
    assert 0 < mine["value"] < 1 and 0.1 < mine["known_flops_share"] < 1


def test_module_mfu_equals_an_independent_count_from_raw_events() -> None:
    path = shared_path(*H100, "Falconsai_nsfw_image_detection__1016002.json.gz")
    t = analyze(str(path)).to_dict()["traces"][0]
    theirs = _independent(path)
    mods = {r["name"]: r for r in t["views"]["modules"]}
    root = mods["ViTModel_0"]  # the model: every GEMM of the step runs inside it
    assert t["mfu"]["per_module"][0]["name"] == "ViTModel_0"
    assert t["mfu"]["per_module"][0]["mfu"] == root["mfu"]
    flops = sum(theirs["module_flops"]["ViTModel_0"])
    assert root["mfu"] == pytest.approx(flops / (989.4 * 1e6) / root["gpu_total_us"], rel=1e-6)
    assert flops == pytest.approx(theirs["flops"], rel=1e-9)
    # a module with no GEMM has no MFU, but a known share of 0
    none = [r for r in t["views"]["modules"] if r["gpu_total_us"] > 0 and r["mfu"] is None]
    assert none and all(r["known_flops_share"] == 0 for r in none)


def test_saved_report_with_mfu_passes_the_report_check_and_reads_back(tmp_path: Path) -> None:
    from gpuprof.saved.check import ReportProblem, saved_report

    path = shared_path(*H100, "Falconsai_nsfw_image_detection__1016002.json.gz")
    d = json.loads(json.dumps(analyze(str(path)).to_dict()))  # as saved
    saved_report(d)
    d["traces"][0]["mfu"]["known_flops_share"] = 1.5  # a share above 1: refused, the field named
    with pytest.raises(ReportProblem, match="known_flops_share"):
        saved_report(d)


@pytest.mark.parametrize("fmt", ["terminal", "markdown"])
def test_terminal_and_markdown_say_the_mfu_and_the_unknown_share(fmt: str) -> None:
    from dataclasses import replace

    from gpuprof.render import render

    path = shared_path(*H100, "Falconsai_nsfw_image_detection__1016002.json.gz")
    report = analyze(str(path))
    t = report.traces[0]
    assert t.mfu is not None and t.mfu.value is not None and t.mfu.known_flops_share is not None
    out = render(report, fmt)
    assert f"{t.mfu.value:.1%} of the h100 dense BF16 peak" in out  # a bf16 model: its peak is the reference one
    assert f"FLOPs unknown for {1 - t.mfu.known_flops_share:.1%}" in out
    assert "Kernel MFU (h100)" in out and "FLOPs known" in out  # the modules view's columns
    report.traces[0] = replace(t, mfu=replace(t.mfu, value=None, peak_source=None))
    assert "n/a (no peak for this GPU)" in render(report, fmt)


def test_html_page_cards_word_the_mfu_as_the_terminal_does() -> None:
    from gpuprof.htmlpage.page import report_page_data
    from gpuprof.render.format import fmt_mfu

    report = analyze(str(shared_path(*H100, "Falconsai_nsfw_image_detection__1016002.json.gz")))
    head = report_page_data(report)["headline"]
    assert head["mfu_text"] == fmt_mfu(report.traces[0]) and "of the h100 dense BF16 peak" in head["mfu_text"]
    assert head["comm_wait_text"] is None  # no collectives
    # the modules view carries the per-module figures the page's table draws (as percentages)
    mods = report_page_data(report)["traces"][0]["views"]["modules"]
    assert mods[0]["mfu"] is not None and mods[0]["known_flops_share"] is not None

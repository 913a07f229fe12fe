"""GP307 low-mfu on real shared traces: said where most kernel time has known FLOPs, never on an unknown GPU."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from gpuprof.analysis import analyze
from gpuprof_testing.realtraces import shared_path

H100 = ("hta", "TraceLens", "tests", "traces", "h100")


def _gp307(path: Path | str, **opts: float) -> tuple[list[dict], dict]:  # type: ignore[type-arg]
    d = analyze(str(path), options={"GP307": opts} if opts else None).to_dict()
    return [f for f in d["findings"] if f["code"] == "GP307"], d["traces"][0]["mfu"]


def test_gp307_bad_h100_vit_low_mfu_with_most_flops_known() -> None:
    found, mfu = _gp307(shared_path(*H100, "Falconsai_nsfw_image_detection__1016002.json.gz"))
    assert len(found) == 1
    f = found[0]
    ev = f["evidence"][0]
    assert f["severity"] == "info"
    # one answer: the finding's figures are the summary's
    assert ev["value"] == pytest.approx(mfu["value"], abs=1e-5) and mfu["value"] < 0.2
    assert ev["extra"]["known_flops_share"] == pytest.approx(mfu["known_flops_share"], abs=1e-4)
    assert mfu["known_flops_share"] >= 0.5
    assert ev["extra"]["peak_source"] == "h100" and "h100 BF16 peak" in f["message"]
    # the GPU is mostly idle and the GEMMs themselves are slow: both said
    assert ev["extra"]["gpu_utilization"] < 0.5 and "idle" in f["advice"]
    assert ev["extra"]["kernel_mfu"] > mfu["value"]


def test_gp307_good_known_share_too_small_says_nothing() -> None:
    """Qwen on H100: MFU 11% but FLOPs known for only ~20% of the kernel time (attention, norms): no finding."""
    found, mfu = _gp307(shared_path(*H100, "Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"))
    assert mfu["value"] < 0.2 and mfu["known_flops_share"] < 0.5
    assert found == []


def test_gp307_good_unknown_gpu_has_no_mfu_and_no_finding(tmp_path: Path) -> None:
    src = shared_path(*H100, "Falconsai_nsfw_image_detection__1016002.json.gz")
    with gzip.open(src, "rt") as fh:
        doc = json.load(fh)
    for d in doc.get("deviceProperties", []):
        d["name"] = "NVIDIA GeForce RTX 2080 Ti"  # not in the peak table: never another card's peak
        d["computeMajor"], d["computeMinor"] = 7, 5
    path = tmp_path / "rtx.json"
    path.write_text(json.dumps(doc))
    found, mfu = _gp307(path)
    assert found == []
    assert mfu["value"] is None and mfu["peak_source"] is None
    assert mfu["known_flops_share"] > 0.5 and mfu["no_peak_share"] == mfu["known_flops_share"]


def test_gp307_good_threshold_below_the_figure() -> None:
    found, mfu = _gp307(shared_path(*H100, "Falconsai_nsfw_image_detection__1016002.json.gz"), max_mfu=0.01)
    assert mfu["value"] > 0.01 and found == []


def test_gp307_bad_serving_trace_says_decode_is_bandwidth_bound() -> None:
    # SGLang prefill+decode on MI300X: MFU is low, and most of it is decode, which reads weights and the KV cache
    # per token; the finding says so instead of reading as a training-efficiency problem
    path = shared_path("hta", "TraceLens", "tests", "traces", "inference", "sglang_prefilldecode",
                       "sglang_Qwen3-8B_prefilldecode.json.gz")
    found, mfu = _gp307(path)
    assert len(found) == 1 and mfu["value"] < 0.2
    assert "SGLang serving trace" in found[0]["message"] and "memory bandwidth" in found[0]["message"]
    # a training trace says nothing of serving
    vit, _ = _gp307(shared_path(*H100, "Falconsai_nsfw_image_detection__1016002.json.gz"))
    assert "serving" not in vit[0]["message"]

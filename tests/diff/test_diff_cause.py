"""`gpuprof diff`'s "fixed" judged on each rule's own cause figure, and pairs that are not a before/after
(issue 42 item 3, issue 45 item 4; docs/diff.md "Fixed" and "What the two sides are")."""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Any

import pytest

from gpuprof.analysis import analyze
from gpuprof.diff.compare import diff_reports
from gpuprof.diff.render import render_diff_terminal
from gpuprof.rules.base import all_rules
from gpuprof_testing.realtraces import shared_path, v100_samples
from gpuprof_testing.tracegen import TraceBuilder, simple_training, write_ranks

SGEMM = "ampere_sgemm_128x64_nn"  # cuBLAS FP32 on an A100, no tensor cores
TF32 = "sm80_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_stage3_warpsize2x2x1_tensor16x8x8_kernel"


def _removed(d: dict[str, Any], code: str) -> dict[str, Any]:
    (row,) = [r for r in d["findings"]["removed"] if r["code"] == code]
    return row


def _gemm_run(tmp_path: Path, kernel: str, gemm_us: float, seed: int) -> Path:
    """Ten steps on an A100: data loading that varies by tens of ms from step to step, then 8 GEMMs."""
    rng = random.Random(seed)
    tb = TraceBuilder(device="NVIDIA A100-SXM4-80GB", cc=(8, 0))
    for _ in range(10):
        with tb.step():
            tb.dataloader(ms=rng.uniform(5.0, 80.0), single_process=False)
            for _layer in range(8):
                with tb.op("aten::mm", ["float", "float"]):
                    tb.kernel(kernel, us=gemm_us + rng.uniform(-2.0, 2.0))
            tb.device_synchronize()
    return Path(tb.write(tmp_path / f"{seed}.pt.trace.json"))


@pytest.mark.slow  # two synthetic traces analysed whole (about 2 s)
def test_fp32_to_tf32_is_fixed_on_the_gemm_time_not_the_step_noise(tmp_path: Path) -> None:
    before = analyze(str(_gemm_run(tmp_path, SGEMM, 669.0, 1))).to_dict()
    after = analyze(str(_gemm_run(tmp_path, TF32, 330.0, 2))).to_dict()
    assert "GP302" in {f["code"] for f in before["findings"]} and "GP302" not in {f["code"] for f in after["findings"]}
    d = diff_reports(before, after)
    assert d["relation"] == "before_after"
    row = _removed(d, "GP302")
    # the step's noise (data loading) is far larger than the kernels' change: judged on the step, not fixed
    assert d["row_noise_us"] > 5_350 - 2_640
    assert row["fixed"] is True and row["verdict"] == "fixed" and row["not_fixed_reason"] is None
    c = row["cause"]
    assert c["before"] == pytest.approx(8 * 669.0, abs=20) and c["after"] == 0.0  # TF32 kernels are tensor-core work
    assert c["noise"] < 100 and c["improved"] is True
    assert "GEMM/conv kernel time off tensor cores" in render_diff_terminal(d, width=200)


def _eager_run(tmp_path: Path, name: str, eager: bool = True) -> Path:
    tb = TraceBuilder(device="NVIDIA H100 80GB HBM3", cc=(9, 0))
    for _ in range(4):
        with tb.step():
            with tb.op("aten::layer_norm", ["c10::BFloat16"] * 3):
                tb.kernel("void at::native::vectorized_layer_norm_kernel<c10::BFloat16, float>", us=50)
            for _ in range(3):  # the q/k/v, output and MLP projections stay as they are
                with tb.op("aten::linear", ["c10::BFloat16"] * 3):
                    tb.kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", us=250)
            with tb.op("aten::gelu", ["c10::BFloat16"]):
                tb.kernel("void at::native::vectorized_elementwise_kernel<4, GeluCUDAKernelImpl>", us=50)
            if eager:
                with tb.op("aten::matmul", ["c10::BFloat16"] * 2), tb.op("aten::bmm", ["c10::BFloat16"] * 2):
                    tb.kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize128x128x64", us=150)
                with tb.op("aten::softmax", ["c10::BFloat16"]), tb.op("aten::_softmax", ["c10::BFloat16"]):
                    tb.kernel("void at::native::cunn_SoftMaxForward<8, c10::BFloat16, float>", us=300)
                with tb.op("aten::matmul", ["c10::BFloat16"] * 2), tb.op("aten::bmm", ["c10::BFloat16"] * 2):
                    tb.kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize128x64x64", us=150)
            else:
                with tb.op("aten::scaled_dot_product_attention", ["c10::BFloat16"] * 3):
                    tb.kernel("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64>>", us=250)
            tb.device_synchronize()
    return Path(tb.write(tmp_path / name))


def test_gp304_the_same_eager_attention_is_still_there(tmp_path: Path) -> None:
    before = analyze(str(_eager_run(tmp_path, "a.json"))).to_dict()
    # the other run: the same eager attention, analysed with a higher threshold, so GP304 does not fire there
    after = analyze(str(_eager_run(tmp_path, "b.json")), options={"GP304": {"min_share": 0.99}}).to_dict()
    assert "GP304" in {f["code"] for f in before["findings"]} and "GP304" not in {f["code"] for f in after["findings"]}
    # by hand: the bmm, softmax and bmm kernels of each step, 150 + 300 + 150 µs
    assert before["traces"][0]["cause_per_step"]["GP304"] == [600.0] * 4
    assert after["traces"][0]["cause_per_step"]["GP304"] == [600.0] * 4
    row = _removed(diff_reports(before, after), "GP304")
    assert row["fixed"] is False and row["verdict"] == "still_there"
    assert row["not_fixed_reason"].startswith("still there")
    # and the real fix, fused attention, is fixed
    fused = analyze(str(_eager_run(tmp_path, "c.json", eager=False))).to_dict()
    assert fused["traces"][0]["cause_per_step"]["GP304"] == [0.0] * 4
    assert _removed(diff_reports(before, fused), "GP304")["verdict"] == "fixed"


def _doc(times: list[float], causes: dict[str, list[float]], findings: tuple[str, ...] = (), **trace: Any) -> dict[str, Any]:
    n = len(times)
    rows = [{"name": k, "input_shapes": None, "calls": n, "cpu_self_us": 100.0 * n, "cpu_total_us": 100.0 * n,
             "gpu_self_us": 0.0, "gpu_total_us": 0.0} for k in trace.pop("ops", ("aten::mm", "aten::add"))]
    return {"schema_version": "1.6", "traces": [{"path": "t",
                                                 "step_time_us": sorted(times)[n // 2], "gpu_busy_us": 0.0, "gpu_utilization": None, "breakdown_us": {}, "idle_breakdown_us": {},
                        "num_steps": n, "step_times_us": times, "step_time_mean_us": sum(times) / n,
                        "devices": [{"name": "NVIDIA H100 80GB HBM3"}], "views": {"operators": rows, "kernels": []},
                        "cause_per_step": causes, **trace}],
            "findings": [{"code": c, "name": c.lower(), "severity": "info", "message": "m", "source": "t"} for c in findings]}


def test_gp307_mfu_falling_is_not_fixed() -> None:
    times = [50_000.0 + i for i in range(8)]
    before = _doc(times, {"GP307": [0.10 + 0.001 * i for i in range(8)]}, ("GP307",))
    after = _doc(times, {"GP307": [0.0077 + 0.0001 * i for i in range(8)]})  # 13x lower: the finding went (e.g. fewer known FLOPs)
    row = _removed(diff_reports(before, after), "GP307")
    assert row["fixed"] is False and row["verdict"] == "still_there"
    assert row["cause"]["higher_is_better"] is True and row["cause"]["improved"] is False
    # and an MFU that rose beyond its spread is fixed
    up = _doc(times, {"GP307": [0.30 + 0.001 * i for i in range(8)]})
    assert _removed(diff_reports(before, up), "GP307")["verdict"] == "fixed"


def test_gp901_every_step_slower_is_not_fixed() -> None:
    b = [100_000.0] * 8 + [400_000.0] * 2  # two outlier steps
    a = [150_000.0 + i for i in range(10)]  # no outlier, every step slower: the mean step fell 160 -> 150 ms
    row = _removed(diff_reports(_doc(b, {"GP901": b}, ("GP901",)), _doc(a, {"GP901": a})), "GP901")
    assert row["fixed"] is False and row["verdict"] == "still_there"
    assert row["cause"]["statistic"] == "mean"
    # outliers gone with the other steps as before: fixed
    a2 = [100_000.0 + i for i in range(30)]
    b2 = [100_000.0] * 20 + [400_000.0] * 10
    assert _removed(diff_reports(_doc(b2, {"GP901": b2}, ("GP901",)), _doc(a2, {"GP901": a2})), "GP901")["fixed"] is True


def test_two_ranks_of_one_step_are_labelled_ranks(tmp_path: Path) -> None:
    paths = write_ranks(tmp_path, 2, lambda tb, r: simple_training(tb, steps=4, data_ms=2.0 + 30.0 * (1 - r)))
    r0, r1 = (analyze(str(p)).to_dict() for p in paths)
    r0["findings"].append({"code": "GP301", "name": "launch-bound", "severity": "warning", "message": "m",
                           "source": r0["traces"][0]["path"]})
    d = diff_reports(r0, r1)
    assert d["relation"] == "ranks" and "ranks 0 and 1 of 2" in d["relation_reason"]
    row = _removed(d, "GP301")
    assert row["fixed"] is False and row["verdict"] == "ranks"
    assert all(r["verdict"] == "ranks" for r in d["findings"]["removed"] + d["findings"]["added"] + d["findings"]["unchanged"])
    assert "ranks: the sides are other ranks of one job" in render_diff_terminal(d, width=200)
    # the same rank twice is a before/after
    assert diff_reports(r0, r0)["relation"] == "before_after"


def test_different_programs_are_labelled() -> None:
    times = [10_000.0 + i for i in range(5)]
    b = _doc(times, {"GP102": [5_000.0] * 5}, ("GP102",), ops=("aten::conv2d", "aten::batch_norm"))
    a = _doc(times, {"GP102": [0.0] * 5}, ops=("aten::embedding", "aten::bmm", "aten::softmax"))
    d = diff_reports(b, a)
    assert d["relation"] == "different_programs"
    assert _removed(d, "GP102")["verdict"] == "different_programs" and _removed(d, "GP102")["fixed"] is False
    # the same operators: a before/after, and the data wait gone is fixed
    d2 = diff_reports(b, _doc(times, {"GP102": [0.0] * 5}, ops=("aten::conv2d", "aten::batch_norm")))
    assert d2["relation"] == "before_after" and _removed(d2, "GP102")["fixed"] is True


def test_docs_table_is_the_rules_declarations() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "diff.md").read_text(encoding="utf-8")
    section = text.split("### The cause figure of each code", 1)[1].split("\n#", 1)[0]
    rows = {m.group(1): (m.group(2).strip(), m.group(3).strip(), m.group(4).strip())
            for m in re.finditer(r"^\| (GP\d+) \| ([^|]+) \| ([^|]+) \| ([^|]+) \|$", section, re.M)}
    declared = {r.code: (r.cause.label, r.cause.unit, ("higher" if r.cause.higher_is_better else "lower") + ", "
                         + r.cause.statistic) for r in all_rules() if r.cause is not None}
    assert rows == declared


@pytest.mark.slow  # the real V100 runs analysed whole
def test_real_v100_gp102_stays_fixed_on_its_data_wait() -> None:
    files = v100_samples()
    root = files[0].parent.parent
    b = analyze(str(root / "resnet50_num_workers_0"), jobs=1).to_dict()
    a = analyze(str(root / "resnet50_num_workers_4"), jobs=1).to_dict()
    d = diff_reports(b, a)
    assert d["relation"] == "before_after"
    row = _removed(d, "GP102")
    assert row["fixed"] is True and row["cause"]["improved"] is True
    # independently: the median wait per step from the traces' own DataLoader events is tens of ms before, ~1 ms after
    assert row["cause"]["before"] > 40_000 and row["cause"]["after"] < 5_000


@pytest.mark.slow  # two real 128-rank-job traces analysed whole
def test_real_two_ranks_of_one_job_are_ranks() -> None:
    base = ("hta", "HolisticTraceAnalysis", "tests", "data")
    r0 = analyze(str(shared_path(*base, "timeline_analysis", "sampled_rank-0.json.gz"))).to_dict()
    r1 = analyze(str(shared_path(*base, "trace_filter", "sampled_rank-1.json.gz"))).to_dict()
    d = diff_reports(r0, r1)
    assert d["relation"] == "ranks" and "of 128" in d["relation_reason"]
    assert not any(r["fixed"] for r in d["findings"]["removed"])


def test_one_step_a_side_falls_back_to_the_step_when_the_cause_got_better() -> None:
    # a trace without step markers is one step: no spread of the figure; better goes to the step's rules
    b = _doc([300_000.0], {"GP102": [268_000.0]}, ("GP102",), breakdown_us={"data_loading": 268_000.0})
    a = _doc([40_000.0], {"GP102": [7_400.0]}, breakdown_us={"data_loading": 7_400.0})
    row = _removed(diff_reports(b, a), "GP102")
    assert row["verdict"] == "fixed" and row["cause"]["improved"] is None
    worse = _doc([300_000.0], {"GP102": [270_000.0]}, breakdown_us={"data_loading": 270_000.0})
    assert _removed(diff_reports(b, worse), "GP102")["verdict"] == "still_there"

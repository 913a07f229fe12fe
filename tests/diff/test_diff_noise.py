"""`gpuprof diff`'s noise model and what counts as fixed (issue 37, docs/diff.md "Noise" and "Fixed")."""

from __future__ import annotations

import random
from typing import Any

import pytest

from gpuprof.diff.compare import diff_reports
from gpuprof.diff.render import render_diff_markdown, render_diff_terminal
from gpuprof.stats import mean_noise, rank_test_p


def _doc(times: list[float], ops: dict[str, float] | None = None, findings: list[dict[str, Any]] | None = None,
         device: str = "NVIDIA H100 80GB HBM3", parts: dict[str, float] | None = None) -> dict[str, Any]:
    n = len(times)
    rows = [{"name": k, "input_shapes": None, "calls": n, "cpu_self_us": v * n, "cpu_total_us": v * n,
             "gpu_self_us": 0.0, "gpu_total_us": 0.0} for k, v in (ops or {}).items()]
    return {"schema_version": "1.6", "traces": [{"path": "t",
                                                 "step_time_us": sorted(times)[n // 2], "gpu_busy_us": 0.0, "gpu_utilization": None, "idle_breakdown_us": {},
                        "num_steps": n, "step_times_us": times, "step_time_mean_us": sum(times) / n,
                        "devices": [{"name": device}], "breakdown_us": parts or {},
                        "views": {"operators": rows, "kernels": []}}],
            "findings": findings or []}


def _finding(code: str, file: str = "train.py", line: int = 10, cost: float = 1000.0) -> dict[str, Any]:
    return {"code": code, "name": code.lower(), "severity": "warning", "message": "m", "cost_us_per_step": cost,
            "location": {"file": file, "line": line}, "source": "t"}


def test_one_host_hiccup_is_noise_not_change() -> None:
    rng = random.Random(1)
    base = [20_000 + rng.gauss(0, 50) for _ in range(10)]
    after = list(base)
    after[3] += 2_000  # one 2 ms host hiccup in one step of the after run, in three operators
    ops_b = {"aten::add": 300.0, "aten::mul": 250.0, "aten::copy_": 200.0}
    ops_a = {k: v + 2_000 / 3 / 10 for k, v in ops_b.items()}  # each row's mean moved by the hiccup alone
    d = diff_reports(_doc(base, ops_b), _doc(after, ops_a))
    rows = d["operators"]
    assert not rows["slower"] and not rows["faster"]
    assert {r["name"] for r in rows["within_noise"]} == set(ops_b)
    st = next(m for m in d["metrics"] if m["name"] == "step_time")
    assert st["within_noise"] is True
    assert "within the runs' own spread" in render_diff_terminal(d, width=200)
    assert "within the noise" in render_diff_markdown(d)


def test_a_real_slowdown_of_every_step_is_change() -> None:
    rng = random.Random(2)
    base = [20_000 + rng.gauss(0, 50) for _ in range(10)]
    after = [t + 3_000 for t in base]
    d = diff_reports(_doc(base, {"aten::add": 300.0}), _doc(after, {"aten::add": 3_300.0}))
    assert [r["name"] for r in d["operators"]["slower"]] == ["aten::add"]
    st = next(m for m in d["metrics"] if m["name"] == "step_time")
    assert st["within_noise"] is False and st["p_value"] < 0.001
    assert "within the runs' own spread" not in render_diff_terminal(d, width=200)


def test_mean_noise_is_twice_the_standard_error_of_the_difference_of_means() -> None:
    b, a = [10.0, 12.0, 14.0], [20.0, 20.0, 26.0]
    # by hand: variances 4 and 12, n = 3 a side: 2 * sqrt(4/3 + 12/3)
    assert mean_noise(b, a) == pytest.approx(2 * (16 / 3) ** 0.5)
    assert mean_noise([1.0], a) is None


def test_rank_test() -> None:
    same = [100.0] * 5 + [101.0] * 5
    assert rank_test_p(same, list(same)) == pytest.approx(1.0)
    lo, hi = [float(x) for x in range(10)], [float(x) for x in range(100, 110)]
    assert rank_test_p(lo, hi) < 0.001 and rank_test_p(lo, hi) == pytest.approx(rank_test_p(hi, lo))
    # one outlier step does not make two runs differ
    assert rank_test_p([100.0 + i for i in range(9)] + [300.0], [100.0 + i for i in range(10)]) > 0.5
    # the normal approximation, by hand for [1,2,3] vs [4,5,6]: U = 0, mean 4.5, var 9*7/12, continuity 0.5
    import math

    z = (4.5 - 0.5) / math.sqrt(9 * 7 / 12)
    assert rank_test_p([1.0, 2.0, 3.0], [4.0, 5.0, 6.0]) == pytest.approx(math.erfc(z / math.sqrt(2)))
    assert rank_test_p([1.0, 2.0], [3.0, 4.0, 5.0]) is None


def test_a_code_found_elsewhere_after_is_moved_not_fixed_and_new() -> None:
    times = [20_000.0 + i for i in range(10)]
    d = diff_reports(_doc(times, findings=[_finding("GP201", line=10)]), _doc(times, findings=[_finding("GP201", line=42)]))
    f = d["findings"]
    assert not f["removed"] and not f["added"]
    (moved,) = f["changed"]
    assert moved["moved"] and moved["location_before"] == "train.py:10" and moved["location"] == "train.py:42"


def test_a_finding_gone_across_vendors_is_not_confirmed_fixed() -> None:
    times = [20_000.0 + i for i in range(10)]
    d = diff_reports(_doc(times, findings=[_finding("GP202")]), _doc(times, device="AMD Instinct MI300X"))
    (gone,) = d["findings"]["removed"]
    assert gone["fixed"] is False and "vendors" in gone["not_fixed_reason"]
    out = render_diff_terminal(d, width=200)
    assert "not confirmed fixed" in out and out.split("Findings fixed")[1].split("Findings gone")[0].count("GP202") == 0


def test_a_finding_gone_because_every_step_got_slow_is_not_confirmed_fixed() -> None:
    rng = random.Random(3)
    base = [20_000 + rng.gauss(0, 50) for _ in range(10)]
    slow = [t + 5_000 for t in base]
    d = diff_reports(_doc(base, findings=[_finding("GP103")]), _doc(slow))
    (gone,) = d["findings"]["removed"]
    assert gone["fixed"] is False and "slower" in gone["not_fixed_reason"]


def test_a_finding_whose_part_of_the_step_went_away_is_fixed() -> None:
    rng = random.Random(4)
    base = [20_000 + rng.gauss(0, 50) for _ in range(10)]
    fast = [t - 5_000 for t in base]
    d = diff_reports(_doc(base, findings=[_finding("GP601", cost=5_000)], parts={"data_loading": 5_500}),
                     _doc(fast, parts={"data_loading": 400}))
    (gone,) = d["findings"]["removed"]
    assert gone["fixed"] is True and gone["not_fixed_reason"] is None
    kept = diff_reports(_doc(base, findings=[_finding("GP601", cost=5_000)], parts={"data_loading": 5_500}),
                        _doc(base, parts={"data_loading": 5_450}))
    (still,) = kept["findings"]["removed"]
    assert still["fixed"] is False and "did not shrink" in still["not_fixed_reason"]  # 50 µs of a predicted 5 ms

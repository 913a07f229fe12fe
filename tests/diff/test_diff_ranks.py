"""``gpuprof diff`` of multi-rank runs: per-rank step times, pooled metrics, noise over every rank's steps."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from gpuprof.cli import cli
from gpuprof_testing.tracegen import TraceBuilder, write_ranks


def _job(directory: Path, slow_rank_us: dict[int, int]) -> Path:
    directory.mkdir()

    def body(tb: TraceBuilder, rank: int) -> None:
        for i in range(5):
            with tb.step():
                with tb.op("aten::mm", input_types=["float", "float"], input_dims=[[256, 256], [256, 256]]):
                    tb.kernel("volta_sgemm_128x64_nn", us=1000 + 3 * i)
                tb.cpu(us=200 + slow_rank_us.get(rank, 0), name="aten::cpu_work")

    write_ranks(directory, 2, body, device="Tesla V100-SXM2-32GB", cc=(7, 0))
    return directory


def test_a_rank_that_slowed_down_is_named(tmp_path: Path) -> None:
    before = _job(tmp_path / "before", {})
    after = _job(tmp_path / "after", {1: 3000})  # rank 1 spends 3 ms more on the host per step
    res = CliRunner().invoke(cli, ["diff", str(before), str(after), "--format", "json", "-j", "1"])
    assert res.exit_code == 0, res.output
    d: dict[str, Any] = json.loads(res.output)
    assert d["before"]["ranks"] == d["after"]["ranks"] == [0, 1]
    assert d["before"]["steps"] == d["after"]["steps"] == 10  # 5 steps x 2 ranks pooled
    ranks = {r["rank"]: r for r in d["ranks"]}
    assert abs(ranks[0]["change"]) < 0.05 and ranks[1]["change"] > 1.0
    assert ranks[1]["after_step_us"] - ranks[1]["before_step_us"] >= 2900
    # the operator that grew, matched by name (no shapes): 3 ms per rank-1 step over 10 pooled steps
    slower = {r["name"]: r for r in d["operators"]["slower"]}
    assert slower["aten::cpu_work"]["change_us"] >= 1400 and slower["aten::cpu_work"]["measure"] == "cpu_self_us"
    gated = CliRunner().invoke(cli, ["diff", str(before), str(after), "--fail-on-regression", "10%", "--metric",
                                     "step_time_mean", "-j", "1"])
    assert gated.exit_code == 1 and "step_time_mean worse by" in gated.output
    assert "Step time per rank" in gated.output

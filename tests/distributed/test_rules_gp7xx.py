"""The GP7xx cross-rank rules: bad/good cases on rank summaries derived from a real 2-rank NCCL trace."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import msgspec
import pytest
from click.testing import CliRunner

from gpuprof.cli import cli
from gpuprof.codes import lookup
from gpuprof.distributed.analysis import cross_rank
from gpuprof.distributed.rules import CrossRankRule, all_cross_rank_rules
from gpuprof.distributed.summary import RankSummary, summarize
from gpuprof.errors import RuleError
from gpuprof.codes import parse_option_overrides
from gpuprof.testing.realtraces import shared_path
from gpuprof.trace.load import load_trace
from gpuprof.trace.metrics import compute_metrics

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def real() -> RankSummary:
    """Rank 0 of HTA's 2-rank NCCL job (A100): 5 all-reduces and 2 broadcasts per step, with sizes."""
    path = shared_path("hta", "HolisticTraceAnalysis", "tests", "data", "nccl_parser_config", "nccl_data.json.gz")
    return summarize(compute_metrics(load_trace(path)))


def _ranks(base: RankSummary, n: int, **per_rank: list) -> list[RankSummary]:
    out = []
    for r in range(n):
        changes = {k: v[r] for k, v in per_rank.items()}
        out.append(msgspec.structs.replace(base, rank=r, path=f"rank{r}", world_size=n, **changes))
    return out


def _codes(summaries: list[RankSummary]) -> dict[str, str]:
    _, found = cross_rank(summaries)
    return {f.code: f.message for f in found}


def _stretched(base: RankSummary, factor: float) -> list[float]:
    return [d * factor for d in base.inst_dur]


def test_gp701_bad_one_rank_loads_data_slowly_and_three_wait(real: RankSummary) -> None:
    # ranks 0-2 spend 3x longer in every collective (waiting); rank 3 has 20 ms more data loading per step
    ranks = _ranks(real, 4, inst_dur=[_stretched(real, 3)] * 3 + [list(real.inst_dur)],
                   data_loading_us=[0.0, 0.0, 0.0, 20_000.0])
    job, found = cross_rank(ranks)
    assert job.stragglers == [3] and job.straggler_cause == "data_loading"
    gp701 = next(f for f in found if f.code == "GP701")
    assert "straggler: rank 3 of 4" in gp701.message and "more data loading" in gp701.message
    # waits are the opening 2/3 of each stretched collective, their union per step: at least the real
    # communication time, at most twice the summed durations
    assert real.comm_us * 0.99 <= gp701.cost_us_per_step <= 2 * sum(real.inst_dur) / real.num_steps


def test_gp701_good_identical_ranks(real: RankSummary) -> None:
    assert "GP701" not in _codes(_ranks(real, 4))


def test_gp701_good_a_majority_of_slow_ranks_is_not_a_straggler(real: RankSummary) -> None:
    ranks = _ranks(real, 4, inst_dur=[_stretched(real, 3)] + [list(real.inst_dur)] * 3)
    assert "GP701" not in _codes(ranks)


def test_gp702_bad_exposed_communication(real: RankSummary) -> None:
    ranks = _ranks(real, 2, exposed_comm_us=[0.5 * real.step_us] * 2, comm_us=[0.6 * real.step_us] * 2)
    assert "GP702" in _codes(ranks)


def test_gp702_good_overlapped_communication(real: RankSummary) -> None:
    ranks = _ranks(real, 2, exposed_comm_us=[0.02 * real.step_us] * 2, comm_us=[0.6 * real.step_us] * 2)
    assert "GP702" not in _codes(ranks)


def test_gp703_bad_four_sync_rounds_per_optimizer_step(real: RankSummary) -> None:
    n = real.num_steps
    ranks = _ranks(real, 2, ddp_forwards=[4 * n] * 2, ddp_sync_rounds=[4 * n] * 2, optimizer_steps=[n] * 2)
    assert "4.0 gradient all-reduce rounds per optimizer step" in _codes(ranks)["GP703"]


def test_gp703_good_no_sync_on_all_but_the_last(real: RankSummary) -> None:
    n = real.num_steps
    ranks = _ranks(real, 2, ddp_forwards=[4 * n] * 2, ddp_sync_rounds=[n] * 2, optimizer_steps=[n] * 2)
    assert "GP703" not in _codes(ranks)


def test_gp704_bad_many_small_all_reduces(real: RankSummary) -> None:
    many = 20
    ranks = _ranks(real, 2, inst_type=[[0] * many * real.num_steps] * 2, inst_dur=[[30.0] * many * real.num_steps] * 2,
                   inst_bytes=[[4096] * many * real.num_steps] * 2, inst_group=[[2] * many * real.num_steps] * 2,
                   inst_step=[[i // many for i in range(many * real.num_steps)]] * 2,
                   inst_start=[[100.0 * i for i in range(many * real.num_steps)]] * 2)
    msg = _codes(ranks)["GP704"]
    assert msg.startswith("20 collectives per step are under 1.0 MiB")


def test_gp704_good_the_real_buckets(real: RankSummary) -> None:
    # the real job: 5 all-reduces of 8-32 MB and 2 small broadcasts per step
    assert "GP704" not in _codes(_ranks(real, 2))


def test_gp704_option_small_bytes_is_honoured(real: RankSummary) -> None:
    _, found = cross_rank(_ranks(real, 2), parse_option_overrides(["GP704.small_bytes=1000000000", "GP704.min_per_step=3"]))
    assert any(f.code == "GP704" for f in found)


def test_gp705_bad_search_every_step(real: RankSummary) -> None:
    n = real.num_steps
    ranks = _ranks(real, 2, unused_searches=[n] * 2, unused_search_us=[150.0, 250.0])
    msg = _codes(ranks)["GP705"]
    assert "1.0 times per step" in msg and "200 µs per step" in msg  # the median of the two ranks


def test_gp705_good_flag_off(real: RankSummary) -> None:
    assert "GP705" not in _codes(_ranks(real, 2))  # the real job: no search recorded


# ------------------------------------------------------------------------------ registry


def test_every_cross_rank_rule_is_documented_with_bad_and_good_tests() -> None:
    names = {n.name for n in ast.walk(ast.parse(Path(__file__).read_text())) if isinstance(n, ast.FunctionDef)}
    docs = (HERE.parents[1] / "docs" / "distributed.md").read_text()
    for rule in all_cross_rank_rules():
        assert re.fullmatch(r"GP7\d\d", rule.code)
        code = rule.code.lower()
        for kind in ("bad", "good"):
            assert any(n.startswith(f"test_{code}_{kind}") for n in names), (rule.code, kind)
        assert rule.bad_example.strip() != rule.good_example.strip() and len(rule.doc()) > 40
        assert lookup(rule.code)[0].name == rule.name
        assert f"### {rule.code} {rule.name}" in docs
        res = CliRunner().invoke(cli, ["explain", rule.code])
        assert res.exit_code == 0 and rule.title in res.output


def test_a_cross_rank_rule_that_raises_is_a_rule_error(real: RankSummary, monkeypatch: pytest.MonkeyPatch) -> None:
    rule = all_cross_rank_rules()[0]

    def boom(self: CrossRankRule, job: object, opts: object) -> None:
        raise RuntimeError("injected")

    monkeypatch.setattr(rule, "check", boom)
    with pytest.raises(RuleError, match=rule.code):
        cross_rank(_ranks(real, 2))
    failures: list = []
    monkeypatch.delenv("GPUPROF_STRICT_RULES", raising=False)
    cross_rank(_ranks(real, 2), failures=failures)
    assert [c for c, _ in failures] == [rule.code]


def test_cross_rank_json_keys_match_the_doc_table(real: RankSummary) -> None:
    import json

    from gpuprof.render.jsonout import json_safe

    job, _ = cross_rank(_ranks(real, 2))
    doc = (HERE.parents[1] / "docs" / "distributed.md").read_text().split("## The `cross_rank` report section", 1)[1]
    documented = set(re.findall(r"^\| `([^`]+)` \|", doc, re.M))
    out = json.loads(json.dumps(json_safe({"kind": job.kind, **job.to_dict()})))
    found = set(out) | {f"{k}[].{sub}" for k in ("ranks", "collectives") for row in out[k] for sub in row}
    assert found == documented

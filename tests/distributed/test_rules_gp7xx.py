"""The GP7xx cross-rank rules: bad/good cases on rank summaries derived from a real 2-rank NCCL trace."""

from __future__ import annotations

import ast
import gzip
import json
import re
import statistics
from pathlib import Path

import msgspec
import pytest
from click.testing import CliRunner

from gpuprof.analysis import analyze
from gpuprof.cli import cli
from gpuprof.codes import lookup, parse_option_overrides
from gpuprof.distributed.analysis import cross_rank
from gpuprof.distributed.rules import CrossRankRule, all_cross_rank_rules
from gpuprof.distributed.summary import RankSummary, summarize
from gpuprof.errors import RuleError
from gpuprof.report import Report
from gpuprof.trace.load import load_trace
from gpuprof.trace.metrics import compute_metrics
from gpuprof_testing.realtraces import shared_path

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


def _first_of_each_step(base: RankSummary) -> list[int]:
    return [i for i, k in enumerate(base.inst_step) if i == 0 or base.inst_step[i - 1] != k]


def _more_data_loading(base: RankSummary, us: float, at: list[int]) -> list[list[float]]:
    """The rank's arrival gaps with ``us`` more data loading before the instances ``at``."""
    dl = 0  # PHASE_KEYS[0]
    return [[v + (us if i in at and j == dl else 0.0) for j, v in enumerate(g)] for i, g in enumerate(base.inst_gap)]


def test_gp701_bad_one_rank_loads_data_slowly_and_three_wait(real: RankSummary) -> None:
    # ranks 0-2 spend 3x longer in every collective (waiting); rank 3 loads 20 ms more data at each step's start
    firsts = _first_of_each_step(real)
    ranks = _ranks(real, 4, inst_dur=[_stretched(real, 3)] * 3 + [list(real.inst_dur)],
                   inst_gap=[list(real.inst_gap)] * 3 + [_more_data_loading(real, 20_000.0, firsts)])
    job, found = cross_rank(ranks)
    assert job.stragglers == [3] and job.straggler_cause == "data_loading"
    assert job.arrivals.phases["data_loading"] == pytest.approx(20_000.0)
    gp701 = next(f for f in found if f.code == "GP701")
    assert "straggler: rank 3 of 4" in gp701.message and "data loading +20.0 ms" in gp701.message
    # the others' waits: the opening 2/3 of each stretched collective, counted once where collectives overlap
    # on the rank's streams (so somewhat less than their sum), never more
    waits = [2 * d for d in real.inst_dur]
    assert 0.85 * sum(waits) / real.num_steps <= gp701.cost_us_per_step
    assert gp701.cost_us_per_step <= sum(waits) / real.num_steps + 1
    assert job.arrivals.last_at_per_step >= len(real.inst_type) / real.num_steps - 1  # a tiny broadcast: within noise


def test_gp701_what_if_a_second_late_rank_holds_the_collectives(real: RankSummary) -> None:
    # ranks 0-1 wait 2x each collective's transfer, rank 2 (itself late) only 1x, rank 3 is the straggler: with
    # rank 3's delay removed each collective waits for rank 2, so it ends 1x the transfer sooner, not the
    # others' median 2x (the rule's cost)
    firsts = _first_of_each_step(real)
    ranks = _ranks(real, 4, inst_dur=[_stretched(real, 3)] * 2 + [_stretched(real, 2), list(real.inst_dur)],
                   inst_gap=[list(real.inst_gap)] * 3 + [_more_data_loading(real, 20_000.0, firsts)])
    job, found = cross_rank(ranks)
    assert job.stragglers == [3]
    gp701 = next(f for f in found if f.code == "GP701")
    # independent: per step, the sum of rank 2's waits (1x the transfer) at the collectives; the mean over steps
    per_step: dict[int, float] = {}
    for d, k in zip(real.inst_dur, real.inst_step):
        per_step[k] = per_step.get(k, 0.0) + d
    expected = statistics.mean(per_step.values())
    assert gp701.what_if_saving_us == pytest.approx(expected, rel=0.15)
    assert gp701.what_if_saving_us < 0.75 * gp701.cost_us_per_step  # about half the others' median wait
    assert gp701.what_if_note is not None and "another rank arrives late too" in gp701.what_if_note


def test_gp701_good_late_only_before_the_recording(real: RankSummary) -> None:
    # rank 3 is last only at the first collective of the trace, with no longer gap than the others: it entered
    # the recorded step late. No straggler; the wait is said to come from before the recording.
    durs = list(real.inst_dur)
    ranks = _ranks(real, 4, inst_dur=[[d + (30_000.0 if i == 0 else 0.0) for i, d in enumerate(durs)]] * 3 + [durs])
    job, found = cross_rank(ranks)
    assert "GP701" not in {f.code for f in found} and job.stragglers == []
    assert job.arrivals.before_step_ranks == [3]
    assert job.arrivals.before_step_us == pytest.approx(30_000.0 / real.num_steps)
    assert any("entered the recorded step late" in n and "not in these traces" in n for n in job.notes)


def test_gp701_good_ranks_taking_turns_are_noise(real: RankSummary) -> None:
    # every step a different rank is last (a busy shared host): no one is named
    n = real.num_steps
    durs = [list(real.inst_dur) for _ in range(4)]
    for i, k in enumerate(real.inst_step):
        for r in range(4):
            if r != k % 4:
                durs[r][i] += 20_000.0
    assert "GP701" not in _codes(_ranks(real, 4, inst_dur=durs)) and n >= 2


def test_gp701_good_identical_ranks(real: RankSummary) -> None:
    assert "GP701" not in _codes(_ranks(real, 4))


def test_gp701_good_a_majority_of_slow_ranks_is_not_a_straggler(real: RankSummary) -> None:
    ranks = _ranks(real, 4, inst_dur=[_stretched(real, 3)] + [list(real.inst_dur)] * 3)
    assert "GP701" not in _codes(ranks)


def test_gp702_bad_exposed_transfers(real: RankSummary) -> None:
    # every collective 5x longer on both ranks (transfer, not waiting: nobody is faster) and fully exposed
    long = _stretched(real, 5)
    ranks = _ranks(real, 2, inst_dur=[long] * 2, inst_exposed=[long] * 2,
                   exposed_comm_us=[sum(long) / real.num_steps] * 2, comm_us=[sum(long) / real.num_steps] * 2)
    job, found = cross_rank(ranks)
    gp702 = next(f for f in found if f.code == "GP702")
    assert gp702.cost_us_per_step == pytest.approx(min(sum(long) / real.num_steps, real.step_us), rel=1e-6)
    assert gp702.cost_share is not None and gp702.cost_share <= 1


def test_gp702_good_waiting_is_not_transfer(real: RankSummary) -> None:
    # rank 0 spends 5x longer in every collective, all exposed; rank 1 is fast: the extra is waiting (GP701's)
    long = _stretched(real, 5)
    ranks = _ranks(real, 2, inst_dur=[long, list(real.inst_dur)], inst_exposed=[long, list(real.inst_dur)],
                   exposed_comm_us=[sum(long) / real.num_steps, real.comm_us], comm_us=[sum(long) / real.num_steps,
                                                                                       real.comm_us])
    job, found = cross_rank(ranks)
    assert job.exposed_transfer_us <= sum(real.inst_dur) / real.num_steps + 1e-6
    assert "GP702" not in {f.code for f in found}


def test_gp702_good_overlapped_communication(real: RankSummary) -> None:
    ranks = _ranks(real, 2, inst_exposed=[[0.0] * len(real.inst_type)] * 2)
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


def _watched(base: RankSummary, data_ms: list[float], n: int = 50) -> list[RankSummary]:
    from gpuprof.distributed.summary import RankSeries

    series = [RankSeries(bucket=1, first_step=list(range(n)), step_us=[100_000.0 + (i % 3) * 900 for i in range(n)],
                         data_wait_us=[d * 1000 + (i % 5) * 100 for i in range(n)]) for d in data_ms]
    return [msgspec.structs.replace(s, series=series[r]) for r, s in enumerate(_ranks(base, len(data_ms)))]


def test_gp707_bad_rank_2_waits_15ms_more_for_data_every_step(real: RankSummary) -> None:
    found = _codes(_watched(real, [1.0, 1.0, 16.0, 1.0]))
    assert "GP707" in found and "rank 2 of 4" in found["GP707"] and "50 of 50 common steps" in found["GP707"]


def test_gp707_good_the_same_data_wait_on_every_rank(real: RankSummary) -> None:
    assert "GP707" not in _codes(_watched(real, [6.0, 6.0, 6.0, 6.0]))
    assert "GP707" not in _codes(_ranks(real, 2))  # no series (not watched, or an older gpuprof): silent


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


def test_gp701_bad_eight_ranks_two_late_at_the_last_collectives_one_late_before_the_step(real: RankSummary) -> None:
    """The issue's 8-rank case on the real A100 trace's collectives: ranks 5 and 6 arrive last at the last three
    collectives of every step (their backward runs longer: compute), rank 2 entered the recorded step late (only
    the first collective of the trace waits for it). The straggler is who the others wait for at the last
    collectives, checked against the test's own reading of the raw kernel events."""
    import gzip
    import json

    raw = json.loads(gzip.open(shared_path("hta", "HolisticTraceAnalysis", "tests", "data", "nccl_parser_config",
                                           "nccl_data.json.gz")).read())["traceEvents"]
    steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in raw if str(e.get("name", "")).startswith("ProfilerStep#"))
    nccl = sorted((e["ts"], e["dur"]) for e in raw if e.get("cat") == "kernel" and e["name"].startswith("nccl"))
    per_step = [[i for i, (ts, _d) in enumerate(nccl) if a <= ts <= b] for a, b in steps]
    late = {i for ids in per_step for i in ids[-3:]}  # the last three collectives of each step, by the raw events
    assert len(late) == 3 * len(steps) and len(nccl) == len(real.inst_type)
    wait_us = 5000.0  # 15 ms per step: above the floor (5% of the real 222 ms step)
    durs, gaps = [], []
    for r in range(8):
        d = list(real.inst_dur)
        g = [list(x) for x in real.inst_gap]
        for i in range(len(d)):
            if i in late and r not in (5, 6):
                d[i] += wait_us  # the others wait for ranks 5 and 6
            if i in late and r in (5, 6):
                g[i][1] += wait_us  # ... whose compute before those collectives is longer
            if i == 0 and r != 2:
                d[i] += 30_000.0  # the first collective waits for rank 2, late before the recording began
        durs.append(d)
        gaps.append(g)
    job, found = cross_rank(_ranks(real, 8, inst_dur=durs, inst_gap=gaps))
    # the test's own answer: at each late collective, the ranks with the shortest duration arrived last
    last_by_raw = {r for i in late for r in range(8) if durs[r][i] == min(durs[k][i] for k in range(8))}
    assert job.stragglers == sorted(last_by_raw) == [5, 6]
    gp701 = next(f for f in found if f.code == "GP701")
    assert "straggler: ranks 5, 6 of 8" in gp701.message and "compute +15.0 ms" in gp701.message
    assert gp701.cost_us_per_step == pytest.approx(3 * wait_us, rel=0.01)  # 3 collectives x 5 ms per step
    assert job.arrivals.before_step_ranks == [2] and 2 not in job.stragglers
    assert "entered the recorded step late" in gp701.message or any("entered the recorded step late" in n
                                                                     for n in job.notes)
    assert gp701.cost_share is not None and gp701.cost_share <= 1


# --------------------------------------------------------------------------- GP706 late-ranks
HTA = ("hta", "HolisticTraceAnalysis", "tests", "data")
PAIR = [("timeline_analysis", "sampled_rank-0.json.gz"), ("trace_filter", "sampled_rank-1.json.gz")]


def _section(report: Report):  # type: ignore[no-untyped-def]
    return next(s for s in report.sections if getattr(s, "kind", "") == "cross_rank")


def _one_step(tmp_path: Path) -> list[str]:
    """The real pair cut to its first recorded step: every event before each rank's second ProfilerStep."""
    out = []
    for folder, name in PAIR:
        with gzip.open(shared_path(*HTA, folder, name), "rt") as fh:
            doc = json.load(fh)
        starts = sorted(e["ts"] for e in doc["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#"))
        doc["traceEvents"] = [e for e in doc["traceEvents"] if "ts" not in e or e["ts"] < starts[1]]
        path = tmp_path / name.replace(".gz", "")
        path.write_text(json.dumps(doc))
        out.append(str(path))
    return out


def test_gp706_bad_real_pair_two_recorded_steps() -> None:
    report = analyze([str(shared_path(*HTA, f, n)) for f, n in PAIR])
    arr = _section(report).arrivals
    (f,) = [f for f in report.findings if f.code == "GP706"]
    assert "GP701" not in {x.code for x in report.findings}
    assert f.severity.value == "info" and f.cost_us_per_step is None
    # one answer: the ranks and waits are the cross-rank table's, most waited-for first
    late = sorted((r for r, w in arr.in_step_us.items() if w >= arr.floor_us), key=lambda r: -arr.in_step_us[r])
    assert late == [1, 0] and f.evidence[0].value == "1,0"
    assert f.evidence[1].extra["per_rank_us"] == {str(r): round(arr.in_step_us[r], 1) for r in late}
    assert "the 2 recorded steps" in f.message and "may be a one-off" in f.message and "GP701" in f.message
    assert "active=5" in f.advice


def test_gp706_bad_real_pair_cut_to_one_step(tmp_path: Path) -> None:
    report = analyze(_one_step(tmp_path))
    assert [t.num_steps for t in report.traces] == [1, 1]
    (f,) = [f for f in report.findings if f.code == "GP706"]
    arr = _section(report).arrivals
    assert arr.steps == 1 and "the one recorded step" in f.message and "With 1 step " in f.message
    named = [int(r) for r in str(f.evidence[0].value).split(",")]
    assert named and all(arr.in_step_us[r] >= arr.floor_us for r in named)


def test_gp706_good_more_steps_than_max_steps() -> None:
    report = analyze([str(shared_path(*HTA, f, n)) for f, n in PAIR], options={"GP706": {"max_steps": 1}})
    assert "GP706" not in {f.code for f in report.findings}


def test_gp706_good_a_straggler_gp701_names_is_not_repeated(real: RankSummary) -> None:
    # ranks 0-2 wait 2x every collective of every step for rank 3: GP701's straggler, GP706 silent
    ranks = [msgspec.structs.replace(real, rank=r, path=f"rank{r}", world_size=4,
                                     inst_dur=[d * (3 if r < 3 else 1) for d in real.inst_dur]) for r in range(4)]
    job, found = cross_rank(ranks, {"GP706": {"max_steps": 10}})
    assert job.stragglers == [3] and "GP701" in {f.code for f in found} and "GP706" not in {f.code for f in found}


def test_gp706_good_identical_ranks(real: RankSummary) -> None:
    ranks = [msgspec.structs.replace(real, rank=r, path=f"rank{r}", world_size=2) for r in range(2)]
    _, found = cross_rank(ranks, {"GP706": {"max_steps": 10}})
    assert "GP706" not in {f.code for f in found}

"""The one finding flow (gpuprof.flow, gpuprof.runner): one runner, one failure policy, one severity policy,
one step denominator, one filter boundary, links as data."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from gpuprof.analysis import analyze
from gpuprof.codespec import severity_for_cost
from gpuprof.errors import RuleError
from gpuprof.findings import Evidence, Finding, Severity
from gpuprof.flow import finish
from gpuprof.runner import RuleUnit, Selection, run_rules
from gpuprof_testing.realtraces import shared_path, v100_samples
from gpuprof_testing.tracegen import TraceBuilder

PKG = Path(__file__).resolve().parents[1] / "gpuprof"


def _f(code: str = "GP201", sev: Severity = Severity.WARNING, share: float | None = 0.2, **kw: object) -> Finding:
    cost = None if share is None else share * 1000.0
    return Finding(code, "x", sev, "m", "a", cost_us_per_step=cost, cost_share=share, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(("chosen", "share", "limit", "want"), [
    (Severity.INFO, 0.387, 0.01, Severity.WARNING),     # a third of the step is never info
    (Severity.INFO, 0.011, 0.01, Severity.WARNING),
    (Severity.WARNING, 0.009, 0.01, Severity.INFO),
    (Severity.ERROR, 0.5, 0.01, Severity.ERROR),        # an error stays one
    (Severity.ERROR, 0.001, 0.01, Severity.INFO),
    (Severity.WARNING, 0.02, 0.03, Severity.INFO),      # a rule's own info_below_share (GP203: 3%)
    (Severity.INFO, None, 0.01, Severity.INFO),         # no cost: the rule's choice
    (Severity.ERROR, None, 0.01, Severity.ERROR),
])
def test_severity_follows_cost_by_one_policy(chosen: Severity, share: float | None, limit: float, want: Severity) -> None:
    assert severity_for_cost(_f(sev=chosen, share=share), {"info_below_share": limit}).severity is want


def _unit(code: str, found: list[Finding] | Exception) -> RuleUnit:
    def check() -> list[Finding]:
        if isinstance(found, Exception):
            raise found
        return found
    return RuleUnit(code, {"info_below_share": 0.01}, check)


def _half_then_raise() -> object:
    yield _f("GP301")
    raise ValueError("halfway")


def test_one_failure_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUPROF_STRICT_RULES", raising=False)
    units = [_unit("GP101", [_f("GP101", Severity.INFO, 0.5)]), _unit("GP201", KeyError("boom")),
             RuleUnit("GP301", {}, _half_then_raise), _unit("GP401", [_f("GP401")])]  # type: ignore[arg-type]
    # no failures list: every rule runs, then one RuleError names every rule that raised
    with pytest.raises(RuleError) as err:
        run_rules(units, "t.json")
    assert err.value.codes == ["GP201", "GP301"]
    # with one: the others' findings, none of a rule that raised halfway, the failures handed back
    failures: list[tuple[str, BaseException]] = []
    found = run_rules(units, "t.json", failures)
    assert [f.code for f in found] == ["GP101", "GP401"] and [c for c, _ in failures] == ["GP201", "GP301"]
    assert found[0].severity is Severity.WARNING  # severity follows cost in the runner
    # strict mode (the test suite) raises even with a list
    monkeypatch.setenv("GPUPROF_STRICT_RULES", "1")
    with pytest.raises(RuleError):
        run_rules(units, "t.json", [])


def test_selection_and_the_one_filter_boundary() -> None:
    sel = Selection.of(["GP2", " "], ["GP203"])
    assert sel.wants("GP201") and not sel.wants("GP203") and not sel.wants("GP101")
    assert Selection().wants("GP999")
    kept = finish([_f("GP101"), _f("GP203"), _f("GP201", share=0.3)], sel)
    assert [f.code for f in kept] == ["GP201"]


def test_select_and_ignore_are_applied_in_one_place_only() -> None:
    """The package filters findings by --select/--ignore in gpuprof.flow.finish and chooses rules in
    gpuprof.runner; nowhere else (there were 9 places in 6 files)."""
    users = set()
    for path in PKG.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                if name == "code_matches":
                    users.add(str(path.relative_to(PKG)))
    assert users <= {"runner.py", "findings.py"}, users


def test_a_cost_is_never_above_the_step_it_is_a_share_of(tmp_path: Path) -> None:
    from gpuprof.distributed.merge import CrossRank
    from gpuprof.distributed.rules import ExposedCommunication
    from gpuprof.rules.base import Rule, RuleContext
    from gpuprof.trace.load import load_trace
    from gpuprof.trace.metrics import compute_metrics

    tb = TraceBuilder()
    for _ in range(3):
        with tb.step():
            tb.gemm(us=1000)
    trace = load_trace(tb.write(tmp_path / "t.json"))
    m = compute_metrics(trace)

    class Probe(Rule):
        code = "GP999"

    f = Probe().finding(RuleContext(trace, m, {}), "too much", "fix", cost_us_per_step=2.5 * m.mean_step_time,
                        cost_label="probe")
    assert f.cost_us_per_step == pytest.approx(m.mean_step_time) and f.cost_share == pytest.approx(1.0)
    (ev,) = [e for e in f.evidence if e.metric == "cost_measured_us_per_step"]
    assert ev.value == pytest.approx(2.5 * m.mean_step_time, abs=0.1)
    job = CrossRank(world_size=2, backend="nccl", ranks=[], collectives=[])
    object.__setattr__(job, "summaries", [])
    g = ExposedCommunication().finding(job, "comm", "fix", cost_us=5.0, cost_label="x")
    assert g.cost_share is None  # no step to be a share of: no share, never a made-up one


@pytest.mark.slow  # slow pass: a real trace (or job) analysed whole; the README's fast command stays under 300 CPU s on a 2-core VM
def test_real_traces_severity_follows_cost_and_no_share_above_one() -> None:
    paths = [*v100_samples(), shared_path("hta", "HolisticTraceAnalysis", "tests", "data", "critical_path",
                                          "alexnet", "benchmark_result_2869224_1695835535_trace.json.gz")]
    from gpuprof.codes import get_spec

    seen = 0
    for p in paths:
        for f in analyze(p).findings:
            if f.cost_share is None:
                continue
            seen += 1
            assert 0.0 <= f.cost_share <= 1.0 + 1e-9, (p.name, f.code, f.cost_share)
            spec = get_spec(f.code)
            assert spec is not None
            limit = next(o.default for o in spec.options if o.name == "info_below_share")
            assert (f.severity is Severity.INFO) == (f.cost_share < limit), (p.name, f.code, f.cost_share, f.severity)
    assert seen >= 8


def test_links_are_fields_and_cost_counted_in_is_linked() -> None:
    f = _f("GP202", evidence=(Evidence("cost_counted_in", "GP201", None, ""),))
    g = _f("GP702", evidence=(Evidence("exposed", 1.0, extra={"cost_counted_in": "GP701"}),))
    out = {x.code: x for x in finish([f, g])}
    assert [(k.kind, k.code) for k in out["GP202"].links] == [("cost_counted_in", "GP201")]
    assert [(k.kind, k.code) for k in out["GP702"].links] == [("cost_counted_in", "GP701")]
    assert finish(finish([f, g])) == finish([f, g])  # finishing twice changes nothing

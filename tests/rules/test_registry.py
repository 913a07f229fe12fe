"""Every registered rule is a complete, self-documenting unit with a bad and a good test."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpuprof.analysis import analyze
from gpuprof.cli import cli
from gpuprof.codespec import Option
from gpuprof.errors import EXIT_INTERNAL, RuleError
from gpuprof.render.format import findings_total
from gpuprof.rules.base import all_rules, get_rule
from gpuprof.runner import STRICT_ENV
from gpuprof_testing import realtraces
from gpuprof_testing.tracegen import TraceBuilder, simple_training

HERE = Path(__file__).parent
REPO = HERE.parents[1]


def _test_names() -> set[str]:
    names = set()
    for f in HERE.glob("test_*.py"):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test_"):
                names.add(node.name)
    return names


def test_every_rule_has_a_bad_and_a_good_fixture():
    names = _test_names()
    missing = []
    for rule in all_rules():
        code = rule.code.lower()
        for kind in ("bad", "good"):
            if not any(n == f"test_{code}_{kind}" or n.startswith(f"test_{code}_{kind}_") for n in names):
                missing.append(f"test_{code}_{kind}")
    assert not missing, f"rules without fixtures: {missing}"


def test_rules_are_documented_with_stable_codes_and_options():
    rules = all_rules()
    assert len(rules) >= 15, [r.code for r in rules]
    seen_names = set()
    for rule in rules:
        assert re.fullmatch(r"GP[1-9]\d\d", rule.code), rule.code
        assert re.fullmatch(r"[a-z0-9-]+", rule.name), rule.name
        assert rule.name not in seen_names
        seen_names.add(rule.name)
        assert rule.title and len(rule.doc()) > 40
        assert rule.bad_example.strip() and rule.good_example.strip()
        assert rule.bad_example.strip() != rule.good_example.strip()
        for opt in rule.options:
            assert isinstance(opt, Option) and opt.help
            assert opt.parse(str(opt.default)) == opt.default


# --------------------------------------------------------------------------- a rule that raises


def _raising(code: str):
    def check(self, ctx):
        raise RuntimeError(f"injected failure of {code}")
        yield  # a generator, like most rules

    return check


@pytest.fixture(scope="module")
def small_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return simple_training(TraceBuilder(), steps=4).write(tmp_path_factory.mktemp("reg") / "t.json")


@pytest.mark.parametrize("code", [r.code for r in all_rules()])
def test_a_rule_that_raises_is_exit_3_naming_its_code(code: str, small_trace: Path, monkeypatch: pytest.MonkeyPatch):
    rule = get_rule(code)
    assert rule is not None
    monkeypatch.setattr(rule, "check", _raising(code))
    # the library, not strict: every other rule still runs, then RuleError names the one that failed
    monkeypatch.delenv(STRICT_ENV, raising=False)
    with pytest.raises(RuleError) as ei:
        analyze(small_trace)
    assert ei.value.codes == [code] and ei.value.exit_code == EXIT_INTERNAL
    assert code in str(ei.value) and str(small_trace) in str(ei.value) and "\n" not in str(ei.value)
    assert isinstance(ei.value.__cause__, RuntimeError)
    # collecting (the capture side): the report says which rule failed, never a clean "No findings."
    failures: list = []
    report = analyze(small_trace, failures=failures)
    assert [c for c, _ in failures] == [code] and report.failed_rules == [code]
    assert any(code in n and "incomplete" in n for n in report.traces[0].notes)
    assert "incomplete" in findings_total(report) and code in findings_total(report)
    # the command line: exit 3, one line naming the code and the trace, no traceback
    result = CliRunner().invoke(cli, ["analyze", str(small_trace)])
    assert result.exit_code == EXIT_INTERNAL, result.output
    err = result.stderr.strip()
    assert len(err.splitlines()) == 1 and code in err and str(small_trace) in err and "Traceback" not in err
    assert result.stdout == ""  # no report that could be read as complete


def test_rule_traceback_only_under_gpuprof_debug(small_trace: Path, monkeypatch: pytest.MonkeyPatch):
    rule = all_rules()[0]
    monkeypatch.setattr(rule, "check", _raising(rule.code))
    monkeypatch.setenv("GPUPROF_DEBUG", "1")
    result = CliRunner().invoke(cli, ["analyze", str(small_trace)])
    assert result.exit_code == EXIT_INTERNAL
    assert f"traceback of rule {rule.code}" in result.stderr and "Traceback (most recent call last)" in result.stderr
    assert f"injected failure of {rule.code}" in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("gpuprof: error: ")


def test_strict_mode_raises_even_where_failures_are_collected(small_trace: Path, monkeypatch: pytest.MonkeyPatch):
    # the suite's conftest sets GPUPROF_STRICT_RULES: a crashing rule fails tests that use the capture path too
    rule = all_rules()[-1]
    monkeypatch.setattr(rule, "check", _raising(rule.code))
    assert os.environ.get(STRICT_ENV) == "1"
    with pytest.raises(RuleError) as ei:
        analyze(small_trace, failures=[])
    assert ei.value.codes == [rule.code]


_GOOD_TEST = re.compile(r"def (test_gp\d+_good\w*)\(")

_RAISE_EVERY_RULE = '''
import pytest

@pytest.fixture(autouse=True)
def _raise_every_rule(monkeypatch):
    from gpuprof.rules.base import all_rules

    def check(self, ctx):
        raise RuntimeError("injected failure of " + self.code)

    for r in all_rules():
        monkeypatch.setattr(r, "check", check)
'''


def _outcomes(junit: Path) -> dict[str, str]:
    """Test function name -> "passed", "failed" or "skipped: <reason>", from a pytest JUnit XML report."""
    out: dict[str, str] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = case.get("name", "").split("[", 1)[0]
        skipped = case.find("skipped")
        if skipped is not None:
            out[name] = "skipped: " + (skipped.get("message") or "")
        elif case.find("failure") is not None or case.find("error") is not None:
            out[name] = "failed"
        else:
            out[name] = "passed"
    return out


@pytest.mark.slow
def test_no_good_rule_test_passes_when_every_rule_raises(tmp_path: Path):
    """The issue's count: 23 of the 27 "good" tests used to pass with every rule raising.

    Only the tests that ran are counted: without the real traces (a fresh clone, GPUPROF_SHARED_TRACES
    elsewhere) the good tests that read them skip, for that reason and no other."""
    goods = sorted({m.group(1) for f in HERE.glob("test_*.py") for m in _GOOD_TEST.finditer(f.read_text())})
    assert len(goods) >= 27
    (tmp_path / "raise_every_rule.py").write_text(_RAISE_EVERY_RULE)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO), os.environ.get("PYTHONPATH", "")])}
    env.pop(STRICT_ENV, None)  # not even the strict mode: the library's own default must fail them
    junit = tmp_path / "junit.xml"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "raise_every_rule",
         f"--junitxml={junit}", str(HERE), "-k", " or ".join(goods)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
    )
    outcomes = _outcomes(junit)
    assert sorted(outcomes) == goods, proc.stdout[-3000:]  # every good test was collected
    passed = [n for n, o in outcomes.items() if o == "passed"]
    assert passed == [], f"good tests that pass although every rule raises: {passed}"
    skipped = {n: o for n, o in outcomes.items() if o.startswith("skipped")}
    # a skip is only for want of the real data: any other skip would hide a good test from this check
    assert all(realtraces.ENV in o or "real data" in o for o in skipped.values()), skipped
    if realtraces.available():
        assert not skipped, skipped
    ran = [n for n, o in outcomes.items() if o == "failed"]
    assert sorted(ran) == sorted(set(goods) - set(skipped)), proc.stdout[-3000:]
    assert len(ran) >= 20, outcomes  # the synthetic ones run everywhere

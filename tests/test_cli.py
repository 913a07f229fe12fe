"""The analyze/rules/explain commands: exit codes, filtering, output files, errors as one line."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from gpuprof.cli import cli
from gpuprof.rules.base import all_rules
from gpuprof_testing.realtraces import shared_path

NW0 = ("tbplugin", "samples", "resnet50_num_workers_0", "worker0.1623143566756.pt.trace.json.gz")


def run(*args: str):
    return CliRunner().invoke(cli, list(args))


def test_exit_codes_follow_fail_on():
    path = str(shared_path(*NW0))
    full = json.loads(run("analyze", path, "--format", "json").stdout)
    sev = {f["severity"] for f in full["findings"]}
    assert "warning" in sev  # the sample has warnings
    assert run("analyze", path, "--format", "json", "--fail-on", "warning").exit_code == 1
    expect_error = 1 if "error" in sev else 0
    assert run("analyze", path, "--format", "json", "--fail-on", "error").exit_code == expect_error


def test_fail_on_never_reports_without_failing():
    """--fail-on never: the same report, exit 0 although warnings remain (the sample shipped with the repo)."""
    gated = run("analyze", "examples/sample_trace", "--format", "json")
    assert gated.exit_code == 1 and json.loads(gated.stdout)["findings"]
    never = run("analyze", "examples/sample_trace", "--format", "json", "--fail-on", "never")
    assert never.exit_code == 0
    assert json.loads(never.stdout)["findings"] == json.loads(gated.stdout)["findings"]
    assert run("analyze", "examples/sample_trace", "--fail-on", "sometimes").exit_code == 2


def test_select_and_ignore_filter_codes():
    path = str(shared_path(*NW0))
    only = json.loads(run("analyze", path, "--format", "json", "--select", "GP102").stdout)
    assert {f["code"] for f in only["findings"]} == {"GP102"}
    rest = json.loads(run("analyze", path, "--format", "json", "--ignore", "GP1").stdout)
    assert rest["findings"] and all(not f["code"].startswith("GP1") for f in rest["findings"])


def test_output_file_and_markdown(tmp_path):
    path = str(shared_path(*NW0))
    out = tmp_path / "r.md"
    res = run("analyze", path, "--format", "markdown", "-o", str(out))
    assert res.exit_code == 1
    text = out.read_text()
    assert "GP102" in text and res.stdout == ""


def test_json_schema_version_and_sorting():
    path = str(shared_path(*NW0))
    d = json.loads(run("analyze", path, "--format", "json").stdout)
    assert d["schema_version"].startswith("1.")
    costs = [f["cost_us_per_step"] for f in d["findings"] if f["cost_us_per_step"] is not None]
    assert costs == sorted(costs, reverse=True)


def test_rule_option_override_changes_result():
    path = str(shared_path(*NW0))
    base = {f["code"] for f in json.loads(run("analyze", path, "--format", "json").stdout)["findings"]}
    assert "GP102" in base
    raised = run("analyze", path, "--format", "json", "--option", "GP102.min_share=0.99")
    assert "GP102" not in {f["code"] for f in json.loads(raised.stdout)["findings"]}


@pytest.mark.parametrize(
    "option",
    ["GP102.nope=1", "GP999.x=1", "GP102.min_share=abc", "garbage"],
)
def test_bad_rule_option_is_a_usage_error(option):
    path = str(shared_path(*NW0))
    res = run("analyze", path, "--option", option)
    assert res.exit_code == 2
    assert "Traceback" not in res.output


def test_missing_file_one_line_exit_2(tmp_path):
    res = run("analyze", str(tmp_path / "nope.json"))
    assert res.exit_code == 2
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "nope.json" in lines[0] and "no such file" in lines[0]


def test_rules_lists_every_rule_and_explain_each():
    listing = run("rules", "--format", "markdown")
    assert listing.exit_code == 0
    for rule in all_rules():
        assert rule.code in listing.stdout
        res = run("explain", rule.code)
        assert res.exit_code == 0 and rule.name in res.stdout and "Triggers it:" in res.stdout
    bad = run("explain", "GP000")
    assert bad.exit_code == 2 and "unknown code" in bad.output


def test_rules_and_explain_cover_memory_and_runtime_codes():
    """Every code a report can print is listed and explained, not only the trace rules'."""
    from gpuprof.memory.analysis import CODES
    from gpuprof.runtimecodes import RUNTIME_CHECKS

    listing = run("rules", "--format", "markdown").stdout
    others = list(CODES) + [c.code for c in RUNTIME_CHECKS]
    assert len(others) >= 20
    for code in others:
        row = next((ln for ln in listing.splitlines() if ln.startswith(f"| {code} |")), None)
        assert row is not None, code
        res = run("explain", code)
        assert res.exit_code == 0, (code, res.output)
        # the long form from docs/ (this is a source checkout), not the pointer to it
        assert "not found beside this installation" not in res.stdout, code
        assert len(res.stdout) > 200, (code, res.stdout)
    assert "`num_workers=0`" in run("explain", "GP601").stdout
    assert "largest_free_block" in run("explain", "GP511").stdout
    # names are unique now: GP641's former name "out-of-memory" is GP512's name; explain says both
    amb = run("explain", "out-of-memory")
    assert amb.exit_code == 0 and amb.stdout.startswith("GP512 out-of-memory")
    assert "GP641" in amb.stderr and "former name" in amb.stderr
    assert run("explain", "tf32-disabled").exit_code == 0

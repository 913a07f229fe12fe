"""``gpuprof analyze report.json``: a saved report rendered again, read-only."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gpuprof.cli import cli
from gpuprof_testing.realtraces import v100_samples


def run(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args))


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    trace = str(v100_samples()[0])
    out = tmp_path_factory.mktemp("r") / "report.json"
    res = run("analyze", trace, "--format", "json", "-o", str(out))
    assert res.exit_code == 1  # warnings at the default --fail-on bar
    return trace, out


@pytest.mark.slow  # slow pass: a real trace (or job) analysed whole; the README's fast command stays under 300 CPU s on a 2-core VM
@pytest.mark.parametrize("fmt", ["terminal", "markdown", "json"])
def test_rerender_matches_the_live_analysis(saved: tuple[str, Path], fmt: str) -> None:
    trace, report = saved
    before = report.read_bytes()
    live, again = run("analyze", trace, "--format", fmt), run("analyze", str(report), "--format", fmt)
    assert again.exit_code == live.exit_code == 1
    if fmt == "json":
        assert json.loads(again.output) == json.loads(live.output)
    else:
        assert again.output == live.output
    assert report.read_bytes() == before  # read-only


def test_filters_and_fail_on_apply(saved: tuple[str, Path]) -> None:
    _, report = saved
    res = run("analyze", str(report), "--format", "json", "--select", "GP102", "--fail-on", "error")
    assert res.exit_code == 0
    assert [f["code"] for f in json.loads(res.output)["findings"]] == ["GP102"]


def test_unknown_schema_version_is_exit_2_naming_file_and_version(saved: tuple[str, Path], tmp_path: Path) -> None:
    doc = json.loads(saved[1].read_text())
    doc["schema_version"] = "9.3"
    bad = tmp_path / "future.json"
    bad.write_text(json.dumps(doc))
    res = run("analyze", str(bad))
    assert res.exit_code == 2
    line = res.output.strip()
    assert "\n" not in line and str(bad) in line and "'9.3'" in line
    assert run("analyze", str(bad), "--annotate", str(tmp_path / "x.json.gz")).exit_code == 2


def test_malformed_report_is_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "broken.json"
    bad.write_text('{"schema_version": "1.2", "traces": [{"path": 3, "num_steps": "many"}], "findings": []}')
    res = run("analyze", str(bad))
    assert res.exit_code == 2 and str(bad) in res.output and "malformed report" in res.output


def test_saved_multi_rank_report_keeps_its_sections(tmp_path: Path) -> None:
    from gpuprof_testing.tracegen import TraceBuilder, write_ranks

    def body(tb: TraceBuilder, rank: int) -> None:
        for _ in range(3):
            with tb.step():
                tb.kernel("volta_sgemm_128x64_nn", us=1000)
                tb.cpu(us=200)

    write_ranks(tmp_path, 2, body)
    out = tmp_path / "job.json"
    assert run("analyze", str(tmp_path), "--format", "json", "-o", str(out), "-j", "1").exit_code in (0, 1)
    saved = json.loads(out.read_text())
    again = run("analyze", str(out), "--format", "json")
    assert json.loads(again.output)["sections"] == saved["sections"] and {s["kind"] for s in saved["sections"]} >= {"cross_rank"}
    text = run("analyze", str(out))
    assert text.exit_code == again.exit_code and "section 'cross_rank (saved)' cannot be shown" in text.output

"""``gpuprof export``: the files re-read (csv module, pyarrow) equal the JSON report's views, steps and findings.

The expected rows are read straight from the report's JSON (``Report.to_dict()``), independently of the
exporter's row builders, on the shipped sample trace and the real V100 samples (several traces: the
``trace`` column tells them apart).
"""

from __future__ import annotations

import csv
import json
import math
import os
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gpuprof.cli import cli
from gpuprof.export.tables import TABLES
from gpuprof.trace.viewrows import KernelRow, OperatorRow, RangeRow
from gpuprof_testing.realtraces import v100_samples

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "examples" / "sample_trace"
VIEW_TABLES = ("operators", "kernels", "modules", "ranges")


def run(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args))


def _report(src: Path | str, tmp: Path) -> dict[str, Any]:
    out = tmp / "report.json"
    res = run("analyze", str(src), "--format", "json", "-o", str(out), "--fail-on", "never")
    assert res.exit_code == 0, res.output
    doc: dict[str, Any] = json.loads(out.read_text())
    return doc


def expected(doc: dict[str, Any], table: str) -> list[dict[str, Any]]:
    """The rows the report's JSON holds for ``table``, keyed by column name (lists as JSON text)."""
    rows: list[dict[str, Any]] = []
    if table == "findings":
        for f in doc["findings"]:
            loc = f.get("location") or {}
            rows.append({"code": f["code"], "name": f["name"], "severity": f["severity"], "message": f["message"],
                         "cost_us_per_step": f.get("cost_us_per_step"), "cost_share": f.get("cost_share"),
                         "location_file": loc.get("file"), "location_line": loc.get("line"),
                         "location_function": loc.get("function"), "origin": f.get("origin"),
                         "trace": f.get("source")})
        return rows
    for t in doc["traces"]:
        where = {"trace": t["path"], "rank": t["rank"]}
        if table == "steps":
            rows += [{**where, "step": i, "step_id": t["step_ids"][i], "step_time_us": us}
                     for i, us in enumerate(t["step_times_us"])]
        else:
            for r in t["views"][table]:
                rows.append({**where, **{k: json.dumps(v) if isinstance(v, list) else v for k, v in r.items()}})
    return rows


def _csv_value(cell: str, want: Any) -> Any:
    """A CSV cell read back as the type of the JSON value it should equal."""
    if want is None:
        return None if cell == "" else cell
    if isinstance(want, bool):
        return {"true": True, "false": False}.get(cell, cell)
    if isinstance(want, int):
        return int(cell)
    if isinstance(want, float):
        return float(cell)
    return cell


def check_csv(out: Path, doc: dict[str, Any]) -> None:
    for table in TABLES:
        want = expected(doc, table.name)
        with open(out / f"{table.name}.csv", newline="", encoding="utf-8") as fh:
            got = list(csv.DictReader(fh))
        assert len(got) == len(want), table.name
        for g, w in zip(got, want):
            assert set(g) == {c.name for c in table.columns}
            for k, v in w.items():
                if isinstance(v, str) and v[:1] in ("=", "+", "-", "@"):
                    v = "'" + v
                assert _csv_value(g[k], v) == v, (table.name, k)


def check_arrow(tables: dict[str, Any], doc: dict[str, Any]) -> None:
    for table in TABLES:
        want = expected(doc, table.name)
        got = tables[table.name].to_pylist()
        assert len(got) == len(want), table.name
        for g, w in zip(got, want):
            for k, v in w.items():
                gv = g[k]
                if isinstance(v, int) and not isinstance(v, bool) and isinstance(gv, float):
                    v = float(v)  # a float column whose JSON value happened to be a whole number
                assert gv == v, (table.name, k)


def test_sample_trace_csv_equals_the_report(tmp_path: Path) -> None:
    doc = _report(SAMPLE, tmp_path)
    res = run("export", str(SAMPLE), "-o", str(tmp_path / "out"))
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(f"{t.name}.csv" for t in TABLES)
    assert len(expected(doc, "operators")) > 10 and len(expected(doc, "steps")) == doc["traces"][0]["num_steps"]
    check_csv(tmp_path / "out", doc)


def test_saved_report_exports_the_same_rows(tmp_path: Path) -> None:
    doc = _report(SAMPLE, tmp_path)
    assert run("export", str(tmp_path / "report.json"), "-o", str(tmp_path / "a")).exit_code == 0
    assert run("export", str(SAMPLE), "-o", str(tmp_path / "b")).exit_code == 0
    for t in TABLES:
        assert (tmp_path / "a" / f"{t.name}.csv").read_bytes() == (tmp_path / "b" / f"{t.name}.csv").read_bytes()
    check_csv(tmp_path / "a", doc)


def test_sample_trace_parquet_and_arrow_equal_the_report(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    import pyarrow.ipc as ipc
    import pyarrow.parquet as pq

    doc = _report(SAMPLE, tmp_path)
    assert run("export", str(tmp_path / "report.json"), "--format", "parquet", "-o", str(tmp_path / "p")).exit_code == 0
    assert run("export", str(tmp_path / "report.json"), "--format", "arrow", "-o", str(tmp_path / "a")).exit_code == 0
    check_arrow({t.name: pq.read_table(tmp_path / "p" / f"{t.name}.parquet") for t in TABLES}, doc)
    arrow = {t.name: ipc.open_file(pa.OSFile(str(tmp_path / "a" / f"{t.name}.arrow"))).read_all() for t in TABLES}
    check_arrow(arrow, doc)
    schema = arrow["operators"].schema
    assert schema.field("calls").type == pa.int64() and schema.field("gpu_total_us").metadata == {b"unit": b"us"}


@pytest.mark.slow
def test_v100_samples_every_format_equals_the_report(tmp_path: Path) -> None:
    """Two traces of one run: one file per table, the rows of both, told apart by ``trace``."""
    pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    run_dir = v100_samples()[0].parent
    doc = _report(run_dir, tmp_path)
    assert len(doc["traces"]) == 2 and all(t["views"]["kernels"] for t in doc["traces"])
    assert run("export", str(tmp_path / "report.json"), "-o", str(tmp_path / "c")).exit_code == 0
    check_csv(tmp_path / "c", doc)
    assert run("export", str(tmp_path / "report.json"), "--format", "parquet", "-o", str(tmp_path / "p")).exit_code == 0
    tables = {t.name: pq.read_table(tmp_path / "p" / f"{t.name}.parquet") for t in TABLES}
    check_arrow(tables, doc)
    kernels = tables["kernels"].to_pylist()
    assert {k["trace"] for k in kernels} == {t["path"] for t in doc["traces"]}
    # an independent sum: every kernel row's time over both traces equals the views' kernel totals
    # up to the rows past MAX_ROWS (views.rest)
    for t in doc["traces"]:
        rest = t["views"]["rest"].get("kernels", {}).get("total_us", 0.0)
        got = sum(k["total_us"] for k in kernels if k["trace"] == t["path"])
        assert math.isclose(got + rest, t["views"]["kernel_total_us"], rel_tol=1e-9)


def test_every_view_field_is_a_column() -> None:
    """A field added to a view row must reach its table (or this test names it)."""
    by_name = {t.name: {c.name for c in t.columns} for t in TABLES}
    for table, row in (("operators", OperatorRow), ("kernels", KernelRow), ("modules", RangeRow), ("ranges", RangeRow)):
        assert {f.name for f in fields(row)} | {"trace", "rank"} == by_name[table]


def test_docs_list_every_column() -> None:
    text = (REPO / "docs" / "export.md").read_text(encoding="utf-8")
    for table in TABLES:
        assert f"### {table.name}" in text or f"### modules and {table.name}" in text, table.name
        for col in table.columns:
            assert f"| `{col.name}` | {col.type} |" in text, (table.name, col.name)


def test_parquet_without_pyarrow_is_one_line_naming_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import gpuprof.export.write as write

    monkeypatch.setattr(write, "have_pyarrow", lambda: False)
    res = run("export", str(SAMPLE), "--format", "parquet", "-o", str(tmp_path / "o"))
    assert res.exit_code == 2 and "gpuprof[export]" in res.output
    assert len(res.output.strip().splitlines()) == 1 and not (tmp_path / "o").exists()


def test_export_is_listed_with_help() -> None:
    assert "export" in run("--help").output
    res = run("export", "--help")
    assert res.exit_code == 0 and "parquet" in res.output and "Exit codes" in res.output


def test_csv_export_and_history_import_neither_torch_nor_pyarrow(tmp_path: Path) -> None:
    """The analyze path's promise holds for the new commands: torch never, pyarrow only for parquet/arrow."""
    import subprocess
    import sys

    script = ("import atexit, json, sys\n"
              "atexit.register(lambda: open(sys.argv[1], 'w').write(json.dumps(sorted(sys.modules))))\n"
              "from gpuprof.cli import main\nmain(sys.argv[2:])\n")
    for args in (["export", str(SAMPLE), "-o", str(tmp_path / "out")], ["history", str(REPO / "examples")]):
        out = tmp_path / "modules.json"
        proc = subprocess.run([sys.executable, "-c", script, str(out), *args], cwd=REPO, capture_output=True,
                              text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
        assert proc.returncode in (0, 2), proc.stderr  # history of a folder without reports: exit 2, one line
        mods = set(json.loads(out.read_text()))
        assert "gpuprof.cli" in mods and not {"torch", "pyarrow"} & mods, args
    assert (tmp_path / "out" / "operators.csv").is_file()

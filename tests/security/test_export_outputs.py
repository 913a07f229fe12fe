"""Hostile names and output paths for ``gpuprof export``: CSV injection neutralised, links and odd files refused.

Names come from the trace (operators, kernels, ranges are whatever the profiled program called them) or
from a saved report anyone could have written; the output directory may sit in a shared logdir.
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gpuprof.cli import cli
from gpuprof.export.tables import TABLE_NAMES

HOSTILE = [
    "=cmd|' /C calc'!A0",
    "+1+cmd|' /C calc'!A0",
    "-2+3",
    "@SUM(1+1)*cmd|' /C calc'!A0",
    "\t=1+1",
    "\r=1+1",
    'a,b "quoted", and\nnewline',
    "plain::name",
    "ünïcødé ✓",
]


def run(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args))


def _range(name: str) -> dict[str, Any]:
    return {"name": name, "calls": 1, "cpu_total_us": 1.0, "gpu_self_us": 0.0, "gpu_total_us": -0.0}


def _saved(tmp_path: Path, names: list[str], **trace: Any) -> Path:
    views = {"version": 1, "kernel_total_us": 0.0, "unattributed_gpu_us": 0.0, "peak_device": None,
             "operators": [{"name": n, "input_shapes": n, "calls": 2, "cpu_total_us": 3.5, "cpu_self_us": 1.5,
                            "gpu_self_us": 0.0, "gpu_total_us": 0.0, "stacks": [n], "flops": None,
                            "flops_source": None, "tflops": None} for n in names],
             "kernels": [], "modules": [_range(n) for n in names], "ranges": [_range(n) for n in names], "rest": {}}
    doc = {"schema_version": "1.2", "inputs": [], "sections": [], "notes": [],
           "traces": [{"path": names[0], "rank": 0, "num_steps": 2, "step_ids": [1, 2], "step_times_us": [10.0, 11.5],
                       "step_time_us": 10.75, "step_time_mean_us": 10.75, "gpu_busy_us": 0.0, "gpu_utilization": None,
                       "breakdown_us": {}, "idle_breakdown_us": {}, "views": views, **trace}],
           "findings": [{"code": "GP102", "name": n, "severity": "warning", "message": n, "advice": n,
                         "location": {"file": n, "line": 3, "function": n}, "source": n} for n in names]}
    p = tmp_path / "report.json"
    p.write_text(json.dumps(doc))
    return p


def _guarded(v: str) -> str:
    return "'" + v if v[:1] in ("=", "+", "-", "@", "\t", "\r") else v


def test_csv_cells_that_start_a_formula_get_a_quote_and_all_names_survive(tmp_path: Path) -> None:
    res = run("export", str(_saved(tmp_path, HOSTILE)), "-o", str(tmp_path / "out"))
    assert res.exit_code == 0, res.output
    with open(tmp_path / "out" / "operators.csv", newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["name"] for r in rows] == [_guarded(n) for n in HOSTILE]
    assert [r["input_shapes"] for r in rows] == [_guarded(n) for n in HOSTILE]
    assert [r["trace"] for r in rows] == [_guarded(HOSTILE[0])] * len(HOSTILE)
    assert {r["cpu_self_us"] for r in rows} == {"1.5"}  # a number is never prefixed (a saved report holds no negative time: validation)
    for table, col in (("modules", "name"), ("ranges", "name"), ("findings", "message"), ("findings", "location_file")):
        with open(tmp_path / "out" / f"{table}.csv", newline="", encoding="utf-8") as fh:
            assert [r[col] for r in csv.DictReader(fh)] == [_guarded(n) for n in HOSTILE], (table, col)
    # no cell of any file starts a formula
    for name in TABLE_NAMES:
        with open(tmp_path / "out" / f"{name}.csv", newline="", encoding="utf-8") as fh:
            for row in csv.reader(fh):
                for cell in row:
                    assert not cell.startswith(("=", "+", "@", "\t", "\r")), (name, cell)
                    assert not cell.startswith("-") or cell.lstrip("-").replace(".", "", 1).isdigit(), (name, cell)


def test_parquet_keeps_hostile_names_unchanged(tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    assert run("export", str(_saved(tmp_path, HOSTILE)), "--format", "parquet", "-o", str(tmp_path / "p")).exit_code == 0
    assert pq.read_table(tmp_path / "p" / "operators.parquet").column("name").to_pylist() == HOSTILE
    assert pq.read_table(tmp_path / "p" / "operators.parquet").column("stacks").to_pylist() == \
        [json.dumps([n], ensure_ascii=False) for n in HOSTILE]


def test_output_dir_that_is_a_symlink_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir()
    link = tmp_path / "out"
    link.symlink_to(target)
    res = run("export", str(_saved(tmp_path, ["a"])), "-o", str(link))
    assert res.exit_code == 2 and "symlink" in res.output and len(res.output.strip().splitlines()) == 1
    assert list(target.iterdir()) == []


def test_output_dir_that_is_a_file_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "out"
    f.write_text("keep")
    res = run("export", str(_saved(tmp_path, ["a"])), "-o", str(f))
    assert res.exit_code == 2 and "not a directory" in res.output and len(res.output.strip().splitlines()) == 1
    assert f.read_text() == "keep"


@pytest.mark.parametrize("kind", ["symlink", "fifo", "directory"])
def test_an_existing_entry_that_is_not_a_regular_file_is_not_replaced(tmp_path: Path, kind: str) -> None:
    if kind == "fifo" and not hasattr(os, "mkfifo"):
        pytest.skip("needs FIFOs")
    out = tmp_path / "out"
    out.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("secret")
    entry = out / "kernels.csv"
    if kind == "symlink":
        entry.symlink_to(victim)
    elif kind == "fifo":
        os.mkfifo(entry)  # writing through it would block forever
    else:
        entry.mkdir()
    res = run("export", str(_saved(tmp_path, ["a"])), "-o", str(out))
    assert res.exit_code == 2 and "kernels.csv" in res.output and len(res.output.strip().splitlines()) == 1
    assert victim.read_text() == "secret"
    assert entry.is_symlink() if kind == "symlink" else (os.path.lexists(entry) and not entry.is_file())
    assert sorted(p.name for p in out.iterdir()) == ["kernels.csv"]  # refused before anything was written


def test_existing_regular_files_are_replaced_and_nothing_is_left_behind(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "steps.csv").write_text("old")
    assert run("export", str(_saved(tmp_path, ["a"])), "-o", str(out)).exit_code == 0
    assert (out / "steps.csv").read_text().startswith("trace,rank,step,")
    assert sorted(p.name for p in out.iterdir()) == sorted(f"{n}.csv" for n in TABLE_NAMES)  # no temporary file


@pytest.mark.parametrize("bad", [
    {"calls": "12"}, {"cpu_total_us": float("nan")}, {"cpu_total_us": "1.0"}, {"calls": True}, {"stacks": "x"}, {"stacks": [{"a": 1}]},
    {"cpu_total_us": 10 ** 400},
])
def test_a_malformed_saved_report_is_one_line_and_writes_nothing(tmp_path: Path, bad: dict[str, Any]) -> None:
    p = _saved(tmp_path, ["a"])
    doc = json.loads(p.read_text())
    doc["traces"][0]["views"]["operators"][0].update(bad)
    p.write_text(json.dumps(doc))
    res = run("export", str(p), "-o", str(tmp_path / "out"))
    assert res.exit_code == 2, res.output
    assert str(p) in res.output and "malformed report" in res.output and len(res.output.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_an_input_that_is_not_there_is_one_line(tmp_path: Path) -> None:
    res = run("export", str(tmp_path / "missing.json"), "-o", str(tmp_path / "out"))
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1 and not (tmp_path / "out").exists()

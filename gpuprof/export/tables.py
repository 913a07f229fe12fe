"""The exported tables: their columns (name, type, unit) and one row builder per table.

Every builder reads the report as the saved-report reader types it (:class:`~gpuprof.saved.SavedReport`, from
``Report.to_dict()`` or a saved report.json), never the trace model: a saved report exports the same rows as the
analysis that wrote it. A saved file is outside data: the reader checked every value's type and range (a
:class:`~gpuprof.saved.ReportProblem` names the field), so the cells are laid out as they are, for every format.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

import msgspec
from msgspec import UNSET

from gpuprof.saved.check import saved_report
from gpuprof.saved.types import Location, SavedReport, SavedTrace, given

__all__ = ["Column", "Table", "TABLES", "TABLE_NAMES", "Cell", "build_tables"]

ColType = Literal["string", "int", "float", "bool", "json"]  # json: a list, written as its JSON text
Cell = str | int | float | bool | None


@dataclass(frozen=True)
class Column:
    name: str
    type: ColType
    unit: str = ""  # "us", "fraction", "flop", "TFLOP/s", "" (none)


@dataclass(frozen=True)
class Table:
    name: str
    columns: tuple[Column, ...]
    rows: Callable[[SavedReport], Iterable[dict[str, Any]]]  # the report -> raw rows (keys: column names)


_WHERE = (Column("trace", "string"), Column("rank", "int"))  # which trace a row belongs to: every table but findings

_RANGE = (Column("name", "string"), Column("calls", "int"), Column("cpu_total_us", "float", "us"),
          Column("gpu_self_us", "float", "us"), Column("gpu_total_us", "float", "us"),
          Column("mfu", "float", "fraction"), Column("known_flops_share", "float", "fraction"),
          Column("peak_precision", "string"), Column("reference_mfu", "float", "fraction"))


def _where(t: SavedTrace) -> dict[str, Any]:
    return {"trace": t.path, "rank": t.rank}


def _step_rows(report: SavedReport) -> Iterable[dict[str, Any]]:
    for t in report.traces:
        for i, us in enumerate(t.step_times_us):
            # step_ids has one id per analysed step; a report that lacks them still has the times
            yield {**_where(t), "step": i, "step_id": t.step_ids[i] if i < len(t.step_ids) else None, "step_time_us": us}


def _view_rows(view: str) -> Callable[[SavedReport], Iterable[dict[str, Any]]]:
    def rows(report: SavedReport) -> Iterable[dict[str, Any]]:
        for t in report.traces:
            if t.views is not None:  # a report of schema 1.0/1.1 has none
                yield from ({**_where(t), **msgspec.structs.asdict(r)} for r in getattr(t.views, view))
    return rows


def _finding_rows(report: SavedReport) -> Iterable[dict[str, Any]]:
    for f in report.findings:
        loc = f.location or Location(file="")
        yield {"code": f.code, "name": given(f.name), "severity": None if f.severity is UNSET else f.severity,
               "message": given(f.message), "cost_us_per_step": f.cost_us_per_step, "cost_share": f.cost_share,
               "location_file": loc.file or None, "location_line": loc.line,
               "location_function": loc.function, "origin": given(f.origin), "trace": f.source}


TABLES: tuple[Table, ...] = (
    Table("steps", (*_WHERE, Column("step", "int"), Column("step_id", "int"), Column("step_time_us", "float", "us")),
          _step_rows),
    Table("operators", (*_WHERE, Column("name", "string"), Column("input_shapes", "string"), Column("calls", "int"),
                        Column("cpu_total_us", "float", "us"), Column("cpu_self_us", "float", "us"),
                        Column("gpu_self_us", "float", "us"), Column("gpu_total_us", "float", "us"),
                        Column("stacks", "json"), Column("flops", "float", "flop"), Column("flops_source", "string"),
                        Column("tflops", "float", "TFLOP/s")), _view_rows("operators")),
    Table("kernels", (*_WHERE, Column("name", "string"), Column("calls", "int"), Column("total_us", "float", "us"),
                      Column("mean_us", "float", "us"), Column("max_us", "float", "us"), Column("tensor_cores", "bool"),
                      Column("op_dtype", "string"), Column("precision", "string"), Column("flops", "float", "flop"),
                      Column("flops_source", "string"), Column("tflops", "float", "TFLOP/s"),
                      Column("mfu", "float", "fraction"), Column("grid", "json"), Column("block", "json"),
                      Column("registers_per_thread", "int"), Column("occupancy", "float", "fraction"),
                      Column("reference_mfu", "float", "fraction")), _view_rows("kernels")),
    Table("modules", (*_WHERE, *_RANGE), _view_rows("modules")),
    Table("ranges", (*_WHERE, *_RANGE), _view_rows("ranges")),
    Table("findings", (Column("code", "string"), Column("name", "string"), Column("severity", "string"),
                       Column("message", "string"), Column("cost_us_per_step", "float", "us"),
                       Column("cost_share", "float", "fraction"), Column("location_file", "string"),
                       Column("location_line", "int"), Column("location_function", "string"),
                       Column("origin", "string"), Column("trace", "string")), _finding_rows),
)
TABLE_NAMES = tuple(t.name for t in TABLES)


def _cell(value: Any, col: Column) -> Cell:
    """``value`` (of its column's type: the reader checked it) as the writers lay it out."""
    if value is None:
        return None
    if col.type == "json":  # a list of plain values, kept as its JSON text so every format holds the same cell
        return json.dumps(value, ensure_ascii=False, allow_nan=False)
    return float(value) if col.type == "float" else value


def build_tables(doc: dict[str, Any] | SavedReport) -> dict[str, list[tuple[Cell, ...]]]:
    """Every table's rows, in column order (:class:`~gpuprof.saved.ReportProblem` for a value of ``doc`` that does
    not fit the schema)."""
    report = doc if isinstance(doc, SavedReport) else saved_report(doc)
    return {table.name: [tuple(_cell(raw.get(c.name), c) for c in table.columns) for raw in table.rows(report)]
            for table in TABLES}

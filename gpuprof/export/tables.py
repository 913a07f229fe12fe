"""The exported tables: their columns (name, type, unit) and one row builder per table.

Every builder reads the report's JSON form (``Report.to_dict()``, or a saved
report.json read back by :mod:`gpuprof.reportfile`), never the trace model:
a saved report exports the same rows as the analysis that wrote it. A saved
file is outside data, so every cell is checked against its column's type
here (:class:`TableError` names the table, row and column), once, for every
format; the writers only lay the checked cells out.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["Column", "Table", "TABLES", "TABLE_NAMES", "TableError", "Cell", "build_tables"]

ColType = Literal["string", "int", "float", "bool", "json"]  # json: a list, written as its JSON text
Cell = str | int | float | bool | None


class TableError(ValueError):
    """A value of the report that does not fit its column (a malformed saved report)."""


@dataclass(frozen=True)
class Column:
    name: str
    type: ColType
    unit: str = ""  # "us", "fraction", "flop", "TFLOP/s", "" (none)


@dataclass(frozen=True)
class Table:
    name: str
    columns: tuple[Column, ...]
    rows: Callable[[dict[str, Any]], Iterable[dict[str, Any]]]  # the report's JSON -> raw rows (keys: column names)


_WHERE = (Column("trace", "string"), Column("rank", "int"))  # which trace a row belongs to: every table but findings

_RANGE = (
    Column("name", "string"),
    Column("calls", "int"),
    Column("cpu_total_us", "float", "us"),
    Column("gpu_self_us", "float", "us"),
    Column("gpu_total_us", "float", "us"),
    Column("mfu", "float", "fraction"),
    Column("known_flops_share", "float", "fraction"),
    Column("peak_precision", "string"),
    Column("reference_mfu", "float", "fraction"),
)


def _traces(doc: dict[str, Any]) -> list[dict[str, Any]]:
    traces = doc.get("traces", [])
    return [t for t in traces if isinstance(t, dict)]


def _where(t: dict[str, Any]) -> dict[str, Any]:
    return {"trace": t.get("path"), "rank": t.get("rank")}


def _step_rows(doc: dict[str, Any]) -> Iterable[dict[str, Any]]:
    for t in _traces(doc):
        times = t.get("step_times_us") or []
        ids = t.get("step_ids") or []
        if not isinstance(times, list) or not isinstance(ids, list):
            raise TableError("steps: step_times_us or step_ids is not a list")
        for i, us in enumerate(times):
            # step_ids has one id per analysed step; a report that lacks them still has the times
            yield {**_where(t), "step": i, "step_id": ids[i] if i < len(ids) else None, "step_time_us": us}


def _view_rows(view: str) -> Callable[[dict[str, Any]], Iterable[dict[str, Any]]]:
    def rows(doc: dict[str, Any]) -> Iterable[dict[str, Any]]:
        for t in _traces(doc):
            views = t.get("views")
            if views is None:  # a report of schema 1.0/1.1: no views
                continue
            if not isinstance(views, dict) or not isinstance(views.get(view, []), list):
                raise TableError(f"{view}: traces[].views.{view} is not a list")
            for r in views.get(view, []):
                if not isinstance(r, dict):
                    raise TableError(f"{view}: a row is not an object")
                yield {**_where(t), **r}
    return rows


def _finding_rows(doc: dict[str, Any]) -> Iterable[dict[str, Any]]:
    for f in doc.get("findings", []):
        if not isinstance(f, dict):
            raise TableError("findings: a finding is not an object")
        loc = f.get("location")
        loc = loc if isinstance(loc, dict) else {}
        yield {
            "code": f.get("code"), "name": f.get("name"), "severity": f.get("severity"),
            "message": f.get("message"), "cost_us_per_step": f.get("cost_us_per_step"),
            "cost_share": f.get("cost_share"), "location_file": loc.get("file"),
            "location_line": loc.get("line"), "location_function": loc.get("function"),
            "origin": f.get("origin"), "trace": f.get("source"),
        }


TABLES: tuple[Table, ...] = (
    Table("steps", (*_WHERE, Column("step", "int"), Column("step_id", "int"), Column("step_time_us", "float", "us")),
          _step_rows),
    Table("operators", (
        *_WHERE, Column("name", "string"), Column("input_shapes", "string"), Column("calls", "int"),
        Column("cpu_total_us", "float", "us"), Column("cpu_self_us", "float", "us"),
        Column("gpu_self_us", "float", "us"), Column("gpu_total_us", "float", "us"), Column("stacks", "json"),
        Column("flops", "float", "flop"), Column("flops_source", "string"), Column("tflops", "float", "TFLOP/s"),
    ), _view_rows("operators")),
    Table("kernels", (
        *_WHERE, Column("name", "string"), Column("calls", "int"), Column("total_us", "float", "us"),
        Column("mean_us", "float", "us"), Column("max_us", "float", "us"), Column("tensor_cores", "bool"),
        Column("op_dtype", "string"), Column("precision", "string"), Column("flops", "float", "flop"),
        Column("flops_source", "string"), Column("tflops", "float", "TFLOP/s"), Column("mfu", "float", "fraction"),
        Column("grid", "json"), Column("block", "json"), Column("registers_per_thread", "int"),
        Column("occupancy", "float", "fraction"), Column("reference_mfu", "float", "fraction"),
    ), _view_rows("kernels")),
    Table("modules", (*_WHERE, *_RANGE), _view_rows("modules")),
    Table("ranges", (*_WHERE, *_RANGE), _view_rows("ranges")),
    Table("findings", (
        Column("code", "string"), Column("name", "string"), Column("severity", "string"),
        Column("message", "string"), Column("cost_us_per_step", "float", "us"),
        Column("cost_share", "float", "fraction"), Column("location_file", "string"),
        Column("location_line", "int"), Column("location_function", "string"), Column("origin", "string"),
        Column("trace", "string"),
    ), _finding_rows),
)
TABLE_NAMES = tuple(t.name for t in TABLES)


def _cell(value: Any, col: Column, where: str) -> Cell:
    """``value`` checked against ``col`` (None stays None: every column may be empty)."""
    if value is None:
        return None
    ok: bool
    if col.type == "string":
        ok = isinstance(value, str)
    elif col.type == "int":
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif col.type == "float":
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) < 2**1023:
            value = float(value)
        ok = isinstance(value, float) and math.isfinite(value)
    elif col.type == "bool":
        ok = isinstance(value, bool)
    else:  # json: a list of plain values, kept as its JSON text so every format holds the same cell
        ok = isinstance(value, list) and all(isinstance(v, (str, int, float)) and not isinstance(v, bool)
                                             for v in value)
        if ok:
            return json.dumps(value, ensure_ascii=False, allow_nan=False)
    if not ok:
        raise TableError(f"{where}: {col.name} is {type(value).__name__}, not {col.type}")
    return value  # type: ignore[no-any-return]


def build_tables(doc: dict[str, Any]) -> dict[str, list[tuple[Cell, ...]]]:
    """Every table's rows, in column order, each cell checked (:class:`TableError` for one that does not fit)."""
    out: dict[str, list[tuple[Cell, ...]]] = {}
    for table in TABLES:
        rows: list[tuple[Cell, ...]] = []
        for i, raw in enumerate(table.rows(doc)):
            where = f"{table.name} row {i + 1}"
            rows.append(tuple(_cell(raw.get(c.name), c, where) for c in table.columns))
        out[table.name] = rows
    return out

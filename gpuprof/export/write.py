"""Writing the exported tables: one file per table, CSV (stdlib) or Parquet/Arrow (pyarrow, optional).

The output directory is created when absent; one that is a symlink or not a
directory is refused (:class:`~gpuprof.errors.InputError`, exit 2), so an
export never writes through a link planted in a shared logdir. Each file is
written beside its final name and moved into place (:mod:`gpuprof.atomic`):
an interrupted export leaves the previous file whole, and an existing entry
that is not a regular file (a FIFO, a directory, a symlink) is refused, never
replaced or written through.

CSV cells that a spreadsheet would run as a formula (text starting with
``=``, ``+``, ``-``, ``@``, tab or carriage return) get a leading ``'``, as
OWASP advises for CSV injection; numbers are written as numbers. Parquet and
Arrow keep every cell as it is: their readers evaluate nothing.
"""

from __future__ import annotations

import csv
import io
import os
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from gpuprof.errors import InputError
from gpuprof.export.tables import TABLES, Cell, Column, Table

__all__ = ["FORMATS", "SUFFIX", "PYARROW_HINT", "have_pyarrow", "prepare_dir", "write_tables", "csv_text"]

FORMATS = ("csv", "parquet", "arrow")
SUFFIX = {"csv": ".csv", "parquet": ".parquet", "arrow": ".arrow"}
PYARROW_HINT = "needs pyarrow: pip install 'gpuprof[export]' (or use --format csv)"
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def have_pyarrow() -> bool:
    import importlib.util

    return importlib.util.find_spec("pyarrow") is not None


def prepare_dir(path: str) -> Path:
    """The output directory, created when absent; a symlink or a non-directory is an InputError."""
    p = Path(path)
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        try:
            p.mkdir(parents=True)
        except OSError as err:
            raise InputError(path, f"cannot create the output directory: {err.strerror or err}") from None
        return p
    except OSError as err:
        raise InputError.from_os_error(path, err) from None
    if stat.S_ISLNK(st.st_mode):
        raise InputError(path, "is a symlink; give the output directory itself")
    if not stat.S_ISDIR(st.st_mode):
        raise InputError(path, "exists and is not a directory")
    return p


def _safe_text(value: Cell) -> Cell:
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value


def csv_text(table: Table, rows: Iterable[tuple[Cell, ...]]) -> str:
    """The table as CSV (RFC 4180 quoting, ``\\r\\n`` rows): a header, then one line per row; empty cells for None."""
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow([c.name for c in table.columns])
    for row in rows:
        w.writerow(["" if v is None else ("true" if v is True else "false" if v is False else _safe_text(v))
                    for v in row])
    return buf.getvalue()


def _arrow_type(pa: Any, col: Column) -> Any:
    return {"string": pa.string(), "json": pa.string(), "int": pa.int64(), "float": pa.float64(),
            "bool": pa.bool_()}[col.type]


def _arrow_table(pa: Any, table: Table, rows: list[tuple[Cell, ...]]) -> Any:
    schema = pa.schema([pa.field(c.name, _arrow_type(pa, c), nullable=True,
                                 metadata={"unit": c.unit} if c.unit else None) for c in table.columns])
    columns = [pa.array([r[i] for r in rows], type=schema.field(i).type) for i in range(len(table.columns))]
    return pa.Table.from_arrays(columns, schema=schema)


def _write_arrow(fmt: str, table: Table, rows: list[tuple[Cell, ...]], path: Path) -> None:
    """``rows`` as a Parquet file or an Arrow IPC file (Feather v2) at ``path``."""
    import pyarrow as pa

    data = _arrow_table(pa, table, rows)
    if fmt == "parquet":
        import pyarrow.parquet as pq

        pq.write_table(data, path)
        return
    import pyarrow.ipc as ipc

    with pa.OSFile(str(path), "wb") as sink, ipc.new_file(sink, data.schema) as writer:
        writer.write_table(data)


def _check_target(target: Path) -> None:
    """An existing entry at ``target`` must be a regular file: anything else is refused, not replaced."""
    try:
        st = os.lstat(target)
    except FileNotFoundError:
        return
    except OSError as err:
        raise InputError.from_os_error(target, err) from None
    if not stat.S_ISREG(st.st_mode):
        raise InputError(target, "exists and is not a regular file; not replaced")


def write_tables(out_dir: Path, fmt: str, tables: dict[str, list[tuple[Cell, ...]]],
                 inputs: Iterable[str] = ()) -> list[Path]:
    """Write every table to ``out_dir/NAME.SUFFIX``; the paths written, in table order."""
    from gpuprof.atomic import atomic_path, refuse_input_as_output, write_output

    targets = [out_dir / f"{t.name}{SUFFIX[fmt]}" for t in TABLES]
    srcs = list(inputs)
    for target in targets:  # every check before the first write: a refused export writes nothing
        _check_target(target)
        refuse_input_as_output(target, srcs)
    if fmt != "csv" and not have_pyarrow():
        raise InputError(f"--format {fmt}", PYARROW_HINT)
    for table, target in zip(TABLES, targets):
        rows = tables[table.name]
        if fmt == "csv":
            write_output(target, csv_text(table, rows), f"the {table.name} table")
            continue
        try:
            with atomic_path(target) as tmp:
                _write_arrow(fmt, table, rows, tmp)
        except OSError as err:
            raise InputError(target, f"cannot write the {table.name} table: {err.strerror or err}") from None
    return targets

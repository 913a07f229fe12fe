"""``gpuprof export``'s library path: a run's tables written as files (docs/export.md)."""

from __future__ import annotations

from pathlib import Path

from gpuprof.errors import InputError, UsageError

__all__ = ["export_tables"]


def export_tables(source: str, fmt: str, out_dir: str, jobs: int | None) -> tuple[list[Path], dict[str, int]]:
    """``gpuprof export``'s work (the command line's and the MCP server's one path): the files written and
    each table's row count. A format that needs pyarrow without it is a :class:`UsageError`, before any trace is read."""
    from gpuprof.commands.diff import load_side
    from gpuprof.export.tables import build_tables
    from gpuprof.export.write import PYARROW_HINT, have_pyarrow, prepare_dir, write_tables
    from gpuprof.pool import affinity_cpus
    from gpuprof.saved.check import ReportProblem

    if fmt != "csv" and not have_pyarrow():  # before any trace is read
        raise UsageError(f"--format {fmt} {PYARROW_HINT}")
    doc = load_side(source, jobs or affinity_cpus())
    try:
        tables = build_tables(doc)
    except ReportProblem as err:
        raise InputError(source, f"malformed report: {err.field} {err.problem}") from None
    directory = prepare_dir(out_dir)
    inputs = [source] + [str(t.get("path")) for t in doc.get("traces", []) if isinstance(t, dict)]
    written = write_tables(directory, fmt, tables, inputs)
    return list(written), {name: len(rows) for name, rows in tables.items()}

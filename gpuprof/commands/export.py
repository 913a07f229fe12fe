"""``gpuprof export``'s library path: a run's tables written as files (docs/export.md)."""

from __future__ import annotations

from pathlib import Path

from gpuprof.errors import UsageError

__all__ = ["export_tables"]


def export_tables(source: str, fmt: str, out_dir: str, jobs: int | None) -> tuple[list[Path], dict[str, int]]:
    """``gpuprof export``'s work (the command line's and the MCP server's one path): the files written and
    each table's row count. A format that needs pyarrow without it is a :class:`UsageError`, before any trace is read."""
    from gpuprof.commands.diff import load_side
    from gpuprof.export.tables import build_tables
    from gpuprof.export.write import PYARROW_HINT, have_pyarrow, prepare_dir, write_tables
    from gpuprof.pool import affinity_cpus

    if fmt != "csv" and not have_pyarrow():  # before any trace is read
        raise UsageError(f"--format {fmt} {PYARROW_HINT}")
    report = load_side(source, jobs or affinity_cpus())
    tables = build_tables(report)
    directory = prepare_dir(out_dir)
    inputs = [source] + [t.path for t in report.traces]
    written = write_tables(directory, fmt, tables, inputs)
    return list(written), {name: len(rows) for name, rows in tables.items()}

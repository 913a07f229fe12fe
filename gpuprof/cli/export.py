"""``gpuprof export INPUT --format csv|parquet|arrow -o DIR``: the report's tables as files (docs/export.md)."""

from __future__ import annotations

import click

from gpuprof.cli.common import usage_errors

__all__ = ["export_cmd"]

EPILOG = """\b
Exit codes:
  0  the tables were written
  2  bad input or usage (one line naming the file); nothing is written
  3  internal gpuprof error
"""


@click.command("export", epilog=EPILOG)
@click.argument("source", metavar="TRACE_OR_REPORT", type=click.Path(path_type=str))
@click.option("--format", "fmt", type=click.Choice(("csv", "parquet", "arrow")), default="csv", show_default=True,
              help="csv needs nothing more; parquet and arrow (Arrow IPC file) need pyarrow: gpuprof[export].")
@click.option("-o", "--output", "out_dir", required=True, type=click.Path(path_type=str), metavar="DIR",
              help="Directory for steps, operators, kernels, modules, ranges and findings files (created if absent).")
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=None, help="Traces analysed at once.")
@usage_errors
def export_cmd(source: str, fmt: str, out_dir: str, jobs: int | None) -> None:
    """Write a run's tables, one file per table, from a trace file, a run directory or a saved report.json.

    Tables: steps, operators (by name and input shapes), kernels, modules,
    ranges and findings, with a trace and rank column where a run has several
    traces. Columns, types and units: docs/export.md.
    """
    from gpuprof.commands.export import export_tables
    from gpuprof.render.safe import visible

    written, counts = export_tables(source, fmt, out_dir, jobs)
    rows = ", ".join(f"{name} {n}" for name, n in counts.items())
    click.echo(f"gpuprof: {len(written)} {fmt} tables written to {visible(out_dir)} (rows: {rows})", err=True)

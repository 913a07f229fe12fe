"""Tables out: a report's steps, views and findings as CSV, Parquet or Arrow files (docs/export.md).

:mod:`gpuprof.export.tables` builds each table's rows from the report's JSON
form (so a saved report.json exports the same tables as the traces it came
from); :mod:`gpuprof.export.write` writes them, one file per table, in any
format, through one set of row builders.
"""

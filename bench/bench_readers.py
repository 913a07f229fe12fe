"""Benchmark: columnar JSON readers (pyarrow, polars, duckdb) against the msgspec floor on a Chrome trace.

The issue on speed asks whether an Arrow-based reader would load a trace's
``traceEvents`` into columns faster, or in less memory, than msgspec's
decode into structs (the shared parse floor, ``bench/floor.py`` of
``GPUPROF_SHARED_TRACES``, which ``gpuprof analyze`` is measured against). Each reader gets the same job: the events of the
uncompressed traces ``bench_floor.py`` builds (``bench/out/floor_*.json``),
as columns of the fields an analysis needs (ph, cat, name, pid, tid, ts, dur
and the linking args External id, correlation, device, stream), with the
number of events printed. Each runs in a fresh child process, in alternating
order, ``--rounds`` times; figures are CPU seconds of the child (user + sys
of all its threads: the columnar readers are multi-threaded, and on a
shared machine every thread's second is someone's second) and peak RSS.

Readers (each is skipped, with the reason, where its package is missing or
it fails on the trace: a reader that cannot read a real trace loses):

* ``msgspec``: the shared ``bench/floor.py``, run in the child as a script (structs of the needed fields);
* ``pyarrow``: ``pyarrow.json.read_json`` with an explicit schema (pyarrow
  reads newline-delimited JSON: the whole trace object is one row whose
  ``traceEvents`` list is then flattened);
* ``polars``: ``polars.read_json`` of the object (schema given), exploded;
* ``duckdb``: ``read_json(..., format='unstructured')`` of the object,
  ``unnest`` of ``traceEvents``.

Mixed-type fields are normal in real traces (``pid`` is ``"Spans"`` on the
V100 sample's marker events and a string on some of xDiT's, ``tid`` a string
in 2021 traces): msgspec takes ``int | str``, the columnar readers need one
type per column (int64 here) and fail where the trace has both. That failure
is the result; ``<reader>-no-ids`` (the same read without pid and tid, which
no analysis can do without) shows what the reader would cost if it could
read them.

Usage: ``python bench/bench_readers.py [--rounds 3] [--files bench/out/floor_v100_100MB.json,...]``.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

# the fields the floor decodes, and their Arrow types
_ARGS = [("External id", "int64"), ("correlation", "int64"), ("device", "int64"), ("stream", "int64")]


def _pyarrow(path: str, ids: bool = True) -> int:
    import pyarrow as pa
    import pyarrow.json as pj

    args = pa.struct([(k, pa.int64()) for k, _ in _ARGS])
    fields = [("ph", pa.string()), ("cat", pa.string()), ("name", pa.string()), ("ts", pa.float64()), ("dur", pa.float64()),
              ("args", args)]
    if ids:
        fields += [("pid", pa.int64()), ("tid", pa.int64())]
    event = pa.struct(fields)
    schema = pa.schema([("traceEvents", pa.list_(event))])
    size = os.path.getsize(path)
    table = pj.read_json(
        path,
        read_options=pj.ReadOptions(block_size=min(size + 1, 2**31 - 1), use_threads=True),
        parse_options=pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore", newlines_in_values=True),
    )
    events = table.column("traceEvents").combine_chunks().flatten()  # the list's struct values
    return len(events)


def _polars(path: str, ids: bool = True) -> int:
    import polars as pl

    args = pl.Struct({k: pl.Int64 for k, _ in _ARGS})
    fields = {"ph": pl.String, "cat": pl.String, "name": pl.String, "ts": pl.Float64, "dur": pl.Float64, "args": args}
    if ids:
        fields.update(pid=pl.Int64, tid=pl.Int64)
    event = pl.Struct(fields)
    df = pl.read_json(path, schema={"traceEvents": pl.List(event)})
    return df.explode("traceEvents").unnest("traceEvents").height


def _duckdb(path: str, ids: bool = True) -> int:
    import duckdb

    size = os.path.getsize(path)
    args = ", ".join(f'"{k}" BIGINT' for k, _ in _ARGS)
    idcols = "pid BIGINT, tid BIGINT, " if ids else ""
    cols = (f"{{'traceEvents': 'STRUCT(ph VARCHAR, cat VARCHAR, name VARCHAR, {idcols}"
            f"ts DOUBLE, dur DOUBLE, args STRUCT({args}))[]'}}")
    con = duckdb.connect()
    q = (f"SELECT count(*) FROM (SELECT unnest(traceEvents, recursive := true) FROM "
         f"read_json(?, format='unstructured', columns={cols}, maximum_object_size={size + 1}))")
    row = con.execute(q, [path]).fetchone()
    return int(row[0]) if row else 0


def _msgspec(path: str) -> int:
    import runpy

    from bench_floor import FLOOR

    sys.argv = [str(FLOOR), path]  # the floor is a script: it reads its argument and prints the count
    return len(runpy.run_path(str(FLOOR), run_name="__main__")["t"].traceEvents)


READERS: dict[str, Callable[[str], int]] = {"msgspec": _msgspec}
for _name, _read in (("pyarrow", _pyarrow), ("polars", _polars), ("duckdb", _duckdb)):
    READERS[_name] = _read
    READERS[f"{_name}-no-ids"] = functools.partial(_read, ids=False)


def child(reader: str, path: str) -> None:
    import resource

    n = READERS[reader](path)
    ru = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"events": n, "cpu_s": ru.ru_utime + ru.ru_stime}))


def run(reader: str, path: Path) -> dict[str, float]:
    """CPU seconds, wall seconds, peak RSS and event count of one reader in a fresh child; SystemExit if it fails."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, __file__, "--child", reader, str(path)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    out = proc.stdout.read().decode() if proc.stdout else ""
    err = proc.stderr.read().decode("utf-8", "replace") if proc.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:  # the exception's line, not the hint some readers print after it
        lines = [ln for ln in err.splitlines() if re.match(r"[\w.]+(Error|Exception): ", ln)] or err.splitlines()
        raise SystemExit(lines[-1] if lines else f"exit {os.waitstatus_to_exitcode(status)}")
    return {"cpu_s": ru.ru_utime + ru.ru_stime, "wall_s": wall, "peak_rss": ru.ru_maxrss * 1024,
            "events": json.loads(out.splitlines()[-1])["events"]}  # the last line: the floor prints its count too


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--files", default="", help="comma-separated traces (default: bench/out/floor_*.json)")
    ap.add_argument("--readers", default=",".join(READERS))
    ap.add_argument("--child", nargs=2, metavar=("READER", "FILE"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        child(*a.child)
        return 0
    files = [Path(f) for f in a.files.split(",") if f] or sorted((REPO / "bench" / "out").glob("floor_*MB.json"))
    out: dict[str, Any] = {"load_before": os.getloadavg(), "files": {}}
    for path in files:
        size = path.stat().st_size
        rows: dict[str, list[dict[str, float]]] = {}
        failed: dict[str, str] = {}
        names = a.readers.split(",")
        for r in range(a.rounds):
            for name in names if r % 2 == 0 else list(reversed(names)):
                if name in failed:
                    continue
                try:
                    got = run(name, path)
                    rows.setdefault(name, []).append(got)
                except SystemExit as err:  # the reader failed on this trace: record why
                    failed[name] = str(err)[-300:]
        res: dict[str, Any] = {"file_bytes": size, "failed": failed}
        base = rows.get("msgspec")
        for name, rs in rows.items():
            cpu = statistics.median(x["cpu_s"] for x in rs)
            rss = statistics.median(x["peak_rss"] for x in rs)
            ratio = statistics.median(x["cpu_s"] / b["cpu_s"] for x, b in zip(rs, base)) if base else float("nan")
            res[name] = {"cpu_s": cpu, "peak_rss_over_file": rss / size, "cpu_over_msgspec": ratio,
                         "wall_s": statistics.median(x["wall_s"] for x in rs)}
            n = rs[0]["events"]
            if base and n != base[0]["events"]:
                res[name]["events_differ"] = [n, base[0]["events"]]
            print(f"{path.name:28s} {name:14s} {n} events, CPU {cpu:6.2f} s ({ratio:.2f}x msgspec), wall "
                  f"{res[name]['wall_s']:.2f} s, peak RSS {rss / size:.2f}x the file")
        for name, why in failed.items():
            print(f"{path.name:28s} {name:14s} FAILED: {why}")
        out["files"][path.name] = res
    out["load_after"] = os.getloadavg()
    (REPO / "bench" / "out" / "readers_results.json").write_text(json.dumps(out, indent=1))
    print(f"load average {out['load_before'][0]:.2f} before, {out['load_after'][0]:.2f} after")
    return 0


if __name__ == "__main__":
    sys.exit(main())

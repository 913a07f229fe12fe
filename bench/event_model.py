"""One event model? The loaded trace's Events against a columnar prototype, on a real trace (docs/architecture.md).

For each event kind of the loaded trace: how many events, the memory its Event rows hold (the Event objects
and the list's slots; names and payloads are shared objects and would stay in either form), the memory the
same fields take as numpy columns (ts, dur, name code, thread code, ext, corr, device, stream, nbytes: what
an :class:`~gpuprof.trace.table.EventTable` would hold for every kind), and what building those columns from
the rows costs (what :func:`gpuprof.trace.columns.columns` pays once per list today). Then two queries a
rule makes, over the kernels: the total time per kernel name, and the kernels overlapping a set of windows,
each written over Events (a Python loop) and over columns (numpy), with the CPU seconds of each.

    python bench/event_model.py [TRACE ...]     # default: the largest shared traces

CPU seconds (``time.process_time``), best of 5; memory from ``sys.getsizeof`` and ``ndarray.nbytes``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(HERE / "tests" / "support"))  # the test helpers (gpuprof_testing) live in tests/support/, outside the package

from gpuprof.trace.columns import Columns  # noqa: E402
from gpuprof.trace.load import load_trace  # noqa: E402
from gpuprof.trace.model import Event  # noqa: E402
from gpuprof.trace.table import EventTable  # noqa: E402
from gpuprof.trace.vocab import Kind  # noqa: E402
from gpuprof_testing.realtraces import TRACES  # noqa: E402

DEFAULT = ["hta/TraceLens/tests/traces/inference/xdit_sd_3.5/profile_trace_rank_0.json.gz",
           "hta/HolisticTraceAnalysis/tests/data/df_index_resolver/df_index_resolver.json.gz"]
FIELDS_I8 = ("ext", "corr", "device", "stream", "nbytes")


def cpu(fn: Callable[[], object], repeat: int = 5) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.process_time()
        fn()
        best = min(best, time.process_time() - t0)
    return best


def table_bytes(t: EventTable) -> int:
    """What an EventTable holds: its columns (ext/corr only where some event has one)."""
    return sum(a.nbytes for a in (t.ts, t.dur, t.name_code, t.thread_code, t.ext, t.corr) if a is not None)


def load_costs(n: int = 200_000) -> tuple[float, float]:
    """CPU seconds to make ``n`` Events, and to append the same fields to a TableBuilder (the loader's two forms)."""
    from gpuprof.trace.table import TableBuilder

    names = [f"aten::op{i % 500}" for i in range(n)]

    def rows() -> None:
        [Event(1, names[i], float(i), 1.0, 7, 9, i, -1) for i in range(n)]

    def cols() -> None:
        b = TableBuilder(1)
        for i in range(n):
            b.add(names[i], float(i), 1.0, 7, 9, i, -1)
        b.table()

    return cpu(rows, 3), cpu(cols, 3)


def row_bytes(events: Sequence[Event]) -> int:
    """The Event objects and the list's slots (8 bytes each); an EventTable makes its rows on demand: none."""
    if isinstance(events, EventTable):
        return 0
    return sum(map(sys.getsizeof, events)) + 8 * len(events)


def column_bytes(events: Sequence[Event]) -> int:
    """ts, dur (float64), name and thread codes (int32), five int64 fields: every field an Event has but extra."""
    n = len(events)
    return n * (8 + 8 + 4 + 4 + 8 * len(FIELDS_I8))


def build_columns(events: Sequence[Event]) -> None:
    c = Columns(events)
    c.ts, c.dur, c.ext, c.corr, c.device, c.stream, c.name_code, c.thread_code  # noqa: B018 - each read builds it
    np.fromiter((e.nbytes for e in events), np.int64, len(events))


def per_name_rows(kernels: Sequence[Event]) -> dict[str, float]:
    out: defaultdict[str, float] = defaultdict(float)
    for e in kernels:
        out[e.name] += e.dur
    return out


def per_name_columns(c: Columns) -> dict[str, float]:
    sums = np.bincount(c.name_code, weights=c.dur, minlength=len(c.names))
    return dict(zip(c.names, sums.tolist()))


def overlapping_rows(kernels: Sequence[Event], windows: list[tuple[float, float]]) -> int:
    starts = [w[0] for w in windows]
    import bisect

    n = 0
    for e in kernels:
        i = bisect.bisect_right(starts, e.ts + e.dur) - 1
        if i >= 0 and windows[i][1] > e.ts:
            n += 1
    return n


def overlapping_columns(c: Columns, windows: list[tuple[float, float]]) -> int:
    starts = np.array([w[0] for w in windows])
    ends = np.array([w[1] for w in windows])
    i = np.searchsorted(starts, c.ts + c.dur, side="right") - 1
    ok = i >= 0
    return int(np.count_nonzero(ends[i[ok]] > c.ts[ok]))


def compare_queries(kernels: Sequence[Event], c: Columns, windows: list[tuple[float, float]]) -> None:
    for what, rows, cols in (
            ("time per kernel name", lambda: per_name_rows(kernels), lambda: per_name_columns(c)),
            ("kernels in 64 windows", lambda: overlapping_rows(kernels, windows),
             lambda: overlapping_columns(c, windows))):
        r, k = cpu(rows), cpu(cols)
        print(f"query over {len(kernels)} kernels, {what}: Events {r * 1e3:.2f} ms, columns {k * 1e3:.2f} ms "
              f"({r / max(k, 1e-9):.0f}x)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces", nargs="*", type=Path)
    args = ap.parse_args(argv)
    paths = args.traces or [TRACES / p for p in DEFAULT]
    rows_s, cols_s = load_costs()
    print(f"loading 200,000 events: Event rows {rows_s:.3f} CPU s, TableBuilder columns {cols_s:.3f} CPU s")
    for path in paths:
        if not path.is_file():
            print(f"{path}: not found (the shared traces are read from GPUPROF_SHARED_TRACES)")
            continue
        t0 = time.process_time()
        trace = load_trace(path)
        load_s = time.process_time() - t0
        print(f"\n{path.name}: {trace.num_events} events in the file, loaded in {load_s:.2f} CPU s")
        print(f"{'kind':<18}{'events':>9}{'rows MB':>9}{'cols MB':>9}{'B/event rows':>14}{'cols':>6}"
              f"{'build cols s':>14}")
        tot = [0, 0, 0, 0.0]
        for kind, events in trace.lists().items():
            n = len(events)
            if not n:
                continue
            rb = row_bytes(events)
            cb = table_bytes(events) if isinstance(events, EventTable) else column_bytes(events)
            build = 0.0 if isinstance(events, EventTable) else cpu(lambda ev=events: build_columns(ev), 3)
            tot = [tot[0] + n, tot[1] + rb, tot[2] + cb, tot[3] + build]
            table = " (already columns)" if isinstance(events, EventTable) else ""
            print(f"{Kind(kind).name:<18}{n:>9}{rb / 1e6:>9.2f}{cb / 1e6:>9.2f}{rb / n:>14.0f}{cb / n:>6.0f}"
                  f"{build:>14.4f}{table}")
        print(f"{'all':<18}{tot[0]:>9}{tot[1] / 1e6:>9.2f}{tot[2] / 1e6:>9.2f}{'':>14}{'':>6}{tot[3]:>14.4f}"
              "  (cols: the prototype's 9 fields; PYTHON_FUNCTION: its EventTable as loaded)")
        kernels = trace.kernels
        if len(kernels) < 100:
            continue
        c = Columns(kernels)
        c.ts, c.dur, c.name_code  # noqa: B018 - built before timing the queries (the columns are cached)
        lo, hi = float(c.ts.min()), float((c.ts + c.dur).max())
        windows = [(lo + (hi - lo) * k / 64, lo + (hi - lo) * (k + 0.5) / 64) for k in range(64)]
        assert per_name_rows(kernels).keys() == per_name_columns(c).keys()
        assert overlapping_rows(kernels, windows) == overlapping_columns(c, windows)
        compare_queries(kernels, c, windows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Hostile kernel launch configurations: ``grid`` and ``block`` values from a stranger's trace.

The loader keeps them undecoded and decodes each distinct text once (gpuprof.trace.normalise). A value
no decoder reads (a number no float holds, bytes that are not UTF-8), or one of the wrong shape, counts
as absent: the trace stays readable, the kernel keeps its other fields, and a value that reads is read
as written, whichever of the two comes first and whether the event is complete (X) or a B/E pair.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuprof.trace.load import load_trace
from gpuprof.trace.model import KernelConfig, kernel_config


def _kernel(ts: float, grid: str | None, block: str | None, regs: str | None = None, ph: str = "X") -> str:
    args = {"device": 0, "stream": 7, "correlation": int(ts)}
    text = json.dumps({"ph": ph, "cat": "kernel", "name": f"k{int(ts)}", "pid": 0, "tid": 7, "ts": ts, "dur": 2.0,
                       "args": args})
    extra = "".join(f', "{k}": {v}' for k, v in (("grid", grid), ("block", block), ("registers per thread", regs)) if v is not None)
    return text[:-2] + extra + "}}"


def _load(tmp_path: Path, events: list[str]) -> list[KernelConfig | None]:
    p = tmp_path / "t.json"
    p.write_bytes(('{"traceEvents": [' + ", ".join(events) + "]}").encode("utf-8", "surrogateescape"))
    return [kernel_config(k) for k in load_trace(p).kernels]


@pytest.mark.parametrize("bad", ["[1e400, 1, 1]", "[-1E999]", '["\udcff"]', '{"x": [1e400]}', '"128"', "[1.0, 1, 1]",
                                 "[true, 1, 1]", "[-1, 2, 3]", "[1, 2, 3, 4]", "[]", "null", "7"])
def test_an_unreadable_or_odd_grid_counts_as_absent(tmp_path: Path, bad: str) -> None:
    configs = _load(tmp_path, [_kernel(1.0, "[2, 1, 1]", "[128, 1, 1]", "32"), _kernel(2.0, bad, bad, "32"),
                               _kernel(3.0, bad, "[64, 1, 1]"), _kernel(4.0, "[2, 1, 1]", "[128, 1, 1]", "32")])
    assert configs[0] == KernelConfig((2, 1, 1), (128, 1, 1), 32, -1.0)
    assert configs[3] is configs[0]  # one shared config per distinct configuration
    assert configs[1] == KernelConfig(None, None, 32, -1.0)  # registers read; grid and block absent
    # no registers: a grid that does not read, or reads as null, is no grid (no config); any other grid makes one
    unread = bad in ("null", "[1e400, 1, 1]", "[-1E999]", '["\udcff"]', '{"x": [1e400]}')
    assert configs[2] == (None if unread else KernelConfig(None, (64, 1, 1), -1, -1.0))


def test_grid_and_block_of_a_begin_end_kernel_outlive_their_chunk(tmp_path: Path) -> None:
    # B/E events are paired once every chunk is in: their undecoded values must not point into a chunk's
    # buffer, which is reused (a file of many chunks: the pairs' texts are long gone when they are read)
    filler = [_kernel(10.0 + i, "[1, 1, 1]", "[32, 1, 1]") for i in range(20_000)]
    events = [_kernel(1.0, "[9, 8, 7]", "[6, 5, 4]", ph="B").replace(', "dur": 2.0', ""), *filler,
              '{"ph": "E", "cat": "kernel", "name": "k1", "pid": 0, "tid": 7, "ts": 5.0, "args": {"grid": [1e400]}}']
    configs = _load(tmp_path, events)
    assert len(configs) == 20_001
    assert configs[0] == KernelConfig((9, 8, 7), (6, 5, 4), -1, -1.0)
    assert all(c == KernelConfig((1, 1, 1), (32, 1, 1), -1, -1.0) for c in configs[1:])

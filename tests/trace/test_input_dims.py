"""``Input Dims`` stays undecoded (msgspec.Raw into the chunk being read) and is decoded only for collectives.

The undecoded value points into the loader's reused chunk buffer, so these
tests load files of many chunks: events kept past their chunk (B/E halves,
paired at the end) must not pin the buffer, an odd value in an operator's
dims must not make the trace unreadable, and a collective's message size
still comes from its dims.
"""

from __future__ import annotations

import json

import pytest

from gpuprof.trace import chunks
from gpuprof.trace.load import load_trace


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chunks, "BLOCK", 4096)  # many chunks, so values outlive the chunk they came from


def _write(tmp_path, events, raw_tail: str = "") -> str:
    p = tmp_path / "t.json"
    text = json.dumps({"traceEvents": events})
    if raw_tail:  # JSON that json.dumps cannot write (1e400)
        text = text[:-2] + ", " + raw_tail + "]}"
    p.write_text(text)
    return str(p)


def test_collective_sizes_from_dims_across_many_chunks_and_b_e_pairs(tmp_path, small_chunks) -> None:
    ev = []
    for i in range(3000):
        ev.append({"ph": "B", "name": "nccl:all_reduce", "cat": "cpu_op", "ts": i * 10, "pid": 1, "tid": 1,
                   "args": {"Input Dims": [[1000 + i]]}})
        ev.append({"ph": "E", "name": "nccl:all_reduce", "cat": "cpu_op", "ts": i * 10 + 5, "pid": 1, "tid": 1})
        ev.append({"ph": "X", "name": "aten::mm", "cat": "cpu_op", "ts": i * 10 + 6, "dur": 3, "pid": 1, "tid": 1,
                   "args": {"Input Dims": [[2, 2], [2, 2]]}})
    t = load_trace(_write(tmp_path, ev))
    assert len(t.ops) == 6000
    sizes = sorted(e.extra.nelems for e in t.comm_events)
    assert sizes == [1000 + i for i in range(3000)]


def test_an_unreadable_dims_value_costs_only_the_message_size(tmp_path, small_chunks) -> None:
    ev = [{"ph": "X", "name": "aten::mm", "cat": "cpu_op", "ts": i, "dur": 1, "pid": 1, "tid": 1,
           "args": {"Input Dims": [[4, 4]]}} for i in range(500)]
    tail = ('{"ph": "X", "name": "nccl:all_reduce", "cat": "cpu_op", "ts": 900, "dur": 5, "pid": 1, "tid": 1, '
            '"args": {"Input Dims": [[1e400]]}}')
    t = load_trace(_write(tmp_path, ev, tail))
    assert len(t.ops) == 501
    assert [e.extra.nelems for e in t.comm_events] == [-1]  # unknown size, trace still read

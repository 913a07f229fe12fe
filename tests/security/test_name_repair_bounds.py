"""The repair of torch 2.13's unescaped names (gpuprof.trace.namerepair) on hostile input.

The repair runs only after a decode error, on text a stranger wrote to look
like the broken shape: it must cost time and memory in proportion to the
file (each input runs through the real CLI in a child process under the
memory cap and a timeout of test_limits_inputs), and what it lets through is
shown as safely as any other name.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .test_limits_inputs import assert_refused, gpuprof

NOTE = "with unescaped quotes (a torch 2.13 export bug) repaired"


def _event(name: bytes, ts: int, args: bytes = b"", cat: bytes = b"python_function") -> bytes:
    """One event in Kineto's layout (the shape the repair looks for), its name written as is.

    A Python frame by default: the report does not list those, so a huge name costs the
    loader, not the report; "cpu_op" to see the name in the report."""
    return (b'  {\n    "ph": "X",\n    "cat": "' + cat + b'",\n    "name": "' + name + b'",\n    "pid": 1,\n'
            b'    "tid": 1,\n    "ts": %d,\n    "dur": 1' % ts + args + b"\n  }")


def _trace(path: Path, *events: bytes) -> Path:
    path.write_bytes(b'{\n  "traceEvents": [\n' + b",\n".join(events) + b"\n  ]\n}\n")
    return path


def _loaded(rc: int, out: str, err: str) -> dict:
    assert rc in (0, 1), err
    return json.loads(out)["traces"][0]  # type: ignore[no-any-return]


@pytest.mark.slow  # a long hostile input (32 MiB in a child process): out of the README's fast command
def test_a_huge_name_of_quotes_is_repaired_in_linear_time_and_bounded_memory(tmp_path: Path) -> None:
    # 32 MiB of '"' as one name: the repaired text is twice that, all of it one JSON string
    p = _trace(tmp_path / "quotes.json", _event(b'"' * (32 << 20), 1), _event(b"b", 2))
    rc, out, err, cpu = gpuprof("analyze", str(p), "--format", "json")
    trace = _loaded(rc, out, err)
    assert trace["num_events"] == 2
    assert f"1 event name {NOTE}" in trace["notes"]
    assert cpu < 20


@pytest.mark.slow  # a long hostile input (32 MiB in a child process): out of the README's fast command
def test_a_huge_name_of_quotes_with_another_error_is_refused(tmp_path: Path) -> None:
    # The huge event is repaired in its own chunk; the stray byte after it is the file's error.
    # With the stray byte inside the huge event, the repair does not decode: the original
    # error (at the first unescaped quote) stands.
    p = _trace(tmp_path / "after.json", _event(b'"' * (32 << 20), 1), _event(b"b", 2) + b" @")
    rc, _, err, cpu = gpuprof("analyze", str(p))
    assert_refused(p, rc, err, "not valid JSON", f"(byte {p.read_bytes().index(b'@')})")
    assert cpu < 20
    q = _trace(tmp_path / "inside.json", _event(b'"' * (32 << 20), 1, b" @"), _event(b"b", 2))
    rc, _, err, cpu = gpuprof("analyze", str(q))
    at = q.read_bytes().index(b'"name": ""') + len(b'"name": ""')  # where the empty string seems to end
    assert_refused(q, rc, err, "not valid JSON", f"(byte {at})")
    assert cpu < 20


def test_false_boundaries_after_a_broken_name_cost_linear_time(tmp_path: Path) -> None:
    # Every "}, {" in the args string is a boundary the chunker tries (and the text before it
    # fails to decode): each try repairs the name again, at most 16 tries per doubling read.
    junk = b'"' + b"}, {" * (6 << 20) + b'"'
    p = _trace(tmp_path / "cuts.json", _event(b'a"b', 1, b',\n    "args": {"s": ' + junk + b"}"), _event(b"b", 2))
    rc, out, err, cpu = gpuprof("analyze", str(p), "--format", "json")
    trace = _loaded(rc, out, err)
    assert trace["num_events"] == 2 and f"1 event name {NOTE}" in trace["notes"]
    assert cpu < 20


def test_a_broken_name_in_every_event_costs_linear_time(tmp_path: Path) -> None:
    n = 100_000
    p = _trace(tmp_path / "many.json", *(_event(b'f"%d"' % i, i) for i in range(n)))
    rc, out, err, cpu = gpuprof("analyze", str(p), "--format", "json")
    trace = _loaded(rc, out, err)
    assert trace["num_events"] == n and f"{n} event names {NOTE}" in trace["notes"]
    assert cpu < 20


def test_a_repaired_name_is_shown_without_terminal_escapes(tmp_path: Path) -> None:
    # Raw control bytes are invalid JSON; on a repaired line they become \u escapes, so the
    # name holds them as characters, which every view must show inert, as for any name.
    name = b'evil"\x1b]8;;http://x\x07\x1b[2J\x1b[31m"red'
    p = _trace(tmp_path / "esc.json", _event(name, 1, cat=b"cpu_op"), _event(b"b", 2, cat=b"cpu_op"))
    rc, out, err, _ = gpuprof("analyze", str(p))
    assert rc in (0, 1), err
    assert "\x1b" not in out and "\x07" not in out
    assert "evil" in out

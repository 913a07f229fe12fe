"""Snapshots are pickles from other people: nothing in them may run."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from gpuprof.errors import InputError
from gpuprof.memory.snapshot import SNAPSHOT_PICKLE_PROTOCOL, dump_snapshot, load_snapshot
from gpuprof.memory.snapshot.safeload import UnsafePickleError, load_pickle_file, safe_loads


class _RunsCommand:
    """Unpickling this with plain pickle runs a shell command that creates a marker file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (os.system, (f"touch {self.marker}",))


class _CallsEval:
    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (eval, ("__import__('os').getpid()",))


def _malicious(marker: Path, protocol: int) -> bytes:
    return pickle.dumps({"segments": [], "device_traces": [[{"action": "alloc", "x": _RunsCommand(marker)}]]},
                        protocol=protocol)


def test_the_malicious_pickle_really_would_run_a_command(tmp_path: Path) -> None:
    # Guard for the test below: plain pickle.loads does run it (in a child process, to stay clean).
    marker = tmp_path / "plain-pickle-ran"
    data = _malicious(marker, 4)
    subprocess.run([sys.executable, "-c", "import pickle,sys; pickle.loads(sys.stdin.buffer.read())"],
                   input=data, check=True)
    assert marker.exists()


@pytest.mark.parametrize("protocol", [0, 1, 2, 3, 4, 5])
def test_malicious_pickle_is_rejected_and_runs_nothing(tmp_path: Path, protocol: int) -> None:
    marker = tmp_path / "pwned"
    data = _malicious(marker, protocol)
    with pytest.raises(UnsafePickleError, match="tries to import"):
        safe_loads(data)
    assert not marker.exists()


def test_eval_payload_rejected_naming_the_import(tmp_path: Path) -> None:
    with pytest.raises(UnsafePickleError, match=r"builtins\.eval"):
        safe_loads(pickle.dumps([_CallsEval()], protocol=4))


def test_cli_rejects_malicious_snapshot_with_one_line_and_exit_2(tmp_path: Path) -> None:
    marker = tmp_path / "pwned-cli"
    snap = tmp_path / "snapshot.pickle"
    snap.write_bytes(_malicious(marker, 4))
    proc = subprocess.run([sys.executable, "-m", "gpuprof", "memory", str(snap)], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "refusing to load" in proc.stderr and "posix.system" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not marker.exists()


def test_persistent_ids_rejected() -> None:
    class P(pickle.Pickler):
        def persistent_id(self, obj):  # type: ignore[no-untyped-def]
            return "storage" if obj == "x" else None

    import io

    buf = io.BytesIO()
    P(buf, protocol=2).dump(["x"])
    with pytest.raises(UnsafePickleError, match="persistent id"):
        safe_loads(buf.getvalue())


def test_plain_data_round_trips_and_protocol_is_4(tmp_path: Path) -> None:
    obj = {"segments": [{"device": 0, "address": 1, "total_size": 2, "segment_pool_id": (0, 0), "blocks": []}],
           "device_traces": [[]], "x": [1.5, None, True, "s", b"b"]}
    p = tmp_path / "s.pickle"
    dump_snapshot(obj, p)
    raw = p.read_bytes()
    assert raw[0] == 0x80 and raw[1] == SNAPSHOT_PICKLE_PROTOCOL == 4
    assert safe_loads(raw) == obj
    assert load_snapshot(p).devices[0].segments[0].total_size == 2


@pytest.mark.parametrize("content,problem", [
    (b"\x80\x04\x95", "corrupt or truncated"),
    (pickle.dumps("hello", protocol=4), "not a PyTorch memory snapshot"),
    (pickle.dumps([1, 2], protocol=4), "a segment is not a dict"),
    (pickle.dumps({"a": 1}, protocol=4), "no 'segments' list"),
])
def test_bad_pickles_are_one_line_input_errors(tmp_path: Path, content: bytes, problem: str) -> None:
    p = tmp_path / "bad.pickle"
    p.write_bytes(content)
    with pytest.raises(InputError, match=problem):
        load_snapshot(p)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        load_pickle_file(tmp_path / "nope.pickle")

"""Hostile input to the cross-rank view (``gpuprof memory S0 S1``) and to the diff's same-program test: rank files
named with terminal escapes and markup, frames whose fields are not strings or ints, one stack shared by every
entry, frames lists far past the 512 read. Each is plain data: no traceback, exit codes as documented, names inert
in the terminal and markdown, bounded work."""

from __future__ import annotations

import json
import pickle
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gpuprof.cli import cli
from gpuprof.memory.diff import same_program
from gpuprof.memory.snapshot import parse_snapshot
from gpuprof.render.safe import UNSAFE_CODEPOINTS
from gpuprof_testing.snapshots import MiB, SnapshotBuilder

from .conftest import TEXT_HOSTILE

_SGR = re.compile(r"\x1b\[[0-9;]*m")


def _unsafe_left(text: str) -> list[str]:
    return sorted({repr(c) for c in text if ord(c) in UNSAFE_CODEPOINTS and c != "\n"})


def _file_part(name: str) -> str:
    return name[:40].replace("/", "_").replace("\x00", "_") or "_"


@pytest.mark.parametrize("name", TEXT_HOSTILE, ids=[f"text{i}" for i in range(len(TEXT_HOSTILE))])
def test_hostile_rank_file_names_stay_inert(name: str, tmp_path: Path) -> None:
    paths = []
    for i in range(2):
        b = SnapshotBuilder()
        b.alloc((8 + 8 * i) * MiB, b.stack((f"/home/u/{_file_part(name)}.py", 3, "main")))
        paths.append(b.dump(tmp_path / f"r{i}.{_file_part(name)}.pickle"))
    for fmt in ("terminal", "markdown"):
        res = CliRunner().invoke(cli, ["memory", *paths, "--format", fmt], env={"COLUMNS": "100"})
        assert res.exit_code == 0, res.output
        out = _SGR.sub("", res.output)
        assert "\x1b" not in out and _unsafe_left(out) == []
        assert "ranks differ" in out
    res = CliRunner().invoke(cli, ["memory", *paths, "--format", "json"])
    view = json.loads(res.output)["sections"][-1]
    assert [r["file"] for r in view["ranks"]] == [Path(p).name for p in paths]  # exact in JSON


def _odd_frames() -> list[Any]:
    return [{"filename": 5, "line": "x", "name": ["<module>"]}, {"filename": "/home/u/a.py", "line": [1], "name": 3},
            {"filename": "/home/u/a.py", "line": 2**70, "name": "<module>"}, "not a frame", None,
            {"filename": None}, {}]


def test_frames_that_are_not_strings_or_ints_are_skipped_by_the_program_test() -> None:
    b = SnapshotBuilder()
    b.alloc(MiB, _odd_frames())
    snap = b.snapshot()
    d = parse_snapshot(snap, "a")
    verdict = same_program(d, parse_snapshot(pickle.loads(pickle.dumps(snap)), "b"))
    assert verdict["frames_before"] == 1 and verdict["verdict"] == "same"  # only /home/u/a.py:<module>, line None
    assert verdict["scripts_before"] == ["a.py"]


def test_a_shared_stack_far_past_the_read_limit_costs_one_walk(tmp_path: Path) -> None:
    """100,000 entries share one 50,000-frame stack: the frames are read once (512 of them), not per entry."""
    frames = [{"filename": f"/home/u/f{i}.py", "line": i, "name": "g"} for i in range(50_000)]
    b = SnapshotBuilder()
    for _ in range(2_000):
        b.free(b.alloc(512, frames))
    a = parse_snapshot(b.snapshot(), "a")
    v = same_program(a, a)
    assert v["frames_before"] == 512 and v["overlap"] == 1.0


def test_a_diff_of_hostile_stacks_exits_cleanly(tmp_path: Path) -> None:
    b = SnapshotBuilder()
    b.alloc(64 * MiB, _odd_frames())
    p1 = b.dump(tmp_path / "a.pickle")
    b.alloc(64 * MiB, [{"filename": "/home/u/\x1b[31mb.py", "line": 1, "name": "<module>"}])
    p2 = b.dump(tmp_path / "b.pickle")
    res = CliRunner().invoke(cli, ["memory", "diff", p1, p2], env={"COLUMNS": "100"})
    assert res.exit_code in (0, 1) and "Traceback" not in res.output
    assert "\x1b" not in res.output and _unsafe_left(res.output) == []  # not a terminal: no colour of ours either

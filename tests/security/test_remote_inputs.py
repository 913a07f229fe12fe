"""Inputs read by URL (gpuprof.remote) keep the promises local files keep: limits, inert names, no secrets shown."""

from __future__ import annotations

import gzip
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest
from click.testing import CliRunner

from gpuprof.cli import cli
from gpuprof.testing import TraceBuilder, simple_training

fsspec = pytest.importorskip("fsspec")


@pytest.fixture
def mem() -> Iterator[tuple[Any, str]]:
    fs = fsspec.filesystem("memory")
    root = f"/sec-{uuid.uuid4().hex[:8]}"
    yield fs, root
    if fs.exists(root):
        fs.rm(root, recursive=True)


def test_gzip_bomb_by_url_is_refused_like_a_local_one(mem: tuple[Any, str]) -> None:
    fs, root = mem
    bomb = gzip.compress(b'{"traceEvents": [' + b" " * (80 << 20) + b"]}", compresslevel=9)
    assert len(bomb) < 200_000
    fs.pipe(f"{root}/bomb.json.gz", bomb)
    res = CliRunner().invoke(cli, ["analyze", f"memory://{root}/bomb.json.gz"])
    assert res.exit_code == 2 and "gzip bomb" in res.output and "GPUPROF_MAX_GZIP_RATIO" in res.output


def test_hostile_object_names_stay_inert_on_the_terminal(mem: tuple[Any, str], tmp_path: Path) -> None:
    fs, root = mem
    tb = TraceBuilder()
    simple_training(tb, steps=3)
    data = tb.write(tmp_path / "t.json").read_bytes()
    name = "\x1b]0;owned\x07\x1b[2Jrank0.pt.trace.json"
    fs.pipe(f"{root}/run/{name}", data)
    res = CliRunner().invoke(cli, ["analyze", f"memory://{root}/run"], env={"COLUMNS": "120"})
    assert res.exit_code in (0, 1), res.output
    assert "\x1b" not in res.output and "\x07" not in res.output
    res = CliRunner().invoke(cli, ["analyze", f"memory://{root}/run/{name}x"])  # an error naming it: inert too
    assert res.exit_code == 2 and "\x1b" not in res.output


def test_a_url_never_prints_its_credentials_even_when_the_read_fails() -> None:
    res = CliRunner().invoke(cli, ["analyze", "memory://admin:s3cret@nowhere/x.json"])
    assert res.exit_code == 2 and "s3cret" not in res.output and res.output.count("\n") == 1

"""``--step-function``'s file form and the script source it reads: a path that is no regular file is one line and
exit 2 (a FIFO is never opened), control characters are shown made visible, and a hostile source (deep nesting,
huge, undecodable) falls back to the module-level watch without raising."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from gpuprof.run.stepfn import MAX_SOURCE_BYTES, locate, locate_in_file

from ..run.conftest import gpuprof_run


def _one_line_exit_2(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def test_a_step_function_file_that_is_no_regular_file(tmp_path: Path) -> None:
    script = tmp_path / "t.py"
    script.write_text("pass\n")
    assert _one_line_exit_2(gpuprof_run("--step-function", "nosuch.py:f", str(script), cwd=tmp_path)) == \
        "gpuprof: error: --step-function nosuch.py: no such file"
    (tmp_path / "dir.py").mkdir()
    assert _one_line_exit_2(gpuprof_run("--step-function", "dir.py:f", str(script), cwd=tmp_path)).endswith(
        "dir.py: not a regular file")
    if hasattr(os, "mkfifo"):
        os.mkfifo(tmp_path / "fifo.py")  # opening it would block: it is refused, never opened
        assert _one_line_exit_2(gpuprof_run("--step-function", "fifo.py:f", str(script), cwd=tmp_path,
                                            timeout=60)).endswith("fifo.py: not a regular file")
    line = _one_line_exit_2(gpuprof_run("--step-function", "a\x1b[31mb.py:f", str(script), cwd=tmp_path))
    assert "\x1b" not in line and "no such file" in line
    assert not (tmp_path / "gpuprof_logs").exists()


@pytest.mark.parametrize("source", ["-" * 200_000 + "1\n", "x = " + "[" * 100_000 + "]" * 100_000 + "\n",
                                    "def f(:\n", "\x00\x01\x02"])
def test_a_hostile_source_keeps_the_module_level_watch(source: str) -> None:
    assert locate(source, "main.step").kind == "module"


def test_a_huge_or_undecodable_script_is_not_read_whole(tmp_path: Path) -> None:
    big = tmp_path / "big.py"
    with open(big, "w") as fh:
        fh.write("def main():\n    def step(): pass\n")
        fh.write("#" * (MAX_SOURCE_BYTES + 10) + "\n")
    assert locate_in_file(str(big), "main.step").kind == "module"  # over the bound: not parsed
    bad = tmp_path / "bad.py"
    bad.write_bytes(b"# -*- coding: no-such-codec -*-\ndef main():\n    def step(): pass\n")
    assert locate_in_file(str(bad), "main.step").kind == "module"
    latin = tmp_path / "latin.py"
    latin.write_bytes(b"# -*- coding: latin-1 -*-\n# \xe9\ndef main():\n    def step(): pass\n")
    assert locate_in_file(str(latin), "main.step").kind == "nested"  # the declared encoding, as Python reads it

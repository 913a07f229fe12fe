"""bench/bench_floor.py measures against the one shared parse floor: it has no floor of its own, names the
shared one, and without the shared folder says so in one line (exit 2) instead of a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuprof_testing.realtraces import ROOT, available

REPO = Path(__file__).resolve().parents[2]


def _run(*args: str, shared: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    if shared is not None:
        env["GPUPROF_SHARED_TRACES"] = str(shared)
    return subprocess.run([sys.executable, str(REPO / "bench" / "bench_floor.py"), *args], capture_output=True,
                          text=True, timeout=120, env=env, cwd=REPO)


def test_there_is_no_floor_in_the_repository() -> None:
    assert not (REPO / "bench" / "floor.py").exists()
    for script in ("bench_floor.py", "bench_hta.py", "bench_readers.py"):
        text = (REPO / "bench" / script).read_text(encoding="utf-8")
        assert 'REPO / "bench" / "floor.py"' not in text and "from floor import" not in text, script


def test_without_the_shared_folder_one_line_and_exit_2(tmp_path: Path) -> None:
    empty = tmp_path / "nothing-here"
    empty.mkdir()
    out = _run("--workdir", str(tmp_path / "w"), shared=empty)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "shared parse floor is absent" in lines[0] and "GPUPROF_SHARED_TRACES" in lines[0]
    assert str(empty / "bench" / "floor.py") in lines[0] and "Traceback" not in out.stderr
    assert not (tmp_path / "w").exists()  # nothing built, nothing written


def test_a_bad_size_or_kind_is_one_line(tmp_path: Path) -> None:
    if not (ROOT / "bench" / "floor.py").is_file():
        pytest.skip("the shared floor is absent: the run stops before reading its arguments (checked above)")
    out = _run("--sizes", "300", "--kinds", "v100,nope", "--workdir", str(tmp_path / "w"))
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert "size 300" in out.stderr and "kind 'nope'" in out.stderr


def test_the_floor_is_the_shared_one() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_floor_t", REPO / "bench" / "bench_floor.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.FLOOR == ROOT / "bench" / "floor.py" and mod.MAKE_BIG == ROOT / "bench" / "make_big.py"
    assert mod.floor_cmd(Path("t.json"))[1:] == [str(ROOT / "bench" / "floor.py"), "t.json"]
    assert available() is False or mod.SOURCES["v100"].name == "worker0.1623143089861.pt.trace.json.gz"

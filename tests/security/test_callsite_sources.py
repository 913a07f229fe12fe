"""Reading the user's source to find a call's line (gpuprof.trace.callsite): a trace names the files, so a
hostile trace names any path. No symlink followed as the file, no FIFO or device blocking, no file over
the size bound read, nothing but a line number comes out, and a file that is not the one that ran (no
function of that name at that line) decides nothing."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from gpuprof.trace import callsite
from gpuprof.trace.callsite import MAX_SOURCE_BYTES, source_calls

SCRIPT = "import torch\n\n\ndef train(model, x):\n    torch.save(model, 'a.pt')\n    return model(x)\n"


@pytest.fixture(autouse=True)
def _no_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(callsite, "_CACHE", type(callsite._CACHE)())


def test_a_plain_script_is_read(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(SCRIPT)
    calls = source_calls(str(tmp_path / "train.py"), 4, "train")
    assert calls is not None and [(c.name, c.line, c.maybe_module) for c in calls] == [
        ("save", 5, False), ("model", 6, True)]


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="no symlinks")
def test_a_symlink_is_not_followed(tmp_path: Path) -> None:
    (tmp_path / "real.py").write_text(SCRIPT)
    (tmp_path / "link.py").symlink_to(tmp_path / "real.py")
    assert source_calls(str(tmp_path / "link.py"), 4, "train") is None


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs")
def test_a_fifo_does_not_block(tmp_path: Path) -> None:
    fifo = tmp_path / "train.py"
    os.mkfifo(fifo)
    done: list[object] = []
    t = threading.Thread(target=lambda: done.append(source_calls(str(fifo), 4, "train")), daemon=True)
    t.start()
    t.join(10)
    assert done == [None]  # returned (no writer needed), and read nothing


def test_devices_and_directories_are_not_read(tmp_path: Path) -> None:
    assert source_calls("/dev/zero", 1, "<module>") is None  # endless: never read
    assert source_calls(str(tmp_path), 1, "<module>") is None


def test_a_file_over_the_bound_is_not_read(tmp_path: Path) -> None:
    big = tmp_path / "big.py"
    with big.open("w") as f:
        f.write(SCRIPT)
        f.write("#" * 79 + "\n" * 1)
        f.truncate(MAX_SOURCE_BYTES + 1)  # sparse: no disk used
    assert source_calls(str(big), 4, "train") is None


def test_a_file_that_is_not_the_one_that_ran_decides_nothing(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(SCRIPT)
    assert source_calls(str(tmp_path / "train.py"), 40, "train") is None  # no such function at that line
    assert source_calls(str(tmp_path / "train.py"), 4, "evaluate") is None  # another name
    (tmp_path / "secret.txt").write_text("password = hunter2\n{{{ not python")
    assert source_calls(str(tmp_path / "secret.txt"), 1, "<module>") is None  # not Python: nothing


def test_hostile_paths_in_a_trace_name_nothing(tmp_path: Path) -> None:
    for path in ("train.py\0/etc/passwd", "", "/proc/self/mem", "../" * 40 + "etc/shadow"):
        assert source_calls(path, 1, "<module>") is None, path


def test_deeply_nested_source_is_no_crash(tmp_path: Path) -> None:
    deep = tmp_path / "deep.py"
    deep.write_text("x = " + "(" * 100_000 + ")" * 100_000 + "\n")
    assert source_calls(str(deep), 1, "<module>") is None  # the parser's recursion limit: nothing decided
    long_chain = tmp_path / "chain.py"  # parses, but its tree is 2,000 levels deep: the walk gives up, no crash
    long_chain.write_text("x = " + "+".join(["f(1)"] * 2000) + "\n")
    assert source_calls(str(long_chain), 1, "<module>") is None

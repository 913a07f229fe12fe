"""gpuprof.safefile, the one bounded reader of files gpuprof did not name itself (the hang's files, the trigger's
registry, a trace's source files): a link is refused unfollowed, a FIFO is refused without blocking, a directory
or device is refused unread, a file over the bound is refused (by its size, and by what is read when the size
says nothing), and a FIFO swapped in after the first look is still refused."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from gpuprof import safefile
from gpuprof.safefile import TooLarge, Unreadable, read_regular, read_regular_stat


def test_a_regular_file_is_read_whole_bytes_as_they_are(tmp_path: Path) -> None:
    data = b"\xff\xfe not UTF-8 \x00\n"
    (tmp_path / "f.json").write_bytes(data)
    assert read_regular(tmp_path / "f.json", len(data)) == data  # exactly at the bound: read
    got = read_regular_stat(str(tmp_path / "f.json"), 1 << 20)
    assert got is not None and got[1] == data and got[0].st_size == len(data)


def test_a_missing_file_is_none(tmp_path: Path) -> None:
    assert read_regular(tmp_path / "absent.json", 100) is None


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="no symlinks")
def test_a_symlink_is_refused_not_followed(tmp_path: Path) -> None:
    (tmp_path / "secret").write_bytes(b"password")
    (tmp_path / "link.json").symlink_to(tmp_path / "secret")
    with pytest.raises(Unreadable, match=r"^link\.json is a symbolic link \(not followed\)$") as err:
        read_regular(tmp_path / "link.json", 100)
    assert "password" not in str(err.value)
    (tmp_path / "dangling.json").symlink_to(tmp_path / "nowhere")
    with pytest.raises(Unreadable, match="symbolic link"):  # a dangling link is a link, not a missing file
        read_regular(tmp_path / "dangling.json", 100)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs")
def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "hang.json"
    os.mkfifo(fifo)
    done: list[str] = []

    def read() -> None:
        try:
            read_regular(fifo, 100)
            done.append("read")
        except Unreadable as err:
            done.append(str(err))

    t = threading.Thread(target=read, daemon=True)
    t.start()
    t.join(10)
    assert done == ["hang.json is not a regular file"]  # returned with no writer, and read nothing


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs")
def test_a_fifo_swapped_in_after_the_first_look_is_refused_on_the_open_descriptor(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "plain").write_bytes(b"{}")
    fifo = tmp_path / "hang.json"
    os.mkfifo(fifo)
    regular = os.lstat(tmp_path / "plain")
    monkeypatch.setattr(safefile.os, "lstat", lambda p: regular)  # the name looked regular a moment ago
    with pytest.raises(Unreadable, match="^hang.json is not a regular file$"):
        read_regular(fifo, 100)


def test_directories_and_devices_are_refused_unread(tmp_path: Path) -> None:
    with pytest.raises(Unreadable, match="is not a regular file"):
        read_regular(tmp_path, 100)
    if os.path.exists("/dev/zero"):
        with pytest.raises(Unreadable, match="^zero is not a regular file$"):  # endless: never opened
            read_regular("/dev/zero", 100)


def test_a_file_over_the_bound_is_refused(tmp_path: Path) -> None:
    big = tmp_path / "big.json"
    with big.open("wb") as f:
        f.truncate(10 * 2**30)  # sparse: no disk used, and never read
    with pytest.raises(TooLarge, match=r"^big\.json is larger than 1,000 bytes$"):
        read_regular(big, 1000)
    (tmp_path / "one.json").write_bytes(b"x" * 1001)
    with pytest.raises(TooLarge, match="larger than 1,000 bytes"):
        read_regular(tmp_path / "one.json", 1000)


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="no /proc")
def test_a_file_whose_size_says_nothing_is_bounded_by_what_is_read() -> None:
    """/proc files are regular with a size of 0: the bound holds on the bytes read (one over it at most)."""
    assert os.lstat("/proc/self/status").st_size == 0
    data = read_regular("/proc/self/status", 1 << 20)
    assert data is not None and len(data) > 100
    with pytest.raises(TooLarge, match="larger than 100 bytes"):
        read_regular("/proc/self/status", 100)


def test_an_unreadable_file_is_a_reason_not_an_escape(tmp_path: Path) -> None:
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        pytest.skip("root reads a file of mode 000")
    f = tmp_path / "closed.json"
    f.write_bytes(b"{}")
    f.chmod(0)
    with pytest.raises(Unreadable, match=r"^closed\.json cannot be read \(Permission denied\)$") as err:
        read_regular(f, 100)
    assert err.value.strerror == "Permission denied" and not isinstance(err.value, TooLarge)

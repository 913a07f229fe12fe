"""Outputs never replace what is not a regular file (gpuprof.atomic).

``gpuprof analyze TRACE -o /dev/null`` run as root used to rename a
temporary file over the null device. These tests use a PRIVATE character
device made in ``tmp_path`` with ``mknod`` (major 1, minor 3: the null
device; needs root, skipped otherwise), never the real ``/dev/null``, and
check that after each command it is still a character device. A FIFO gets
the output when it has a reader and is one line, at once, when it has none.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpuprof.atomic import atomic_path, atomic_write, write_output
from gpuprof.cli import cli
from gpuprof.errors import InputError
from gpuprof_testing.snapshots import MiB, SnapshotBuilder
from gpuprof_testing.tracegen import TraceBuilder


def _trace(path: Path) -> Path:
    b = TraceBuilder()
    for _ in range(3):
        with b.step():
            b.kernel("k", us=100)
            b.sync_item()
    return b.write(path)


def _snapshot(path: Path) -> Path:
    b = SnapshotBuilder()
    b.alloc(64 * MiB, b.stack(("train.py", 3, "main")))
    b.dump(path)
    return path


@pytest.fixture
def null_device(tmp_path: Path) -> Path:
    """A private null device node (never the system's /dev/null)."""
    node = tmp_path / "dev" / "null"
    node.parent.mkdir()
    try:
        os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("making a device node needs root")
    return node


def _is_null_device(node: Path) -> bool:
    st = os.lstat(node)
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(1, 3)


def _cli(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(cli, list(args))
    return res.exit_code, res.output


class Reader(threading.Thread):
    """Reads a FIFO to its end in a thread (the other side of ``-o FIFO``)."""

    def __init__(self, fifo: Path) -> None:
        super().__init__(daemon=True)
        self.fifo, self.data = fifo, b""
        self.start()

    def run(self) -> None:
        with open(self.fifo, "rb") as fh:  # blocks until the writer opens it
            self.data = fh.read()


# ---------------------------------------------------------------------- every command's output on a device node


def test_every_output_option_writes_through_a_device_and_keeps_it(null_device: Path, tmp_path: Path) -> None:
    trace = _trace(tmp_path / "t.pt.trace.json")
    snap = _snapshot(tmp_path / "s.pickle")
    commands = [
        ("analyze", str(trace), "--format", "json", "-o", str(null_device)),
        ("analyze", str(trace), "--format", "markdown", "-o", str(null_device)),
        ("analyze", str(trace), "--html", str(null_device)),
        ("analyze", str(trace), "--annotate", str(null_device)),
        ("memory", str(snap), "-o", str(null_device)),
        ("memory", str(snap), "--html", str(null_device)),
        ("diff", str(trace), str(trace), "-o", str(null_device)),
        ("diff", str(trace), str(trace), "--html", str(null_device)),
    ]
    for args in commands:
        code, out = _cli(*args)
        assert code in (0, 1), (args, out)
        assert _is_null_device(null_device), args
        assert os.listdir(null_device.parent) == ["null"], args  # no temporary file left beside it


def test_as_a_subprocess_too(null_device: Path, tmp_path: Path) -> None:
    trace = _trace(tmp_path / "t.pt.trace.json")
    res = subprocess.run([sys.executable, "-m", "gpuprof", "analyze", str(trace), "--format", "json", "-o",
                          str(null_device)], capture_output=True, text=True, timeout=120)
    assert res.returncode in (0, 1), res.stderr
    assert _is_null_device(null_device) and res.stdout == ""


def test_a_symlink_to_a_device_is_written_through_not_replaced(null_device: Path, tmp_path: Path) -> None:
    link = tmp_path / "stdout-like"
    link.symlink_to(null_device)
    write_output(link, "report", "the report")
    assert link.is_symlink() and os.readlink(link) == str(null_device)
    assert _is_null_device(null_device)


def test_gpuprof_named_outputs_refuse_a_device(null_device: Path) -> None:
    """Files gpuprof names itself (capture's reports, traces, stats: streams=False) are never a device."""
    with pytest.raises(OSError, match="character device"):
        atomic_write(null_device, "x")
    with pytest.raises(OSError, match="character device"), atomic_path(null_device):
        raise AssertionError("the block must not run")
    assert _is_null_device(null_device)
    assert os.listdir(null_device.parent) == ["null"]


def test_a_full_device_is_one_line(tmp_path: Path) -> None:
    node = tmp_path / "full"
    try:
        os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 7))  # the "full" device: every write is ENOSPC
    except PermissionError:
        pytest.skip("making a device node needs root")
    with pytest.raises(InputError, match="cannot write the report: No space left"):
        write_output(node, "report", "the report")
    assert stat.S_ISCHR(os.lstat(node).st_mode)


# ---------------------------------------------------------------------- FIFOs


def test_a_fifo_with_a_reader_gets_the_report(tmp_path: Path) -> None:
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    trace = _trace(tmp_path / "t.pt.trace.json")
    for args in (("--format", "json", "-o"), ("--annotate",)):
        reader = Reader(fifo)
        code, out = _cli("analyze", str(trace), *args, str(fifo))
        reader.join(30)
        assert code in (0, 1), out
        assert not reader.is_alive()
        assert reader.data.lstrip().startswith(b"{") and len(reader.data) > 100
        assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert sorted(os.listdir(tmp_path)) == ["out.fifo", "t.pt.trace.json"]


@pytest.mark.slow  # a real trace analysed whole / a bounded hostile wait: the slow pass
def test_a_fifo_without_a_reader_is_one_line_without_hanging(tmp_path: Path) -> None:
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    trace = _trace(tmp_path / "t.pt.trace.json")
    for opt in ("-o", "--html", "--annotate"):
        code, out = _cli("analyze", str(trace), opt, str(fifo))  # no reader: one line after the short wait for one, never a hang
        assert code == 2 and out.count("\n") == 1 and "FIFO with no reader" in out, out
        assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


# ---------------------------------------------------------------------- /dev/stdout and what it points to


def test_dev_stdout_redirected_to_a_file_is_appended_not_renamed_over(tmp_path: Path) -> None:
    # a private link made as /dev/stdout is (-> /proc/self/fd/1): a broken build renames over this one, not
    # over the system's (which is how the bug was found)
    stdout = tmp_path / "dev" / "stdout"
    stdout.parent.mkdir()
    stdout.symlink_to("/proc/self/fd/1")
    trace = _trace(tmp_path / "t.pt.trace.json")
    out = tmp_path / "captured.txt"
    with open(out, "w") as fh:
        fh.write("before\n")
        fh.flush()
        res = subprocess.run([sys.executable, "-m", "gpuprof", "analyze", str(trace), "--format", "json", "-o",
                              str(stdout)], stdout=fh, stderr=subprocess.PIPE, text=True, timeout=120)
    assert res.returncode in (0, 1), res.stderr
    text = out.read_text()
    assert text.startswith("before\n{") and '"schema_version"' in text
    assert stdout.is_symlink() and os.readlink(stdout) == "/proc/self/fd/1"
    assert os.listdir(stdout.parent) == ["stdout"]


def test_a_block_device_or_socket_is_refused(tmp_path: Path) -> None:
    import socket

    sock_path = tmp_path / "s.sock"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(sock_path))
        with pytest.raises(InputError, match="is a socket, not a regular file"):
            write_output(sock_path, "x", "the report")
        assert stat.S_ISSOCK(os.lstat(sock_path).st_mode)
    node = tmp_path / "blk"
    try:
        os.mknod(node, stat.S_IFBLK | 0o600, os.makedev(7, 200))  # a loop device number; never opened
    except PermissionError:
        return
    with pytest.raises(InputError, match="is a block device"):
        write_output(node, "x", "the report")
    assert stat.S_ISBLK(os.lstat(node).st_mode)


# ---------------------------------------------------------------------- symlinks (the decision, kept)


def test_a_symlink_to_a_regular_file_is_replaced_itself(tmp_path: Path) -> None:
    victim = tmp_path / "victim.json"
    victim.write_text("keep")
    link = tmp_path / "report.json"
    link.symlink_to(victim)
    write_output(link, "report", "the report")
    assert victim.read_text() == "keep"
    assert not link.is_symlink() and link.read_text() == "report"


def test_a_planted_link_at_the_tensorboard_event_file_is_not_written(null_device: Path) -> None:
    pytest.importorskip("tensorboard")
    import itertools
    import socket

    import gpuprof.render.tensorboard as tbw

    logdir = null_device.parent
    # the event file's name is predictable (time, host, pid, counter): plant a link to the device there
    name = f"events.out.tfevents.0000001000.{socket.gethostname()}.{os.getpid()}.777"
    (logdir / name).symlink_to(null_device)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(tbw, "_FILE_IDS", itertools.count(777))
        mp.setattr(tbw.time, "time", lambda: 1000.0)
        with pytest.raises(FileExistsError):
            tbw._EventFile(str(logdir), "")
    assert _is_null_device(null_device) and os.readlink(logdir / name) == str(null_device)


def test_proc_self_fd_of_a_file_is_appended_not_renamed_over(tmp_path: Path) -> None:
    out = tmp_path / "captured.txt"
    out.write_text("before\n")
    with open(out, "a") as fh:
        name = f"/proc/self/fd/{fh.fileno()}"
        write_output(name, "report\n", "the report")
        assert os.path.islink(name)
    assert out.read_text() == "before\nreport\n"
    assert sorted(os.listdir(tmp_path)) == ["captured.txt"]

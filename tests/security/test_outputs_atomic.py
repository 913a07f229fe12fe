"""Outputs are written atomically through a private temporary file, never through a symlink, never over the input."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import gpuprof.atomic as atomic
from gpuprof.atomic import atomic_path, atomic_write, refuse_input_as_output, write_output
from gpuprof.cli import cli
from gpuprof.errors import InputError
from gpuprof_testing.snapshots import MiB, SnapshotBuilder
from gpuprof_testing.tracegen import TraceBuilder

PREVIOUS = b"the previous report, which must survive\n"


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


def _gpuprof(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpuprof", *args], capture_output=True, text=True, timeout=120)


# ---------------------------------------------------------------------- the helper


def test_replaces_the_target_and_leaves_nothing_else(tmp_path: Path) -> None:
    out = tmp_path / "report.md"
    out.write_bytes(PREVIOUS)
    atomic_write(out, "new")
    assert out.read_text() == "new"
    assert os.listdir(tmp_path) == ["report.md"]
    umask = os.umask(0o022)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask  # the mode a plain open() would give, not mkstemp's 0600


def test_symlink_at_target_is_replaced_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(PREVIOUS)
    out = tmp_path / "report.json"
    out.symlink_to(victim)
    atomic_write(out, "report")
    assert victim.read_bytes() == PREVIOUS
    assert not out.is_symlink() and out.read_text() == "report"


def test_planted_links_at_predictable_names_are_not_written(tmp_path: Path) -> None:
    # the names the old writers used: another user of a shared logdir could plant links there
    victim = tmp_path / "victim"
    victim.write_bytes(PREVIOUS)
    out = tmp_path / "report.json"
    for name in ("report.json.tmp", f".report.json.{os.getpid()}.tmp", f"report.json.tmp{os.getpid()}"):
        (tmp_path / name).symlink_to(victim)
    atomic_write(out, "report")
    with atomic_path(tmp_path / "w.pt.trace.json.gz", suffix=".pt.trace.json.gz") as tmp:
        assert tmp.name.endswith(".pt.trace.json.gz") and tmp.name.startswith(".")
        assert tmp.exists() and not tmp.is_symlink() and tmp.stat().st_size == 0
        tmp.write_bytes(b"x")
    assert victim.read_bytes() == PREVIOUS
    assert out.read_text() == "report"


def test_temporary_names_are_unpredictable(tmp_path: Path) -> None:
    names = set()
    for _ in range(5):
        with atomic_path(tmp_path / "r.json") as tmp:
            names.add(tmp.name)
            tmp.write_text("x")
    assert len(names) == 5


def test_error_in_the_writer_keeps_the_previous_file(tmp_path: Path) -> None:
    out = tmp_path / "report.md"
    out.write_bytes(PREVIOUS)
    with pytest.raises(RuntimeError, match="writer broke"):
        with atomic_path(out) as tmp:
            tmp.write_text("half a rep")
            raise RuntimeError("writer broke")
    assert out.read_bytes() == PREVIOUS
    assert os.listdir(tmp_path) == ["report.md"]


def test_enospc_is_one_input_error_and_the_previous_file_stays(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "report.md"
    out.write_bytes(PREVIOUS)

    def full(path: Path) -> None:  # where a full disk shows up on filesystems with delayed allocation
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(atomic, "_fsync_file", full)
    with pytest.raises(InputError) as info:
        write_output(out, "x" * 10_000, "the report")
    msg = str(info.value)
    assert msg.startswith(f"{out}: cannot write the report: No space left on device") and "\n" not in msg
    assert out.read_bytes() == PREVIOUS
    assert os.listdir(tmp_path) == ["report.md"]


def test_same_file_through_symlinks_and_hard_links(tmp_path: Path) -> None:
    src = tmp_path / "t.json"
    src.write_text("{}")
    (tmp_path / "link.json").symlink_to(src)
    os.link(src, tmp_path / "hard.json")
    for other in ("t.json", "link.json", "hard.json", "./t.json"):
        with pytest.raises(InputError, match="is the input"):
            refuse_input_as_output(tmp_path / other, [str(src)])
    refuse_input_as_output(tmp_path / "new.md", [str(src)])  # a new file is never the input


# ---------------------------------------------------------------------- the commands


@pytest.fixture
def full_disk(tmp_path: Path):  # type: ignore[no-untyped-def]
    """A real 256 KiB tmpfs (root only): the write really fails with ENOSPC."""
    mnt = tmp_path / "full"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def _fill(mnt: Path) -> None:
    with open(mnt / "filler", "wb", buffering=0) as fh:
        with pytest.raises(OSError) as info:
            while True:
                fh.write(b"\0" * 4096)
        assert info.value.errno == errno.ENOSPC


def test_full_disk_on_a_real_filesystem(full_disk: Path, tmp_path: Path) -> None:
    trace = _trace(tmp_path / "t.pt.trace.json")
    out = full_disk / "report.md"
    out.write_bytes(PREVIOUS)
    _fill(full_disk)
    r = _gpuprof("analyze", str(trace), "--format", "markdown", "-o", str(out))
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and str(out) in lines[0] and "No space left on device" in lines[0], r.stderr
    assert "Traceback" not in r.stderr
    assert out.read_bytes() == PREVIOUS
    assert sorted(os.listdir(full_disk)) == ["filler", "report.md"]  # no temporary file left behind


def test_full_disk_html(full_disk: Path, tmp_path: Path) -> None:
    snap = _snapshot(tmp_path / "s.pickle")
    out = full_disk / "memory.html"
    out.write_bytes(PREVIOUS)
    _fill(full_disk)
    r = _gpuprof("memory", str(snap), "--html", str(out))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and str(out) in r.stderr, r.stderr
    assert out.read_bytes() == PREVIOUS


def _refused(args: list[str], victim: Path) -> None:
    before = victim.read_bytes()
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 2, res.output
    err = res.stderr if hasattr(res, "stderr") else res.output
    lines = [line for line in err.splitlines() if line.startswith("gpuprof: error:")]
    assert len(lines) == 1 and "is the input" in lines[0], err
    assert victim.read_bytes() == before


def test_analyze_refuses_to_overwrite_its_trace(tmp_path: Path) -> None:
    trace = _trace(tmp_path / "t.pt.trace.json")
    (tmp_path / "link.json").symlink_to(trace)
    os.link(trace, tmp_path / "hard.json")
    for out in (trace, tmp_path / "link.json", tmp_path / "hard.json"):
        _refused(["analyze", str(trace), "-o", str(out)], trace)
        _refused(["analyze", str(trace), "--annotate", str(out)], trace)
    # a directory of traces: the report onto one of the traces found in it
    _refused(["analyze", str(tmp_path), "--format", "json", "-o", str(trace)], trace)


def test_memory_refuses_to_overwrite_its_snapshot(tmp_path: Path) -> None:
    snap = _snapshot(tmp_path / "s.pickle")
    (tmp_path / "link.pickle").symlink_to(snap)
    for out in (snap, tmp_path / "link.pickle"):
        _refused(["memory", str(snap), "--html", str(out)], snap)
        _refused(["memory", str(snap), "-o", str(out)], snap)


def test_commands_still_write_beside_the_input(tmp_path: Path) -> None:
    trace = _trace(tmp_path / "t.pt.trace.json")
    res = CliRunner().invoke(cli, ["analyze", str(trace), "--format", "json", "-o", str(tmp_path / "r.json"),
                                   "--annotate", str(tmp_path / "a.pt.trace.json.gz")])
    assert res.exit_code in (0, 1), res.output
    assert (tmp_path / "r.json").read_text().startswith("{")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.pt.trace.json.gz", "r.json", "t.pt.trace.json"]


def test_each_command_checks_its_output_against_its_inputs_once(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """``-o`` is refused over an input once per command, before any work (not again when the report is written),
    and a saved report's own traces are still among the inputs it may not replace."""
    import gpuprof.cli.analyze as analyze_cli
    import gpuprof.cli.common as common
    import gpuprof.cli.memory as memory_cli

    calls: list[str] = []

    def counted(output: object, inputs: object, what: str = "output") -> None:
        calls.append(what)
        refuse_input_as_output(output, inputs, what)  # type: ignore[arg-type]

    for module in (analyze_cli, common, memory_cli):
        monkeypatch.setattr(module, "refuse_input_as_output", counted)
    trace = _trace(tmp_path / "t.pt.trace.json")
    snap = _snapshot(tmp_path / "s.pickle")
    for argv in (["analyze", str(trace), "--format", "json", "-o", str(tmp_path / "r.json")],
                 ["analyze", str(trace), "-o", str(tmp_path / "r.md"), "--format", "markdown"],
                 ["memory", str(snap), "-o", str(tmp_path / "m.json"), "--format", "json"],
                 ["memory", str(snap), str(snap), "-o", str(tmp_path / "m2.json"), "--format", "json"]):
        calls.clear()
        res = CliRunner().invoke(cli, argv)
        assert res.exit_code in (0, 1), res.output
        assert calls == ["output"], (argv, calls)
    # the report read back from r.json names t.pt.trace.json: -o onto it is refused, and nothing is written
    before = trace.read_bytes()
    res = CliRunner().invoke(cli, ["analyze", str(tmp_path / "r.json"), "-o", str(trace)])
    assert res.exit_code == 2 and "is the input" in res.stderr, res.output
    assert trace.read_bytes() == before

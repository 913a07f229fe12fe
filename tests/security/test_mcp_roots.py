"""``gpuprof mcp``'s roots hold against hostile names: an agent (or a prompt injected into one) asks for anything.

Symlinks out of a root, ``..``, FIFOs, URLs outside a prefix or dressed up to look inside, credentials in
URLs, and export targets outside the roots are refused with one line, as a tool error; nothing blocks.
The server process itself is tested in test_mcp_process.py.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest

from gpuprof.errors import InputError
from gpuprof.mcp.roots import Roots
from gpuprof_testing.tracegen import TraceBuilder, simple_training

from ..cli.mcp_clients import server_for

OUTSIDE = "outside the folders and URL prefixes this server reads"


def trace(path: Path) -> Path:
    return simple_training(TraceBuilder(), steps=3).write(path)


def call(server: Any, name: str, arguments: dict[str, Any], timeout: float = 60.0) -> dict[str, Any]:
    """A tools/call answered within ``timeout`` (a thread: a blocked read fails the test, not the run)."""
    out: list[Any] = []
    worker = threading.Thread(target=lambda: out.append(server.handle(
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name, "arguments": arguments}})),
        daemon=True)
    worker.start()
    worker.join(timeout)
    assert out, f"{name} {arguments} did not answer within {timeout} s"
    result = out[0]["result"]
    assert isinstance(result, dict)
    return result


def error_line(result: dict[str, Any]) -> str:
    assert result["isError"] is True, result["content"][0]["text"][:300]
    text = result["content"][0]["text"]
    assert isinstance(text, str) and "\n" not in text and text.startswith("gpuprof: error: ")
    return text


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, Path]:
    """``root/`` with a trace in ``root/run/``, and ``secret/`` beside it with a trace the server must not read."""
    root, secret = tmp_path / "root", tmp_path / "secret"
    trace(root / "run" / "t.pt.trace.json")
    trace(secret / "s.pt.trace.json")
    return root, secret


def test_a_symlink_out_of_the_root_is_refused(tree: tuple[Path, Path]) -> None:
    root, secret = tree
    (root / "link.json").symlink_to(secret / "s.pt.trace.json")
    (root / "linkdir").symlink_to(secret)
    server = server_for(root)
    for name in ("link.json", "linkdir", "linkdir/s.pt.trace.json", str(root / "link.json")):
        assert OUTSIDE in error_line(call(server, "analyze", {"paths": name}))


def test_a_symlink_out_of_the_root_inside_a_run_folder_refuses_the_folder(tree: tuple[Path, Path]) -> None:
    root, secret = tree
    (root / "run" / "planted.pt.trace.json").symlink_to(secret / "s.pt.trace.json")
    (root / "run" / "report.json").symlink_to(secret / "report.json")  # a capture's report, read for runtime findings
    server = server_for(root)
    line = error_line(call(server, "analyze", {"paths": "run"}))
    assert "holds a symlink leading outside the server's roots" in line
    assert str(secret) not in line  # the target is not told
    for tool, args in (("history", {"logdir": "."}), ("export", {"source": "run"}), ("diff", {"before": "run", "after": "run"})):
        assert "holds a symlink" in error_line(call(server, tool, args))


def test_a_symlink_that_stays_inside_the_root_is_followed(tree: tuple[Path, Path]) -> None:
    root, _ = tree
    (root / "latest").symlink_to(root / "run")
    result = call(server_for(root), "analyze", {"paths": "latest"})
    assert result["isError"] is False and result["structuredContent"]["traces"]


@pytest.mark.parametrize("name", ["..", "../secret/s.pt.trace.json", "run/../../secret", "run/..",
                                  "ROOT/../secret/s.pt.trace.json"])
def test_dot_dot_is_refused_whatever_it_resolves_to(tree: tuple[Path, Path], name: str) -> None:
    root, _ = tree
    name = name.replace("ROOT", str(root))
    line = error_line(call(server_for(root), "analyze", {"paths": name}))
    assert line == f"gpuprof: error: {name}: '..' is refused: name a path inside the roots"


def test_a_fifo_in_the_root_is_refused_without_blocking(tree: tuple[Path, Path]) -> None:
    root, _ = tree
    os.mkfifo(root / "pipe.json")
    os.mkfifo(root / "run" / "pipe.pt.trace.json")
    server = server_for(root)
    for tool, args in (("analyze", {"paths": "pipe.json"}), ("memory", {"file": "pipe.json"}),
                       ("diff", {"before": "pipe.json", "after": "run"}), ("export", {"source": "pipe.json"})):
        line = error_line(call(server, tool, args, timeout=20))
        assert "not a regular file or directory" in line
    # a FIFO inside a run folder is no trace: the folder's real trace is analysed, the FIFO never opened
    result = call(server, "analyze", {"paths": "run"}, timeout=20)
    assert result["isError"] is False and len(result["structuredContent"]["traces"]) == 1


@pytest.mark.parametrize("name", [
    "memory://bucket/other/t.json", "memory://bucket/runs2/t.json", "memory://elsewhere/runs/t.json",
    "memory://bucket/runs/../other/t.json", "memory://bucket/runs/%2e%2e/other/t.json",
    "memory://bucket/runs/./t.json#frag", "s3://bucket/runs/t.json", "file:///etc/passwd",
    "memory://bucket/runs/t.json::file:///etc/passwd", "simplecache::memory://bucket/runs/t.json",
])
def test_a_url_outside_the_prefix_is_refused(tmp_path: Path, name: str) -> None:
    line = error_line(call(server_for(tmp_path, "memory://bucket/runs/"), "analyze", {"paths": name}))
    assert any(words in line for words in (OUTSIDE, "'.' and '..' are refused", "#fragment", "chained URL",
                                           "no such file"))


def test_a_url_under_the_prefix_is_read(tmp_path: Path) -> None:
    fsspec = pytest.importorskip("fsspec")
    fs = fsspec.filesystem("memory")
    data = trace(tmp_path / "t.json").read_bytes()
    with fs.open("/bucket/runs/r1/t.pt.trace.json", "wb") as f:
        f.write(data)
    try:
        server = server_for("memory://bucket/runs")
        ok = call(server, "analyze", {"paths": "MEMORY://Bucket/runs/r1/t.pt.trace.json".replace("Bucket", "bucket")})
        assert ok["isError"] is False and ok["structuredContent"]["traces"][0]["num_steps"] == 3
    finally:
        fs.rm("/bucket", recursive=True)


def test_credentials_in_urls_are_never_echoed(tmp_path: Path) -> None:
    server = server_for("ftp://alice:S3cretRootPw@files.example:2121/runs/")
    listing = server.handle({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}})
    assert "S3cretRootPw" not in str(listing) and "ftp://***@files.example:2121/runs/" in str(listing)
    for name in ("ftp://mallory:HunterPw22@files.example:2121/runs/t.json",       # someone else's login
                 "ftp://alice:S3cretRootPw@files.example:2121/other/t.json",       # outside, with the root's login
                 "ftp://files.example:2121/other/t.json?token=TokSecret99",
                 "https://u:PassWd77@evil.example/x.json"):
        line = error_line(call(server, "analyze", {"paths": name}))
        for secret in ("S3cretRootPw", "HunterPw22", "TokSecret99", "PassWd77"):
            assert secret not in line, line
    assert "read with the root's own login" in error_line(
        call(server, "analyze", {"paths": "ftp://mallory:HunterPw22@files.example:2121/runs/t.json"}))


def test_a_url_under_a_root_is_read_with_the_roots_login() -> None:
    roots = Roots.of(["ftp://alice:S3cretRootPw@files.example:2121/runs/"])
    assert roots.input("ftp://files.example:2121/runs/a/t.json") == "ftp://alice:S3cretRootPw@files.example:2121/runs/a/t.json"
    assert roots.input("FTP://***@FILES.example:2121/runs/b") == "ftp://alice:S3cretRootPw@files.example:2121/runs/b"
    with pytest.raises(InputError, match="outside"):
        roots.input("ftp://files.example:21/runs/a/t.json")  # another port, another server


def test_export_writes_only_under_a_root(tree: tuple[Path, Path], tmp_path: Path) -> None:
    root, secret = tree
    (root / "escape").symlink_to(secret)
    server = server_for(root)
    for output in (str(secret / "tables"), "../secret/tables", "escape", "escape/tables", "s3://bucket/x"):
        error_line(call(server, "export", {"source": "run", "output": output}))
    assert sorted(p.name for p in secret.iterdir()) == ["s.pt.trace.json"]  # nothing written outside
    ok = call(server, "export", {"source": "run", "output": "out/tables"})
    assert ok["isError"] is False and (root / "out" / "tables" / "findings.csv").is_file()


def test_a_refused_export_leaves_no_temporary_folder(tree: tuple[Path, Path], tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    root, _ = tree
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # TMPDIR read again
    (root / "broken.json").write_text("{not a trace")
    error_line(call(server_for(root), "export", {"source": "broken.json"}))
    assert list(temp.iterdir()) == []


def test_roots_themselves_are_checked(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    for bad, words in ((tmp_path / "missing", "no such file"), (tmp_path / "f", "must be a directory")):
        with pytest.raises(InputError, match=words):
            Roots.of([str(bad)])

"""``ftp://user:password@host/...`` inputs against a real FTP server (pyftpdlib, local, in a thread).

A directory or glob URL is listed on the server and each trace read from it
(fsspec's FTP filesystem lists bare paths: gpuprof puts the host and login
back, and a percent-encoded password is decoded for the login); a refused
login is one line, exit 2, with the password masked.
"""

from __future__ import annotations

import json
import shutil
import threading
import uuid
from pathlib import Path
from typing import Iterator
from urllib.parse import quote

import pytest
from click.testing import CliRunner

from gpuprof.cli import cli
from gpuprof_testing import TraceBuilder, simple_training

pytest.importorskip("fsspec")
pytest.importorskip("pyftpdlib")
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # pyftpdlib imports asyncore


class Server:
    def __init__(self, root: Path) -> None:
        from pyftpdlib.authorizers import DummyAuthorizer
        from pyftpdlib.handlers import FTPHandler
        from pyftpdlib.servers import FTPServer

        self.password = f"pw{uuid.uuid4().hex[:8]}/+k=y"  # a "/": the URL carries it encoded (%2F)
        auth = DummyAuthorizer()
        auth.add_user("alice", self.password, str(root), perm="elr")
        handler = type("Handler", (FTPHandler,), {"authorizer": auth, "auth_failed_timeout": 0.01})
        self.server = FTPServer(("127.0.0.1", 0), handler)
        self.port = self.server.socket.getsockname()[1]
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"timeout": 0.2}, daemon=True)
        self.thread.start()

    def url(self, path: str, password: str | None = None) -> str:
        return f"ftp://alice:{quote(password or self.password, safe='+=')}@127.0.0.1:{self.port}/{path}"

    def leaked(self, text: str) -> bool:
        return any(s in text for s in (self.password, quote(self.password, safe="+="), self.password.split("/")[0]))

    def stop(self) -> None:
        self.server.close_all()
        self.thread.join(5)


@pytest.fixture
def ftp(tmp_path: Path) -> Iterator[Server]:
    import logging

    logging.getLogger("pyftpdlib").setLevel(logging.WARNING)
    root = tmp_path / "ftp"
    (root / "run").mkdir(parents=True)
    for rank in range(2):
        tb = TraceBuilder()
        simple_training(tb, steps=3)
        tb.write(root / "run" / f"rank{rank}.pt.trace.json")
    (root / "run" / "notes.txt").write_text("not a trace")
    server = Server(root)
    yield server
    server.stop()
    shutil.rmtree(root, ignore_errors=True)


def _run(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(cli, list(args), env={"COLUMNS": "200"})
    return res.exit_code, res.output


@pytest.mark.parametrize("path", ["run/", "run", "run/*.json", "run/rank1.pt.trace.json"])
def test_ftp_file_directory_and_glob_urls_are_read(ftp: Server, path: str) -> None:
    code, out = _run("analyze", ftp.url(path), "--format", "json")
    assert code in (0, 1), out
    assert not ftp.leaked(out)
    doc = json.loads(out)
    want = 1 if path.endswith("rank1.pt.trace.json") else 2
    assert len(doc["traces"]) == want
    assert all(t["path"].startswith(f"ftp://***@127.0.0.1:{ftp.port}/run/rank") for t in doc["traces"])
    assert all(t["num_steps"] == 3 for t in doc["traces"])


@pytest.mark.parametrize("path", ["run/", "run/*.json", "run/rank0.pt.trace.json"])
def test_a_refused_ftp_login_is_one_line_with_the_password_masked(ftp: Server, path: str) -> None:
    wrong = f"Wr0ng{uuid.uuid4().hex[:6]}+x="
    code, out = _run("analyze", ftp.url(path, wrong))
    assert code == 2, out
    assert out.count("\n") == 1 and "Traceback" not in out
    assert "refused the login" in out and f"ftp://***@127.0.0.1:{ftp.port}/" in out
    assert wrong not in out and not ftp.leaked(out)


def test_a_missing_ftp_path_is_one_line(ftp: Server) -> None:
    code, out = _run("analyze", ftp.url("nowhere/"))
    assert code == 2 and out.count("\n") == 1, out
    assert not ftp.leaked(out) and "***@" in out

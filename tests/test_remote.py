"""Inputs named by URL (gpuprof.remote): fsspec's memory:// and file:// filesystems, globs, gzip, errors."""

from __future__ import annotations

import gzip
import importlib.util
import json
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest
from click.testing import CliRunner

from gpuprof.analysis import analyze
from gpuprof.cli import cli
from gpuprof.errors import InputError
from gpuprof.redact import redact
from gpuprof.remote import Url, is_url, local_or_url
from gpuprof.render import render
from gpuprof_testing import TraceBuilder, simple_training, write_ranks

fsspec = pytest.importorskip("fsspec")


def _job(tb: TraceBuilder, rank: int) -> None:
    for _ in range(3):
        with tb.step():
            tb.gemm(us=300 + (400 if rank == 1 else 0))  # rank 1 computes longer: the others wait for it
            tb.nccl("AllReduce", us=800)
            tb.device_synchronize()


def _findings(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The findings without the fields that name the input (a path here, a URL there)."""
    out = []
    for f in doc["findings"]:
        f = dict(f)
        for key in ("source", "sources", "location"):
            f.pop(key, None)
        out.append(f)
    return out


def _ranks(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Each rank's figures in the cross-rank section, without the path it was read from."""
    return [{k: v for k, v in r.items() if k != "path"} for s in _cross(doc) if s["kind"] == "cross_rank" for r in s["ranks"]]


def _cross(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for s in doc["sections"] if s["kind"] in ("cross_rank", "rank_summaries")]


@pytest.fixture
def mem() -> Iterator[tuple[Any, str]]:
    """A fresh folder in fsspec's in-process memory filesystem, removed afterwards."""
    fs = fsspec.filesystem("memory")
    root = f"/gpuprof-test-{uuid.uuid4().hex[:8]}"
    yield fs, root
    if fs.exists(root):
        fs.rm(root, recursive=True)


def test_urls_are_told_from_paths() -> None:
    assert is_url("s3://bucket/run/rank0.json") and is_url("memory://x") and is_url("file:///tmp/x")
    assert not is_url("C:\\traces\\x.json") and not is_url("-") and not is_url("./s3:/x") and not is_url(Path("x"))
    assert isinstance(local_or_url("gs://b/k.json"), Url) and local_or_url("gs://b/k.json").name == "k.json"
    assert local_or_url("file:///tmp/a%20b/t.json") == Path("/tmp/a b/t.json")  # file:// is the local reader
    with pytest.raises(InputError, match="must name this machine"):
        local_or_url("file://otherhost/tmp/t.json")


def test_file_url_gives_the_same_report_as_the_path(tmp_path: Path) -> None:
    write_ranks(tmp_path / "job", 3, _job)
    by_path = json.loads(render(analyze(str(tmp_path / "job")), "json", color=False))
    by_url = json.loads(render(analyze("file://" + str(tmp_path / "job")), "json", color=False))
    assert by_path["findings"] and _cross(by_path)
    assert by_url["findings"] == by_path["findings"] and _cross(by_url) == _cross(by_path)


def test_memory_filesystem_glob_directory_and_gzip_match_the_local_report(tmp_path: Path, mem: tuple[Any, str]) -> None:
    fs, root = mem
    paths = write_ranks(tmp_path / "job", 3, _job)
    for p in paths:  # rank 0 gzipped: told apart by its first bytes, streamed through the decompressor
        data = p.read_bytes()
        if p.name.startswith("rank0"):
            fs.pipe(f"{root}/run/{p.name}.gz", gzip.compress(data))
        else:
            fs.pipe(f"{root}/run/{p.name}", data)
    fs.pipe(f"{root}/run/notes.txt", b"not a trace")
    local = json.loads(render(analyze(str(tmp_path / "job")), "json", color=False))
    for url in (f"memory://{root}/run", f"memory://{root}/run/rank*.pt.trace.json*"):
        doc = json.loads(render(analyze(url), "json", color=False))
        assert len(doc["traces"]) == 3, url
        assert all(t["path"].startswith("memory://") for t in doc["traces"])
        assert _findings(doc) == _findings(local) and doc["findings"], url
        assert _ranks(doc) == _ranks(local) and len(_ranks(local)) == 3
    one = json.loads(render(analyze(f"memory://{root}/run/rank2.pt.trace.json"), "json", color=False))
    assert len(one["traces"]) == 1 and one["traces"][0]["path"].endswith("rank2.pt.trace.json")


def test_remote_read_is_streamed_in_blocks_not_downloaded_first(tmp_path: Path, mem: tuple[Any, str],
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The decoder pulls the file block by block: no single read asks for the whole object."""
    fs, root = mem
    tb = TraceBuilder()
    simple_training(tb, steps=100)
    data = tb.write(tmp_path / "t.json").read_bytes()
    assert len(data) > 2 << 20, "the trace must span several read blocks"
    fs.pipe(f"{root}/big.json", data)
    from gpuprof import inputs

    sizes: list[int] = []
    real = inputs.Prefixed.readinto

    def spy(self: Any, view: Any) -> int:
        n = real(self, view)
        sizes.append(n)
        return n

    monkeypatch.setattr(inputs.Prefixed, "readinto", spy)
    trace_doc = analyze(f"memory://{root}/big.json")
    assert trace_doc.traces and len(sizes) > 2 and max(sizes) < len(data)


def test_missing_objects_and_packages_are_one_line_errors(mem: tuple[Any, str]) -> None:
    fs, root = mem
    runner = CliRunner()
    res = runner.invoke(cli, ["analyze", f"memory://{root}/nothing/here.json"])
    assert res.exit_code == 2 and res.output.count("\n") == 1 and "no such file" in res.output
    res = runner.invoke(cli, ["analyze", f"memory://{root}/none-*.json"])
    assert res.exit_code == 2 and "matches no file" in res.output and "Traceback" not in res.output
    fs.pipe(f"{root}/t.json", b'{"traceEvents": [')  # truncated: the decoder's own one-line error, naming the URL
    res = runner.invoke(cli, ["analyze", f"memory://{root}/t.json"])
    assert res.exit_code == 2 and f"memory://{root}/t.json" in res.output and res.output.count("\n") == 1
    if importlib.util.find_spec("s3fs") is None:  # without s3fs: the package to install, and no credentials echoed
        res = runner.invoke(cli, ["analyze", "s3://AKIAEXAMPLE:hunter2@bucket/run/rank0.json"])
        assert res.exit_code == 2 and "s3fs" in res.output and "pip install s3fs" in res.output
        assert "hunter2" not in res.output and "AKIAEXAMPLE" not in res.output
        assert res.output.count("\n") == 1


def test_credentials_in_a_url_are_never_shown() -> None:
    assert redact("s3://key:secret@bucket/x.json") == "s3://***@bucket/x.json"
    assert redact("gs://bucket/x.json") == "gs://bucket/x.json"


def test_memory_command_reads_a_snapshot_by_url(mem: tuple[Any, str], tmp_path: Path) -> None:
    from gpuprof_testing.snapshots import SnapshotBuilder

    fs, root = mem
    sb = SnapshotBuilder()
    sb.alloc(64 << 20, frames=sb.stack(("train.py", 12, "step")))
    local = sb.dump(tmp_path / "snap.pickle")
    fs.pipe(f"{root}/snap.pickle", Path(local).read_bytes())
    res = CliRunner().invoke(cli, ["memory", f"memory://{root}/snap.pickle", "--format", "json"])
    assert res.exit_code in (0, 1), res.output
    doc = json.loads(res.output)
    assert doc["command"] == "memory" and doc["inputs"] == [f"memory://{root}/snap.pickle"]


def test_annotate_refuses_a_url(mem: tuple[Any, str], tmp_path: Path) -> None:
    res = CliRunner().invoke(cli, ["analyze", "memory://x/t.json", "--annotate", str(tmp_path / "a.json.gz")])
    assert res.exit_code == 2 and "--annotate needs local trace files" in res.output

"""A password in an input URL never leaves the URL: every output and error line shows it masked.

The URLs here live in fsspec's in-process ``memory://`` filesystem, which
takes everything after ``memory://`` as a path: a "bucket" named
``KEY:se/cr+et=@bucket`` makes a URL of the shape of
``s3://KEY:se/cr+et=@bucket/run/x``, whose secret holds ``/``, ``+`` and
``=``, without a network. The traces and snapshot are the shared real ones
(skipped cleanly without ``../shared``) or built ones.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest
from click.testing import CliRunner

from gpuprof.analysis import analyze
from gpuprof.cli import cli
from gpuprof.errors import InputError, describe_error
from gpuprof.redact import redact, scrub
from gpuprof.render.tbtext import findings_text
from gpuprof_testing import TraceBuilder, simple_training
from gpuprof_testing.realtraces import shared_snapshot, v100_samples

fsspec = pytest.importorskip("fsspec")


class Bucket:
    """A memory:// "bucket" whose URL carries a fresh secret with ``/``, ``+`` and ``=`` in it."""

    def __init__(self) -> None:
        tag = uuid.uuid4().hex[:10]
        self.secret = f"pw{tag}/x+y="
        self.user = f"AKIA{tag.upper()}"
        self.fs = fsspec.filesystem("memory")
        self.root = f"{self.user}:{self.secret}@bucket{tag}"
        self.url = f"memory://{self.root}"

    def put(self, key: str, data: bytes) -> str:
        self.fs.pipe(f"{self.root}/{key}", data)
        return f"{self.url}/{key}"

    def clean(self) -> None:
        top = "/" + self.root.split("/", 1)[0]
        if self.fs.exists(top):
            self.fs.rm(top, recursive=True)

    def assert_masked(self, text: str) -> None:
        """Neither the password (nor its parts on either side of the ``/``) nor the login is in ``text``."""
        for part in (self.secret, self.secret.split("/")[0], self.secret.split("/")[1], self.user):
            assert part not in text, f"{part!r} leaked in: {text[:300]!r}"


@pytest.fixture
def bucket() -> Iterator[Bucket]:
    b = Bucket()
    yield b
    b.clean()


def _trace_bytes(tmp_path: Path) -> bytes:
    tb = TraceBuilder()
    simple_training(tb, steps=4)
    return tb.write(tmp_path / "t.json").read_bytes()


def _run(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args), env={"COLUMNS": "200"})


# --- the masking itself -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("url", "shown"), [
    ("s3://key:secret@bucket/x.json", "s3://***@bucket/x.json"),
    ("ftp://user:pw@host:21/run/", "ftp://***@host:21/run/"),
    ("ftp://user@host/run/", "ftp://***@host/run/"),
    ("s3://AKIA:ab/c+d=@bucket/x", "s3://***@bucket/x"),  # a secret with "/" cannot parse: masked to the last "@"
    ("s3://AKIA:ab@c/d@bucket/x", "s3://***@bucket/x"),  # "@" and "/" in it: the last "@" again
    ("gs://u:p%2Fq@bucket/a/b.json.gz", "gs://***@bucket/a/b.json.gz"),
    ("tls://user:pw@scheduler:8786", "tls://***@scheduler:8786"),
    ("https://h/x.json?X-Amz-Signature=abc123&X-Amz-Date=1", "https://h/x.json?X-Amz-Signature=***&X-Amz-Date=1"),
    ("https://h/x?sv=1&sig=a%2Bb%3D&se=2", "https://h/x?sv=1&sig=***&se=2"),
    ("https://h/x?token=t0k&password=p4ss", "https://h/x?token=***&password=***"),
    # no credentials: shown as given
    ("s3://bucket/run/rank*.json", "s3://bucket/run/rank*.json"),
    ("s3://bucket/model@v2/t.json", "s3://bucket/model@v2/t.json"),
    ("/local/path:with@odd/name.json", "/local/path:with@odd/name.json"),
    ("-", "-"),
])
def test_redact(url: str, shown: str) -> None:
    assert redact(url) == shown
    assert redact(redact(url)) == shown  # masking a masked name changes nothing


def test_a_secret_once_seen_is_scrubbed_from_free_text_in_any_quoting() -> None:
    redact("ftp://bob:Zq9%2Fw+e=@h/x")
    text = scrub("530 login failed for bob with password Zq9/w+e= (raw Zq9%2Fw+e=) at ftp://bob:Zq9%2Fw+e=@h/x")
    assert "Zq9" not in text and "ftp://***@h/x" in text


def test_errors_mask_the_url_they_name() -> None:
    err = InputError("ftp://u:hunter22@h/x.json", "cannot open: ftp://u:hunter22@h/x.json refused")
    assert "hunter22" not in str(err) and str(err).startswith("ftp://***@h/x.json: ")
    assert "hunter22" not in describe_error(OSError("tcp://u:hunter22@h:8786 unreachable"))


# --- every output of `gpuprof analyze` ----------------------------------------------------------------------


def test_analyze_outputs_never_show_the_password(bucket: Bucket, tmp_path: Path) -> None:
    bucket.put("run/rank0.pt.trace.json", _trace_bytes(tmp_path))
    real = v100_samples()[0]  # a real trace for the files written (-o, --html)
    url = bucket.put(f"real/{real.name}", real.read_bytes())
    # (memory:// lists its paths with a leading "/": the files found show as memory:///***@bucket...)
    masked = f"***@{bucket.root.rsplit('@', 1)[1]}/run/"
    for fmt in ("terminal", "markdown", "json"):
        res = _run("analyze", bucket.url + "/run/", "--format", fmt)
        assert res.exit_code in (0, 1), res.output
        bucket.assert_masked(res.output)
        assert masked in res.output
    page, out = tmp_path / "r.html", tmp_path / "r.json"
    res = _run("analyze", url, "--format", "json", "-o", str(out), "--html", str(page))
    assert res.exit_code in (0, 1), res.output
    bucket.assert_masked(res.output)
    for f in (page, out):
        bucket.assert_masked(f.read_text())
    doc = json.loads(out.read_text())
    assert doc["inputs"] == [redact(url)] and doc["inputs"][0].startswith("memory://***@")
    assert [t["path"] for t in doc["traces"]] == [redact(url)]
    assert all(f.get("source") in (None, redact(url)) for f in doc["findings"])
    assert redact(url) in page.read_text()


def test_tensorboard_text_never_shows_the_password(bucket: Bucket, tmp_path: Path) -> None:
    url = bucket.put("run/rank0.pt.trace.json", _trace_bytes(tmp_path))
    report = analyze(bucket.url + "/run/*.json")
    assert report.inputs == [redact(bucket.url + "/run/*.json")]
    text = findings_text(report) + "\n".join(t.path for t in report.traces)
    bucket.assert_masked(text)
    assert report.traces[0].path.replace(":///", "://") == redact(url)  # memory:// lists "/bucket/..."


def test_error_lines_never_show_the_password(bucket: Bucket, tmp_path: Path) -> None:
    bucket.put("run/rank0.pt.trace.json", b'{"traceEvents": [')  # truncated
    for target, why in ((bucket.url + "/run/rank0.pt.trace.json", ""), (bucket.url + "/nothing/here.json", "no such"),
                        (bucket.url + "/run/*.gz", "matches no file"), (bucket.url + "/run/x[", "")):
        res = _run("analyze", target)
        assert res.exit_code == 2, res.output
        assert res.output.count("\n") == 1 and why in res.output, res.output
        bucket.assert_masked(res.output)
        assert "***@" in res.output


# --- gpuprof memory and gpuprof diff ------------------------------------------------------------------------


def test_memory_output_and_refusals_never_show_the_password(bucket: Bucket, tmp_path: Path) -> None:
    snap = shared_snapshot("cs336_magma_memory_snapshot.pickle")
    url = bucket.put("snap/s.pickle", snap.read_bytes())
    for fmt in ("terminal", "markdown", "json"):
        res = _run("memory", url, "--format", fmt)
        assert res.exit_code in (0, 1), res.output
        bucket.assert_masked(res.output)
        assert redact(url) in res.output
    page = tmp_path / "m.html"
    res = _run("memory", url, "--html", str(page))
    assert res.exit_code in (0, 1), res.output
    bucket.assert_masked(page.read_text())
    evil = bucket.put("snap/evil.pickle", b"\x80\x04cos\nsystem\n.")  # a pickle that imports: refused
    res = _run("memory", evil)
    assert res.exit_code == 2 and res.output.count("\n") == 1, res.output
    bucket.assert_masked(res.output)
    res = _run("memory", bucket.url + "/snap/missing.pickle")
    assert res.exit_code == 2 and res.output.count("\n") == 1, res.output
    bucket.assert_masked(res.output)


def test_diff_of_urls_never_shows_the_password(bucket: Bucket, tmp_path: Path) -> None:
    data = _trace_bytes(tmp_path)
    for side in ("a", "b"):
        bucket.put(f"{side}/rank0.pt.trace.json", data)
    before, after = bucket.url + "/a/", bucket.url + "/b/*.json"
    page = tmp_path / "d.html"
    res = _run("diff", before, after, "--format", "json", "--html", str(page))
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output[res.output.index("{"):])
    assert doc["before"]["label"] == redact(before) and doc["after"]["label"] == redact(after)
    assert doc["before"]["traces"] == 1 and doc["after"]["steps"] == 4  # the URLs were read
    bucket.assert_masked(res.output)
    bucket.assert_masked(page.read_text())
    for fmt in ("terminal", "markdown"):
        res = _run("diff", before, after, "--format", fmt)
        assert res.exit_code == 0, res.output
        bucket.assert_masked(res.output)
        assert "***@" in res.output.replace("\\*", "*")  # markdown escapes the stars
    res = _run("diff", before, bucket.url + "/nowhere/")
    assert res.exit_code == 2 and res.output.count("\n") == 1, res.output
    bucket.assert_masked(res.output)


@pytest.mark.slow  # analyses the four V100 samples twice
def test_diff_reads_urls_as_it_reads_local_files(bucket: Bucket) -> None:
    samples = v100_samples()
    for p in samples:
        bucket.put(f"{p.parent.name}/{p.name}", p.read_bytes())
    local = _run("diff", str(samples[0].parent), str(samples[2].parent), "--format", "json")
    assert local.exit_code == 0, local.output
    res = _run("diff", bucket.url + "/resnet50_num_workers_0/", bucket.url + "/resnet50_num_workers_4/*.gz",
               "--format", "json")
    assert res.exit_code == 0, res.output
    doc, ref = json.loads(res.output), json.loads(local.output)
    assert doc["metrics"] == ref["metrics"] and doc["findings"]["removed"] == ref["findings"]["removed"]
    assert doc["before"]["traces"] == 2 and doc["after"]["traces"] == 2
    bucket.assert_masked(res.output)


def test_a_dask_address_never_shows_its_credentials(tmp_path: Path) -> None:
    pytest.importorskip("distributed")
    trace = tmp_path / "t.json"
    trace.write_bytes(_trace_bytes(tmp_path))
    res = CliRunner().invoke(cli, ["analyze", str(trace), "--dask", "tcp://sched:Dk9pw0rd@127.0.0.1:9"],
                             env={"DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "2s"})
    assert res.exit_code == 2, res.output
    assert "Dk9pw0rd" not in res.output and "tcp://***@127.0.0.1:9" in res.output


# --- listing: linear, capped ----------------------------------------------------------------------------------


class _Counting:
    """Counts the calls of a filesystem's metadata and listing methods (patched on its class for a test)."""

    METHODS = ("info", "isdir", "isfile", "exists", "size", "ls", "_ls_from_cache")

    def __init__(self, monkeypatch: pytest.MonkeyPatch, fs: Any) -> None:
        self.calls: dict[str, int] = {}
        cls = type(fs)
        for name in self.METHODS:
            if hasattr(cls, name):
                monkeypatch.setattr(cls, name, self._wrap(name, getattr(cls, name)))

    def _wrap(self, name: str, fn: Any) -> Any:
        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] = self.calls.get(name, 0) + 1
            return fn(*args, **kwargs)
        return counted

    def metadata(self) -> int:
        """Requests about one object each (the storm a listing must not make)."""
        return sum(self.calls.get(m, 0) for m in ("info", "isdir", "isfile", "exists", "size"))


@pytest.mark.parametrize("how", ["glob", "prefix"])
def test_listing_many_objects_makes_no_request_per_object(bucket: Bucket, monkeypatch: pytest.MonkeyPatch,
                                                          how: str) -> None:
    from gpuprof.remote import find_remote

    n = 1200
    for i in range(n):
        bucket.put(f"run/r{i // 400}/rank{i}.pt.trace.json", b"{}")
    bucket.put("run/r0/notes.txt", b"")
    counting = _Counting(monkeypatch, bucket.fs)
    url = bucket.url + ("/run/*/rank*.pt.trace.json" if how == "glob" else "/run/")
    found = find_remote(url, lambda name: name.endswith(".json"))
    assert len(found) == n and found == sorted(found)
    assert counting.metadata() <= 4, counting.calls  # a few, whatever n; the old code asked isdir() of every match: n calls
    assert counting.calls.get("ls", 0) <= 3 + 2, counting.calls  # one listing per folder (run, r0..r2), not per file


def test_a_glob_past_the_cap_is_one_line(bucket: Bucket, monkeypatch: pytest.MonkeyPatch) -> None:
    for i in range(12):
        bucket.put(f"run/rank{i}.pt.trace.json", b"{}")
    monkeypatch.setenv("GPUPROF_MAX_URL_MATCHES", "10")
    for url in (bucket.url + "/run/*.json", bucket.url + "/run/"):
        res = _run("analyze", url)
        assert res.exit_code == 2 and res.output.count("\n") == 1, res.output
        assert "names 12 files" in res.output and "GPUPROF_MAX_URL_MATCHES" in res.output
        bucket.assert_masked(res.output)
    monkeypatch.setenv("GPUPROF_MAX_URL_MATCHES", "12")  # at the cap: read (and found to be no traces)
    res = _run("analyze", bucket.url + "/run/*.json")
    assert "GPUPROF_MAX_URL_MATCHES" not in res.output


def test_the_http_hint_names_the_package_whose_import_failed() -> None:
    from gpuprof.remote import _package_for

    try:
        try:
            raise ModuleNotFoundError("No module named 'aiohttp'", name="aiohttp")
        except ImportError as inner:  # as fsspec does: its registry's message, "from" the import that failed
            raise ImportError('HTTPFileSystem requires "requests" and "aiohttp" to be installed') from inner
    except ImportError as err:
        assert _package_for("https", err) == "the aiohttp package (pip install aiohttp)"
    # a protocol served by another project's package: the registry names it
    assert _package_for("s3", ImportError("Install s3fs to access S3")) == "the s3fs package (pip install s3fs)"


def test_a_missing_protocol_package_is_one_line_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from fsspec.registry import known_implementations

    monkeypatch.setitem(known_implementations, "gpuproftest",
                        {"class": "gpuprof_no_such_pkg.fs.FS", "err": "Install gpuprof_no_such_pkg"})
    res = _run("analyze", "gpuproftest://user:Pw0rd1x@host/x.json")
    assert res.exit_code == 2 and res.output.count("\n") == 1, res.output
    assert "pip install gpuprof_no_such_pkg" in res.output and "Pw0rd1x" not in res.output


@pytest.mark.parametrize(("url", "inner", "listed", "want"), [
    # a filesystem bound to one host lists bare paths: the URL's scheme, login and host go back in front
    ("ftp://d:pw@h:21/data/", "/data", "/data/x.json", "ftp://d:pw@h:21/data/x.json"),
    ("hdfs://nn:8020/data/", "/data", "/data/x.json", "hdfs://nn:8020/data/x.json"),
    # stores with buckets keep the bucket (or container) in the path: fsspec rebuilds the URL
    ("s3://bucket/run/", "bucket/run", "bucket/run/x.json", "s3://bucket/run/x.json"),
    ("abfs://cont@acct.dfs.core.windows.net/run/", "cont/run", "cont/run/x.json", "abfs://cont/run/x.json"),
])
def test_listed_paths_become_urls_that_open_alone(url: str, inner: str, listed: str, want: str) -> None:
    from gpuprof.remote import _url_maker

    class Fs:
        protocol = url.split("://")[0]

        def unstrip_protocol(self, p: str) -> str:
            return f"{self.protocol}://{p}"

    assert _url_maker(url, Fs(), inner)(listed) == want


def test_history_of_a_url_masks_the_password(bucket: Bucket, tmp_path: Path) -> None:
    """`gpuprof history URL`: the run names, the root, the notes (a bad report), the HTML page and errors."""
    doc = {"schema_version": "1.2", "inputs": [], "sections": [], "notes": [], "findings": [],
           "traces": [{"path": "t", "num_steps": 2, "step_time_us": 100.0, "step_time_mean_us": 100.0, "gpu_busy_us": 0.0,
                       "gpu_utilization": None, "breakdown_us": {}, "idle_breakdown_us": {}}]}
    for run in ("a", "b"):
        bucket.put(f"logs/{run}/report.json", json.dumps(doc).encode())
    bucket.put("logs/bad/report.json", b"{not json")
    page = tmp_path / "h.html"
    for fmt in ("json", "terminal"):
        res = CliRunner().invoke(cli, ["history", f"{bucket.url}/logs", "--format", fmt, "--html", str(page)])
        assert res.exit_code == 0, res.output
        assert "a" in res.stdout and "bad/report.json" in res.output
        bucket.assert_masked(res.output)
        bucket.assert_masked(page.read_text(encoding="utf-8"))
    names = [r["name"] for r in json.loads(CliRunner().invoke(cli, ["history", f"{bucket.url}/logs", "--format",
                                                                    "json"]).stdout)["runs"]]
    assert sorted(names) == ["a", "b"]
    res = CliRunner().invoke(cli, ["history", f"{bucket.url}/nothing"])
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1
    bucket.assert_masked(res.output)


def test_export_of_a_url_masks_the_password_in_every_table(bucket: Bucket, tmp_path: Path) -> None:
    url = bucket.put("run/t.pt.trace.json", _trace_bytes(tmp_path))
    res = _run("export", url, "-o", str(tmp_path / "out"))
    assert res.exit_code == 0, res.output
    bucket.assert_masked(res.output)
    files = sorted((tmp_path / "out").iterdir())
    assert len(files) == 6 and "t.pt.trace.json" in (tmp_path / "out" / "steps.csv").read_text(encoding="utf-8")
    for f in files:
        bucket.assert_masked(f.read_text(encoding="utf-8"))

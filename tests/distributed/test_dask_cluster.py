"""``--dask``: ranks analysed on a real dask.distributed LocalCluster (127.0.0.1, two worker processes)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest
from click.testing import CliRunner

from gpuprof.analysis import analyze
from gpuprof.cli import cli
from gpuprof.errors import InputError
from gpuprof.render import render
from gpuprof_testing import TraceBuilder, write_ranks

pytestmark = pytest.mark.frameworks  # a real LocalCluster: worker processes that import dask
distributed = pytest.importorskip("distributed")


def _job(tb: TraceBuilder, rank: int) -> None:
    for _ in range(3):
        with tb.step():
            tb.gemm(us=300 + (500 if rank == 2 else 0))
            tb.nccl("AllReduce", us=800)
            tb.device_synchronize()


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    import dask

    # allowed-failures=0: a task whose worker dies is given up at once (the default, 3, restarts workers 3 times)
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}), distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=":0",
        silence_logs=40,
    ) as c:
        yield c


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("dask") / "job"
    write_ranks(d, 4, _job)
    return d


def test_cli_dask_gives_the_local_report_bit_for_bit(cluster: Any, job: Path) -> None:
    runner = CliRunner()
    local = runner.invoke(cli, ["analyze", str(job), "--format", "json", "-j", "1"])
    remote = runner.invoke(cli, ["analyze", str(job), "--dask", cluster.scheduler_address, "--format", "json"])
    assert local.exit_code == remote.exit_code and local.exit_code in (0, 1), remote.output
    a, b = json.loads(local.output), json.loads(remote.output)
    assert any(s["kind"] == "cross_rank" for s in a["sections"]) and a["findings"]
    assert a == b
    # the same directory through a file:// URL, on the cluster: the same figures and findings
    url = runner.invoke(cli, ["analyze", "file://" + str(job), "--dask", cluster.scheduler_address, "--format", "json"])
    c = json.loads(url.output)
    assert c["findings"] == a["findings"] and c["sections"] == a["sections"]


def test_python_api_takes_a_client_and_reports_progress(cluster: Any, job: Path) -> None:
    seen: list[tuple[int, int]] = []
    with distributed.Client(cluster, set_as_default=False) as client:
        report = analyze(str(job), dask=client, on_rank_done=lambda d, t: seen.append((d, t)))
        assert client.status == "running"  # a client we were given is the caller's to close
    assert seen == [(1, 4), (2, 4), (3, 4), (4, 4)]
    assert len(report.traces) == 4 and not report.failed_ranks


def test_cli_progress_line_counts_ranks(cluster: Any, job: Path) -> None:
    res = CliRunner().invoke(cli, ["analyze", str(job), "--dask", cluster.scheduler_address, "--progress",
                                   "--format", "json", "-o", os.devnull])
    assert "4/4 traces analysed on the cluster" in res.output


def test_a_failing_task_is_retried_once_then_a_failed_rank(cluster: Any) -> None:
    from gpuprof.cluster import RankFailure, run_on_dask

    # pow(f, -1): 0 raises ZeroDivisionError on the worker (twice: the retry), 2 works
    out = run_on_dask(cluster.scheduler_address, [2, 0], pow, (-1,))  # type: ignore[list-item]
    assert out[0] == 0.5
    assert isinstance(out[1], RankFailure) and "ZeroDivisionError" in out[1].reason and out[1].path == "0"


def test_a_worker_that_dies_is_a_failed_rank_not_a_hang(cluster: Any) -> None:
    from gpuprof.cluster import RankFailure, run_on_dask

    out = run_on_dask(cluster.scheduler_address, [3], os._exit, ())  # type: ignore[list-item]
    assert isinstance(out[0], RankFailure) and "KilledWorker" in out[0].reason
    cluster.wait_for_workers(2, timeout=60)  # the nanny brings the worker back for the next test


def test_failed_rank_is_named_and_the_cross_rank_report_covers_the_rest(job: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The report's side of a failed rank: a note, ``failed_ranks``, and the others still compared."""
    import gpuprof.cluster as cl
    from gpuprof.analysis import _analyze_one

    def fake(scheduler: Any, files: list[Any], task: Any, args: tuple[Any, ...], on_done: Any = None) -> list[Any]:
        return [cl.RankFailure(str(f), "KilledWorker: gone") if i == 1 else task(f, *args) for i, f in enumerate(files)]

    monkeypatch.setattr(cl, "run_on_dask", fake)
    report = analyze(str(job), dask="tcp://unused:1")
    assert report.failed_ranks == [str(job / "rank1.pt.trace.json")]
    assert any("rank1.pt.trace.json failed on the cluster" in n and "KilledWorker" in n for n in report.notes)
    cross = [s for s in report.sections if s.kind == "cross_rank"]
    assert cross and sorted(r.rank for r in cross[0].ranks) == [0, 2, 3]
    doc = json.loads(render(report, "json", color=False))
    assert doc["failed_ranks"] == report.failed_ranks
    del _analyze_one


def test_unreachable_scheduler_is_a_one_line_error(job: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    import gpuprof.cluster as cl

    monkeypatch.setattr(cl, "CONNECT_TIMEOUT_S", 3.0)
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    res = CliRunner().invoke(cli, ["analyze", str(job), "--dask", f"tcp://127.0.0.1:{port}"])
    assert res.exit_code == 2 and "cannot reach the Dask scheduler" in res.output
    assert res.output.count("\n") == 1 and "Traceback" not in res.output


def test_without_dask_installed_the_option_names_the_package(job: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed -> ImportError
    with pytest.raises(InputError, match=r"dask\.distributed package.*'dask' extra"):
        analyze(str(job), dask="tcp://127.0.0.1:8786")

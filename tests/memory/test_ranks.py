"""``gpuprof memory S0 S1 S2 S3``: several ranks' snapshots give one cross-rank view: identical within the stated
tolerance, or which rank holds more and where. Planted ranks (gpuprof_testing.snapshots), exact numbers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpuprof.cli import cli
from gpuprof_testing.snapshots import GiB, MiB, SnapshotBuilder


def _rank(extra_mib: int = 0) -> SnapshotBuilder:
    """One FSDP-like rank on a 1 GiB device: 12 x 64 MiB shards and gathered weights, then a 300 MiB request that
    fails; ``extra_mib`` more held at ``train.py:77 (main)`` before it."""
    b = SnapshotBuilder(device_memory=1 * GiB, requested_sizes=True)
    big = b.stack(("/home/u/proj/fsdp.py", 80, "all_gather"), ("/home/u/proj/train.py", 40, "main"))
    for _ in range(12):
        b.alloc(64 * MiB, big)
    if extra_mib:
        b.alloc(extra_mib * MiB, b.stack(("/home/u/proj/train.py", 77, "main")))
    with pytest.raises(MemoryError):
        b.alloc(300 * MiB, big)
    return b


def _run(*paths: Path) -> tuple[int, dict]:
    res = CliRunner().invoke(cli, ["memory", *map(str, paths), "--format", "json"])
    return res.exit_code, json.loads(res.output)


def test_four_identical_ranks_are_said_to_be_identical(tmp_path: Path) -> None:
    paths = [Path(_rank().dump(tmp_path / f"rank{i}.pickle")) for i in range(4)]
    code, rep = _run(*paths)
    assert code == 1  # the OOM (GP512, error)
    view = next(s for s in rep["sections"] if "verdict" in s)
    assert view["verdict"] == "identical" and len(view["ranks"]) == 4
    assert [r["rank"] for r in view["ranks"]] == [0, 1, 2, 3]
    assert all(r["oom_requested"] == 300 * MiB and r["moment"] == "oom" for r in view["ranks"])
    assert "the 4 ranks are identical within 1% (or 2.00 MiB)" in view["summary"]
    assert "every rank ran out of memory asking for 300.00 MiB" in view["summary"]
    gp512 = [f for f in rep["findings"] if f["code"] == "GP512"]
    assert len(gp512) == 1 and gp512[0]["message"].endswith("(the same on 4 of the 4 ranks)")
    assert sum(1 for s in rep["sections"] if "devices" in s) == 4  # each rank's own section is kept


def test_the_rank_holding_more_is_named_with_where(tmp_path: Path) -> None:
    paths = [Path(_rank(96 if i == 2 else 0).dump(tmp_path / f"rank{i}.pickle")) for i in range(4)]
    _, rep = _run(*paths)
    view = next(s for s in rep["sections"] if "verdict" in s)
    assert view["verdict"] == "different"
    w = view["where"]
    assert w["most"] == "rank 2 (rank2.pickle cuda:0)" and w["more_bytes"] == 96 * MiB
    assert w["sites"][0] == {"site": "/home/u/proj/train.py:77 (main)", "bytes": 96 * MiB}
    assert "rank 2 (rank2.pickle cuda:0) holds 96.00 MiB more than rank 0" in view["summary"]


def test_one_bad_rank_file_is_one_error_line(tmp_path: Path) -> None:
    good = Path(_rank().dump(tmp_path / "rank0.pickle"))
    bad = tmp_path / "rank1.pickle"
    bad.write_bytes(b"\x80\x04not a pickle")
    res = CliRunner().invoke(cli, ["memory", str(good), str(bad)])
    assert res.exit_code == 2
    assert "rank1.pickle" in res.output and "Traceback" not in res.output


def test_html_takes_one_file(tmp_path: Path) -> None:
    a = Path(_rank().dump(tmp_path / "rank0.pickle"))
    res = CliRunner().invoke(cli, ["memory", str(a), str(a), "--html", str(tmp_path / "p.html")])
    assert res.exit_code == 2 and not (tmp_path / "p.html").exists()

"""``memory diff`` of two different programs says so and names no leak: the programs are told apart by the user
frames on their recorded stacks (overlap under 50 %) or by the scripts their stacks start in."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpuprof.cli import cli
from gpuprof.memory.diff import diff_memory, same_program
from gpuprof.memory.snapshot import parse_snapshot
from gpuprof_testing.realtraces import shared_snapshot
from gpuprof_testing.snapshots import MiB, SnapshotBuilder


def _program(script: str, lines: list[tuple[str, int, str]], buffer_mib: int) -> SnapshotBuilder:
    """A program whose stacks run through ``lines`` (innermost first) from ``script``'s top level, holding a
    ``buffer_mib`` MiB buffer allocated at ``model.py:40 (forward)``."""
    b = SnapshotBuilder()
    top = (f"/home/u/{script}", 10, "<module>")
    for ln in lines:
        b.alloc(2 * MiB, b.stack(ln, top))
    b.alloc(buffer_mib * MiB, b.stack(("/home/u/model.py", 40, "forward"), top))
    return b


def _diff(a: SnapshotBuilder, b: SnapshotBuilder) -> tuple[dict, list]:
    section, findings = diff_memory(parse_snapshot(a.snapshot(), "a.pickle"), parse_snapshot(b.snapshot(), "b.pickle"))
    return section.to_dict(), findings


def test_two_different_scripts_are_said_to_be_so_and_no_leak_is_named() -> None:
    a = _program("bench_attention.py", [("/home/u/attn.py", n, "attend") for n in range(20, 30)], 64)
    b = _program("finetune.py", [("/home/u/lora.py", n, "adapt") for n in range(50, 60)], 512)
    sec, findings = _diff(a, b)
    assert sec["programs"]["verdict"] == "different"
    assert sec["programs"]["shared_frames"] == 1  # model.py:40 only, of 12 frames each
    assert not findings  # the former code: GP520 "steady growth" of the buffer at model.py:40 (+448 MiB)
    row = next(r for r in sec["devices"][0]["sites"] if r["site"].startswith("/home/u/model.py:40"))
    assert row["growth"] == 448 * MiB and row["growth_kind"] == "different_programs"
    assert any("are different programs" in n and "no leak is named" in n for n in sec["notes"])


def test_scripts_sharing_a_model_but_started_from_different_files_are_different_programs() -> None:
    shared = [("/home/u/model.py", n, "forward") for n in range(60, 80)]
    a = _program("train_ddp.py", shared, 64)
    b = _program("train_fsdp.py", shared, 512)
    verdict = same_program(parse_snapshot(a.snapshot(), "a"), parse_snapshot(b.snapshot(), "b"))
    assert verdict["overlap"] == round(21 / 22, 4)  # all but the top-level line of each script
    assert verdict["scripts_before"] == ["train_ddp.py"]
    assert verdict["verdict"] == "different"
    sec, findings = _diff(a, b)
    assert not findings and "ran different scripts (train_ddp.py vs train_fsdp.py)" in " ".join(sec["notes"])


def test_two_moments_of_one_program_still_name_the_leak() -> None:
    b = SnapshotBuilder()
    top = ("/home/u/train.py", 10, "<module>")
    leak = b.stack(("/home/u/train.py", 61, "main"), top)
    for n in range(12):
        b.alloc(2 * MiB, b.stack(("/home/u/model.py", 60 + n, "forward"), top))
    a = parse_snapshot(b.snapshot(), "a")
    for _ in range(20):
        b.alloc(2 * MiB, leak)
    sec, findings = diff_memory(a, parse_snapshot(b.snapshot(), "b"))
    assert sec.programs is not None and sec.programs["verdict"] == "same"
    assert [f.code for f in findings] == ["GP520"] and findings[0].location is not None
    assert findings[0].location.line == 61


@pytest.mark.slow  # two real snapshots analysed whole
def test_real_snapshots_of_two_different_programs_name_no_leak() -> None:
    a, b = shared_snapshot("eor_nn_snapshot.pickle"), shared_snapshot("ftcourse_memory_snapshot.pickle")
    res = CliRunner().invoke(cli, ["memory", "diff", str(a), str(b), "--format", "json"])
    assert res.exit_code == 0, res.output  # the former code: two GP520 warnings (exit 1)
    rep = json.loads(res.output)
    assert rep["sections"][0]["programs"]["verdict"] == "different" and not rep["findings"]


@pytest.mark.slow
def test_real_pair_of_one_program_is_the_same_program(tmp_path: Path) -> None:
    a, b = shared_snapshot("cs336kk_ctx128_fwd_fp32.pickle"), shared_snapshot("cs336kk_ctx128_fwd_mixed.pickle")
    res = CliRunner().invoke(cli, ["memory", "diff", str(a), str(b), "--format", "json"])
    rep = json.loads(res.output)
    assert rep["sections"][0]["programs"]["verdict"] == "same"
    assert {f["code"] for f in rep["findings"]} == {"GP522"}  # autocast's one-time growth, as before

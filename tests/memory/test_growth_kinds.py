"""Growth told apart from leaks: one-time growth (optimizer state, gradients, autocast, caches) is info that says
what it is; only steady growth is a GP520 warning naming the line that keeps it."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from gpuprof.cli import cli
from gpuprof.findings import Severity
from gpuprof.memory.diff import diff_report
from gpuprof_testing.realtraces import shared_snapshot
from gpuprof_testing.snapshots import GiB, MiB, SnapshotBuilder

from .conftest import model_weights, train_steps

ADAM = ("/usr/lib/python3/dist-packages/torch/optim/adam.py", 160, "_init_group")
STEP = ("/usr/lib/python3/dist-packages/torch/optim/optimizer.py", 480, "wrapper")


def _diff_json(a: Path | str, b: Path | str) -> tuple[int, dict[str, Any]]:
    res = CliRunner().invoke(cli, ["memory", "diff", str(a), str(b), "--format", "json"])
    return res.exit_code, json.loads(res.output)


def test_planted_per_step_leak_is_a_steady_leak_with_its_line(leak_pair: tuple[Path, Path]) -> None:
    a, b = leak_pair
    report = diff_report(str(a), str(b))
    leaks = [f for f in report.findings if f.code == "GP520"]
    assert len(leaks) == 1 and leaks[0].severity is Severity.WARNING
    assert (leaks[0].location.file, leaks[0].location.line) == ("/home/u/proj/train.py", 61)  # type: ignore[union-attr]
    assert "steady" in leaks[0].message
    row = report.sections[0].devices[0]["sites"][0]
    assert row["growth_kind"] == "steady" and row["one_time"] == []
    assert not any(f.code == "GP522" for f in report.findings)


def test_first_optimizer_step_is_one_time_growth_not_a_leak(tmp_path: Path) -> None:
    """Before: a forward and backward only; after: the first optimizer step made Adam's state (2 x 40 MiB per
    weight). That is info naming the optimizer state, no GP520, and the diff exits 0."""
    b = SnapshotBuilder(device_memory=16 * GiB)
    weights = model_weights(b)
    train_steps(b, 1, leak_every_step=False)
    a = Path(b.dump(tmp_path / "fwd_bwd.pickle"))
    state = b.stack(ADAM, STEP, ("/home/u/proj/train.py", 57, "main"), torch_frames=False)
    for _ in weights:
        b.alloc(40 * MiB, state)
        b.alloc(40 * MiB, state)
    train_steps(b, 1, leak_every_step=False)
    after = Path(b.dump(tmp_path / "full_step.pickle"))
    code, rep = _diff_json(a, after)
    assert code == 0
    assert [f["code"] for f in rep["findings"]] == ["GP522"]
    f = rep["findings"][0]
    assert f["severity"] == "info" and "optimizer state" in f["message"]
    assert f["evidence"][0]["value"] == 8 * 40 * MiB
    row = rep["sections"][0]["devices"][0]["sites"][0]
    assert (row["growth_kind"], row["one_time"]) == ("one_time", ["optimizer_state"])


def test_a_real_autocast_pair_is_one_time_growth_not_a_leak() -> None:
    """The same LM forward in fp32 and under autocast (a real pair): the growth is the cast copies autocast
    keeps; the test checks, in the raw pickle, that the grown bytes were allocated under autocast."""
    fp32 = shared_snapshot("cs336kk_ctx128_fwd_fp32.pickle")
    mixed = shared_snapshot("cs336kk_ctx128_fwd_mixed.pickle")
    code, rep = _diff_json(fp32, mixed)
    assert code == 0
    assert not any(f["code"] == "GP520" for f in rep["findings"])
    grown = [r for r in rep["sections"][0]["devices"][0]["sites"] if r["growth"] >= 16 * MiB]
    assert grown and all(r["growth_kind"] == "one_time" and "autocast" in r["one_time"] for r in grown)
    assert {f["code"] for f in rep["findings"]} == {"GP522"}
    # independent: live bytes at the top grown site, split by whether an autocast frame made them
    top = grown[0]

    def at_site(path: Path) -> tuple[int, int]:
        with open(path, "rb") as fh:
            raw = pickle.load(fh)  # noqa: S301 - a real snapshot of the shared data set, plain containers
        under = other = 0
        for seg in raw["segments"]:
            for blk in seg["blocks"]:
                if blk["state"] != "active_allocated":
                    continue
                frames = blk.get("frames") or []
                user = [f for f in frames if f["filename"] == top["file"] and f["line"] == top["line"]]
                if not user:
                    continue
                if any("at::autocast::" in f["name"] for f in frames):
                    under += blk["size"]
                else:
                    other += blk["size"]
        return under, other

    under_a, other_a = at_site(fp32)
    under_b, other_b = at_site(mixed)
    assert under_a == 0 and under_b > 0
    assert (under_b - under_a) >= 0.9 * top["growth"]


def test_first_backward_gradients_are_one_time_growth(tmp_path: Path) -> None:
    """Before: forward only. After: a backward pass left each weight's gradient (allocated by the engine's
    backward node, handed to .grad without a copy, so no AccumulateGrad frame) and the next step began."""
    engine = [{"filename": "??", "line": 0, "name": "torch::autograd::generated::AddmmBackward0::apply"},
              {"filename": "??", "line": 0, "name": "torch::autograd::Engine::evaluate_function"}]
    b = SnapshotBuilder(device_memory=16 * GiB)
    weights = model_weights(b)
    train_steps(b, 1, leak_every_step=False)
    a = Path(b.dump(tmp_path / "forward_only.pickle"))
    temp = b.alloc(64 * MiB, engine)  # an intermediate gradient: freed inside the backward pass
    for _ in weights:
        b.alloc(40 * MiB, engine)  # the weights' gradients: kept
    b.free(temp)
    train_steps(b, 1, leak_every_step=False)  # the next forward: the backward pass has ended
    after = Path(b.dump(tmp_path / "after_backward.pickle"))
    code, rep = _diff_json(a, after)
    assert code == 0, rep["findings"]
    assert [f["code"] for f in rep["findings"]] == ["GP522"]
    row = rep["sections"][0]["devices"][0]["sites"][0]
    assert row["growth"] == 4 * 40 * MiB
    assert (row["growth_kind"], row["one_time"]) == ("one_time", ["gradients"])
    assert "gradients" in rep["findings"][0]["message"]


def test_a_trace_site_that_grew_at_one_step_only_is_first_step_growth() -> None:
    """One trace, step ends compared: growth in one interval and flat after is one-time; growth at every
    interval stays steady; two step ends cannot tell."""
    from gpuprof.memory.diff import _first_step_growth

    def row(site: str) -> dict[str, Any]:
        return {"site": site, "growth_kind": "steady", "one_time": []}

    rows = [row("once"), row("every"), row("two"), row("noisy")]
    series = {"once": [0, 100 * MiB, 100 * MiB, 100 * MiB], "every": [0, 50 * MiB, 100 * MiB, 150 * MiB],
              "two": [0, 100 * MiB], "noisy": [0, 100 * MiB, 90 * MiB, 100 * MiB]}
    _first_step_growth(rows, series, 16 * MiB)
    kinds = {r["site"]: (r["growth_kind"], r["one_time"]) for r in rows}
    assert kinds == {"once": ("one_time", ["first_step"]), "every": ("steady", []), "two": ("steady", []),
                     "noisy": ("steady", [])}

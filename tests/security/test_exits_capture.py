"""Inside training a crashing rule never stops the loop: one GpuprofWarning names its code, the
other rules' findings stay, and every report says the analysis is incomplete (never a clean "no findings")."""

from __future__ import annotations

import glob
import json
import os
import warnings
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import gpuprof  # noqa: E402
from gpuprof.capture import GpuprofWarning, Schedule  # noqa: E402
from gpuprof.rules.base import all_rules  # noqa: E402
from gpuprof.runner import STRICT_ENV  # noqa: E402

STEPS = 6


def _train(logdir: Path) -> tuple[Any, list[warnings.WarningMessage], int]:
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    done = 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with gpuprof.profile(logdir, schedule=Schedule(wait=1, warmup=1, active=3),
                             tensorboard=False) as prof:
            for _ in range(STEPS):
                loss = torch.nn.functional.cross_entropy(model(torch.randn(8, 16)), torch.randint(0, 4, (8,)))
                opt.zero_grad()
                loss.backward()
                opt.step()
                prof.step()
                done += 1
    return prof, [w for w in caught if issubclass(w.category, GpuprofWarning)], done


def test_every_rule_crashing_in_capture_is_one_warning_each_and_an_incomplete_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv(STRICT_ENV, raising=False)  # the user's setting: failures are collected
    monkeypatch.setenv("GPUPROF_REPORT_PROCESS", "0")  # the rules are broken in this process only
    codes = [r.code for r in all_rules()]
    for r in all_rules():
        def broken(self: Any, ctx: Any) -> Any:
            raise RuntimeError(f"injected failure of {self.code}")
        monkeypatch.setattr(r, "check", broken)
    prof, ours, done = _train(tmp_path)
    printed = capsys.readouterr().err
    assert done == STEPS  # training never stopped
    messages = [str(w.message) for w in ours]
    for code in codes:
        mine = [m for m in messages if f"rule {code} failed" in m]
        assert len(mine) == 1, (code, messages)
        assert f"injected failure of {code}" in mine[0] and "incomplete" in mine[0]
    runs = [p for p in glob.glob(str(tmp_path / "*")) if os.path.isdir(p)]
    assert len(runs) == 1
    report = json.loads((Path(runs[0]) / "report.json").read_text())
    assert report["failed_rules"] == codes
    assert report["traces"] and any("incomplete" in n for n in report["traces"][0]["notes"])
    md = (Path(runs[0]) / "report.md").read_text()
    assert "the analysis is incomplete" in md and "No findings." not in md
    assert "the analysis is incomplete" in printed and "gpuprof: no findings\n" not in printed


def test_one_crashing_rule_keeps_the_other_findings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(STRICT_ENV, raising=False)
    monkeypatch.setenv("GPUPROF_REPORT_PROCESS", "0")  # the rule is broken in this process only
    first = all_rules()[0]

    def broken(self: Any, ctx: Any) -> Any:
        raise KeyError("injected")

    monkeypatch.setattr(first, "check", broken)
    prof, ours, done = _train(tmp_path)
    assert done == STEPS
    assert [str(w.message) for w in ours if "rule " in str(w.message)] == [
        f"gpuprof: rule {first.code} failed (KeyError: 'injected'); its findings are missing and the report "
        "says the analysis is incomplete. Training continues."
    ]
    assert prof.report is not None and prof.report.failed_rules == [first.code]
    assert prof.report.traces  # the other rules ran on the trace

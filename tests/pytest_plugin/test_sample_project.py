"""A sample project's test suite under the pytest plugin (docs/pytest.md): a marked training test passes, then
fails after a planted regression, with the finding or the figure in its failure message; the baseline gate,
fail_on, pytest -n 2, and the user's own failures passing through. Each run is a pytest in a subprocess that
imports torch and trains on the CPU: slow."""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

pytest_plugins = ["pytester"]

PLUGIN = ("-p", "gpuprof.pytest_plugin", "-p", "no:cacheprovider")

# The sample project: a plain training loop that knows nothing of gpuprof. Its knobs (knobs.json) plant the
# regressions. The device's forward and backward are a fixed host wait (compute_s), so the step time is
# dominated by it and stays steady on a loaded 2-core machine; a sync per step is `.item()` plus the wait a
# GPU sync costs (on a CPU, `.item()` alone costs nothing).
TRAIN = '''
import json, os, time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

HERE = os.path.dirname(os.path.abspath(__file__))


def knobs():
    with open(os.path.join(HERE, "knobs.json")) as fh:
        return json.load(fh)


class Samples(Dataset):
    """Samples that take `decode_s` of host time each (an image decode, a tokenizer)."""

    def __init__(self, n, decode_s):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 64, generator=g)
        self.y = torch.randint(0, 10, (n,), generator=g)
        self.decode_s = decode_s

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        time.sleep(self.decode_s)
        return self.x[i], self.y[i]


def train(steps=11, workers=None, log=None):
    k = knobs()
    workers = k["workers"] if workers is None else workers
    loader = DataLoader(Samples(steps * 4, k["decode_s"]), batch_size=4, num_workers=workers)
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    ends = []
    for x, y in loader:
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        time.sleep(k["compute_s"])
        opt.step()
        if k["sync_s"]:
            loss.item()
            time.sleep(k["sync_s"])
        ends.append(time.perf_counter())
    if log:
        with open(log, "w") as fh:
            json.dump(ends, fh)
'''

TESTS = '''
import os

import pytest

from train_sample import train


@pytest.mark.gpuprof(max_step_ms=1000, fail_on="warning", baseline="perf/baseline.json", max_regression="200%",
                     steps=5, ignore=["GP901", "GP606"])
def test_train():
    train(log=os.path.join(os.path.dirname(__file__), "steps.json"))


@pytest.mark.gpuprof(fail_on="error", steps=5)
def test_train_lenient():
    train()
'''

# few, long waits: a loaded machine stretches each short sleep, and many of them would add up
# (a 2-core machine shared with other jobs stretches the CPU part of a step several times over at moments:
# the fixed part is large beside it, and the thresholds are wide, so the clean project passes under load)
# A batch takes 100 ms to make: 2 workers keep far ahead of a 200 ms step; in the training process (planted
# num_workers=0) it is 17-33% of the step (a loaded machine stretches the rest), over GP601's 10% for a warning.
# GP606 is ignored in the clean project: its "decode" is a sleep, so whenever a loaded host makes the loop wait
# at all (12% of a step once in CI, beside two other test runs), the workers read as idle while the loop waits,
# which is GP606's (true) finding; the planted regressions this file checks are GP601, the step limit and the
# baseline.
CLEAN = {"workers": 2, "decode_s": 0.025, "compute_s": 0.2, "sync_s": 0}


def _project(pytester: pytest.Pytester, **knobs: object) -> None:
    (pytester.path / "knobs.json").write_text(json.dumps({**CLEAN, **knobs}))


def _failure(out: str, test: str) -> str:
    """The failure section of ``test`` in pytest's output."""
    m = re.search(rf"_{{3,}} {re.escape(test)} _{{3,}}\n(.*?)(?=\n_{{3,}} |\n-{{3,}} gpuprof|\n={{3,}} )", out, re.S)
    assert m is not None, out
    return m.group(1)


def _summary(out: str) -> dict[str, tuple[str, Path]]:
    """node id -> (outcome, run directory) from the plugin's terminal summary."""
    return {m.group(2): (m.group(1), Path(m.group(3)))
            for m in re.finditer(r"^(PASSED|FAILED)\s+(\S+): (/\S+)$", out, re.M)}


def test_passes_then_fails_after_planted_regressions(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(train_sample=TRAIN, test_perf=TESTS)
    _project(pytester)
    artefacts = pytester.path / "artefacts"

    # 1. the clean project, its report kept as the baseline
    r = pytester.runpytest_subprocess(*PLUGIN, "--gpuprof-update-baseline", f"--gpuprof-dir={artefacts}")
    r.assert_outcomes(passed=2)
    baseline = pytester.path / "perf" / "baseline.json"
    runs = _summary(r.stdout.str())
    assert set(runs) == {"test_perf.py::test_train", "test_perf.py::test_train_lenient"}
    assert all(outcome == "PASSED" and d.parent == artefacts for outcome, d in runs.values())
    assert baseline.read_bytes() == (runs["test_perf.py::test_train"][1] / "report.json").read_bytes()

    # 2. the clean project against its baseline: still passes
    r = pytester.runpytest_subprocess(*PLUGIN)
    r.assert_outcomes(passed=2)

    # 3. planted: a single-process DataLoader over the slow dataset
    _project(pytester, workers=0)
    r = pytester.runpytest_subprocess(*PLUGIN, f"--gpuprof-dir={artefacts}")
    r.assert_outcomes(passed=1, failed=1)  # test_train_lenient fails on errors only: GP601 is a warning
    out = r.stdout.str()
    fail = _failure(out, "test_train")
    assert "gpuprof: the test's training broke its limits (max_step_ms=1000, fail_on='warning', baseline=" in fail
    assert re.search(r"warning GP601 DataLoader\(Samples\) loads batches in the training process \(num_workers=0\)",
                     fail), fail
    assert "Fix: Set num_workers>0" in fail
    run_dir = _summary(out)["test_perf.py::test_train"][1]
    assert f"gpuprof: files in {run_dir} " in fail and (run_dir / "report.json").is_file()
    assert run_dir.name == "test_perf.py__test_train-2"  # beside the first run's directory, never mixed into it
    report = json.loads((run_dir / "report.json").read_text())
    assert "GP601" in {f["code"] for f in report["findings"]}

    # 4. planted: a sync per step
    _project(pytester, sync_s=1.5)
    r = pytester.runpytest_subprocess(*PLUGIN, "test_perf.py::test_train")
    r.assert_outcomes(failed=1)
    fail = _failure(r.stdout.str(), "test_train")
    m = re.search(r"step time: median ([\d.]+) ms over (\d+) steps, over max_step_ms=1000 \(by \d+%\)", fail)
    assert m is not None, fail
    # the figure against the test's own clock: the time between its optimizer steps' ends
    ends = json.loads((pytester.path / "steps.json").read_text())
    gaps = [(b - a) * 1000 for a, b in zip(ends, ends[1:])]  # the clock starts when the first step ends
    assert int(m.group(2)) == len(gaps)
    assert float(m.group(1)) == pytest.approx(statistics.median(gaps), rel=0.1, abs=2.0)
    reg = re.search(r"regression against baseline \S+baseline\.json: step_time worse by ([\d.]+)%: over the "
                    r"200\.0% threshold and beyond the noise", fail)
    assert reg is not None, fail
    assert float(reg.group(1)) > 200  # a 1.5 s wait added to a 0.2-0.5 s step


def test_xdist_workers_profile_their_own_tests(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(train_sample=TRAIN, test_par='''
        import pytest

        from train_sample import train


        @pytest.mark.parametrize("workers", [2, 0])
        @pytest.mark.gpuprof(fail_on="warning", steps=5, ignore=["GP901", "GP606"])
        def test_loader(workers):
            train(workers=workers)


        @pytest.mark.gpuprof(fail_on="warning", steps=5)
        def test_users_own_failure(gpuprof_profile):
            train()
            result = gpuprof_profile.finish()
            assert result.steps == 10  # 11 optimizer steps: the clock starts when the first one ends
            assert result.steps == 99, "the user's own message"


        @pytest.mark.gpuprof(steps=5)
        def test_own_capture(tmp_path):
            import gpuprof

            with gpuprof.profile(tmp_path, print_report=False, tensorboard=False):
                train()
    ''')
    _project(pytester)
    r = pytester.runpytest_subprocess(*PLUGIN, "-n", "2", "--junitxml=junit.xml")
    r.assert_outcomes(passed=1, failed=3)
    out = r.stdout.str()
    assert re.search(r"warning GP601 DataLoader\(Samples\) loads batches in the training process",
                     _failure(out, "test_loader[0]"))
    own = _failure(out, "test_users_own_failure")
    assert "AssertionError: the user's own message" in own and "gpuprof: the test's training" not in own
    # a test that runs its own gpuprof capture: the clock stands down and the test says its limits went unchecked
    assert ("gpuprof's step clock stood down: the script runs its own gpuprof capture"
            in _failure(out, "test_own_capture"))
    runs = _summary(out)
    assert {k: v[0] for k, v in runs.items()} == {"test_par.py::test_loader[2]": "PASSED",
                                                  "test_par.py::test_loader[0]": "FAILED",
                                                  "test_par.py::test_users_own_failure": "FAILED"}
    dirs = [d for _, d in runs.values()]
    assert len(set(dirs)) == 3 and all((d / "report.json").is_file() for d in dirs)
    assert {d.parent.parent.name for d in dirs} <= {"popen-gw0", "popen-gw1"}  # each worker's own base directory
    # JUnit XML carries each test's run directory as a property, for CI systems that show artefacts
    import xml.etree.ElementTree as ET

    props = {(case.get("name"), p.get("value")) for case in ET.parse(pytester.path / "junit.xml").iter("testcase")
             for p in case.iter("property") if p.get("name") == "gpuprof_run_dir"}
    assert props == {(nodeid.split("::")[1], str(d)) for nodeid, (_, d) in runs.items()}


def test_a_test_with_too_few_optimizer_steps_fails_in_one_line(pytester: pytest.Pytester) -> None:
    """docs/pytest.md, "Steps": 4 optimizer steps cannot fill the default window (9 needed); the test used to
    pass on the partial trace the capture flushed when the body ended."""
    pytester.makepyfile(test_few='''
        import pytest
        import torch
        from torch import nn


        def train(n):
            model = nn.Linear(8, 2)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for _ in range(n):
                loss = model(torch.randn(4, 8)).sum()
                opt.zero_grad()
                loss.backward()
                opt.step()


        @pytest.mark.gpuprof(max_step_ms=1000)
        def test_four():
            train(4)


        @pytest.mark.gpuprof(max_step_ms=1000, steps=2)
        def test_enough_for_two():
            train(6)
    ''')
    r = pytester.runpytest_subprocess(*PLUGIN, "-rf")
    r.assert_outcomes(passed=1, failed=1)
    out = r.stdout.str()
    line = ("gpuprof: limits not checked (max_step_ms=1000, fail_on='warning'): the test body took 4 optimizer "
            "steps, too few for the recorded window: steps=5 needs at least 9 (train longer in the test, or lower "
            "steps=); files in ")
    assert _failure(out, "test_four").strip().startswith(line)
    assert len(_failure(out, "test_four").strip().splitlines()) == 1
    assert {k: v[0] for k, v in _summary(out).items()} == {"test_few.py::test_four": "FAILED",
                                                           "test_few.py::test_enough_for_two": "PASSED"}

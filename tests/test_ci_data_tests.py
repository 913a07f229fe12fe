"""CI's second pass (the real data hidden) runs the tests .ci/data_tests.py picks: those that read real data."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _select(root: Path) -> list[str]:
    spec = importlib.util.spec_from_file_location("ci_data_tests", REPO / ".ci" / "data_tests.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.select(root)


def test_it_picks_the_tests_that_reach_the_data_and_no_others(tmp_path: Path) -> None:
    root = tmp_path / "tests"
    (root / "sub").mkdir(parents=True)
    (root / "conftest.py").write_text(
        "import pytest\nfrom gpuprof_testing.realtraces import shared_path\n\n"
        "@pytest.fixture\ndef real():\n    return shared_path('a')\n\n"
        "@pytest.fixture\ndef plain():\n    return 1\n")
    (root / "sub" / "test_a.py").write_text(
        '"""Mentions TRACES in the docstring only."""\n'
        "from gpuprof_testing.realtraces import shared_path\n\n"
        "def _helper():\n    return shared_path('b')\n\n"
        "def test_direct():\n    shared_path('c')\n\n"
        "def test_through_a_helper():\n    _helper()\n\n"
        "def test_through_a_conftest_fixture(real):\n    pass\n\n"
        "def test_plain(plain):\n    pass\n\n"
        "class TestGroup:\n    def test_method(self):\n        shared_path('d')\n")
    (root / "test_module_level.py").write_text(
        "from gpuprof_testing.realtraces import TRACES\nFILES = sorted(TRACES.glob('*'))\n\n"
        "def test_x():\n    pass\n")
    (root / "test_none.py").write_text("def test_y():\n    assert 1\n")
    got = _select(root)
    a = str(root / "sub" / "test_a.py")
    assert got == [
        f"{a}::test_direct", f"{a}::test_through_a_helper", f"{a}::test_through_a_conftest_fixture",
        f"{a}::TestGroup::test_method", str(root / "test_module_level.py"),
    ]


@pytest.mark.slow  # parses the whole suite (about 4 s)
def test_on_this_suite_it_picks_the_known_data_tests() -> None:
    got = _select(REPO / "tests")
    files = {g.split("::")[0] for g in got}
    assert {"tests/rules/test_registry.py", "tests/trace/test_load.py",
            "tests/memory/test_diff_and_traces.py", "tests/security/test_limits_inputs.py"} <= {
        str(Path(f).relative_to(REPO)) for f in files}
    assert not any("test_layers.py" in f or "test_intervals.py" in f for f in files)

"""The lint/type-check setup stays coherent: the README's command is what CI runs, the linters are pinned,
and mypy's exemptions name modules that exist (a renamed module must not leave a silent hole)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    tomllib = pytest.importorskip("tomli")

REPO = Path(__file__).resolve().parents[1]
STEPS = ("python3 -m ruff check gpuprof tests bench", "python3 -m mypy gpuprof", "python3 -m pytest -q -p no:cacheprovider")
# torch pinned in the same pip command as the extras: alone, pip would resolve an unpinned (CUDA) torch
PIP = re.compile(r'python3 -m pip install -q torch==[0-9.]+ -e "\.\[([a-z,]+)\]"')


def _pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))


def test_readme_and_ci_run_the_same_linters_and_tests() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    for step in STEPS:
        assert step in readme, f"README lacks {step!r}"
        assert step in ci, f".ci/run lacks {step!r}"
    # one install command, the same in both: the test, lint, TensorBoard and framework extras
    assert len(PIP.findall(ci)) == 1 and set(PIP.findall(readme)) == set(PIP.findall(ci)), PIP.findall(readme)
    readme_pip = PIP.search(readme)
    ci_pip = PIP.search(ci)
    assert readme_pip and ci_pip and readme_pip.group(0) == ci_pip.group(0)
    assert set(ci_pip.group(1).split(",")) >= {"test", "lint", "tensorboard", "frameworks"}
    # in CI the linters come before the tests, so a lint error fails the run without waiting for pytest
    assert ci.index("-m ruff check") < ci.index("-m pytest") and ci.index("-m mypy") < ci.index("-m pytest")


def test_ci_runs_the_data_tests_again_with_the_real_data_hidden() -> None:
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    second = ci[ci.index("-m pytest") + 1:]
    assert 'GPUPROF_SHARED_TRACES="$hidden" python3 -m pytest' in second and "mktemp -d" in ci
    assert "tests/rules/test_registry.py" in second and "tests/docs" in second
    # either pass failing fails CI
    assert ci.count("|| status=1") == 2 and ci.rstrip().endswith('exit "$status"')


def test_extras_are_pinned_where_ci_installs_them() -> None:
    extras = _pyproject()["project"]["optional-dependencies"]
    assert extras["frameworks"] == ["lightning==2.6.6", "transformers==5.24.0", "accelerate==1.15.0"]
    assert extras["dask"][0].startswith("dask[distributed]==")


def test_linters_are_pinned_in_the_lint_extra() -> None:
    lint = _pyproject()["project"]["optional-dependencies"]["lint"]
    names = {re.split(r"[=<>~!]", req)[0] for req in lint}
    assert names == {"ruff", "mypy"}
    assert all(re.fullmatch(r"[a-z]+==\d+(\.\d+)+", req) for req in lint), lint


def test_mypy_is_strict_and_exemptions_name_real_modules() -> None:
    mypy = _pyproject()["tool"]["mypy"]
    assert mypy["strict"] is True
    for override in mypy.get("overrides", []):
        modules = override["module"] if isinstance(override["module"], list) else [override["module"]]
        for module in (m for m in modules if m.split(".")[0] == "gpuprof"):
            path = REPO / Path(*module.split("."))
            assert path.with_suffix(".py").is_file() or (path / "__init__.py").is_file(), module

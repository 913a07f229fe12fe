"""The lint/type-check setup stays coherent: the README's command is what CI runs, the linters are pinned,
mypy's exemptions name modules that exist (a renamed module must not leave a silent hole), and the fast and
slow halves of the suite are what the README and .ci/run say (between them, every test)."""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    tomllib = pytest.importorskip("tomli")

REPO = Path(__file__).resolve().parents[1]
STEPS = ("python3 -m ruff check gpuprof tests bench", "python3 -m mypy gpuprof", "python3 -m pytest -q -p no:cacheprovider")
FAST = 'python3 -m pytest -q -p no:cacheprovider -m "not slow"'
SLOW = "python3 -m pytest -q -p no:cacheprovider -m slow"
# pytest's own marks, not ours to register
BUILTIN_MARKS = {"parametrize", "skip", "skipif", "xfail", "usefixtures", "filterwarnings"}
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
    # any pass failing fails CI: the fast suite, the slow tests, the hidden-data pass, the fresh clone's commands
    assert ci.count("|| status=1") == 4 and ci.rstrip().endswith('exit "$status"')


def test_ci_runs_the_readmes_two_commands_in_a_fresh_clone_and_venv() -> None:
    """.ci/run's last pass: .ci/fresh_clone.py, which reads the README's two set-up commands at run time."""
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    steps = [ln.strip() for ln in ci.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    assert "python3 .ci/fresh_clone.py || status=1" in steps
    assert ci.index('GPUPROF_SHARED_TRACES="$hidden"') < ci.index("python3 .ci/fresh_clone.py")
    spec = importlib.util.spec_from_file_location("fresh_clone", REPO / ".ci" / "fresh_clone.py")
    assert spec and spec.loader
    fresh = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fresh)
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    (one, one_exit), (two, two_exit) = fresh.readme_commands(readme)
    # command 1 as the README's block writes it, its documented exit code with it
    assert one == "python3 -m pip install -e . && gpuprof analyze examples/sample_trace" and one_exit == 1
    # command 2: the same pip install as CI's, the linters, then the fast suite, exiting 0
    pip = PIP.search(two)
    assert pip and pip.group(0) == PIP.search(ci).group(0) and two_exit == 0  # type: ignore[union-attr]
    assert two.endswith(FAST) and all(step in two for step in STEPS)
    # what a developer has and a new user does not is not passed on; the clone has nothing beside it
    src = (REPO / ".ci" / "fresh_clone.py").read_text(encoding="utf-8")
    assert '"PYTHONPATH"' in src and 'startswith("GPUPROF_")' in src and "mkdtemp" in src and "-m\", \"venv\"" in src


def test_readme_runs_the_fast_suite_and_ci_the_fast_then_the_slow() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    # the README's second set-up command ends with the fast suite, and names the slow pass CI adds
    block = readme[readme.index("# 2. run the checks"):]
    block = block[:block.index("```")]
    assert block.rstrip().endswith(FAST), block
    assert SLOW in readme
    # .ci/run: the same fast command, then the slow one, each failing CI on its own; "not slow" and "slow"
    # are complements, so every test runs in one of them
    assert f"{FAST} || status=1" in ci and f"{SLOW} || status=1" in ci
    assert ci.index(FAST) < ci.index(SLOW) < ci.index('GPUPROF_SHARED_TRACES="$hidden"')
    pytest_lines = [ln.strip() for ln in ci.splitlines() if "-m pytest" in ln and not ln.lstrip().startswith("#")]
    assert pytest_lines[:2] == [f"{FAST} || status=1", f"{SLOW} || status=1"], pytest_lines
    # no addopts that deselects: the two commands alone decide
    addopts = _pyproject()["tool"]["pytest"]["ini_options"].get("addopts", "")
    assert " -m" not in f" {addopts}" and "--deselect" not in addopts, addopts


def _conftest(config: pytest.Config) -> ModuleType:
    """tests/conftest.py as pytest loaded it (not a second copy)."""
    want = REPO / "tests" / "conftest.py"
    for plugin in config.pluginmanager.get_plugins():
        if isinstance(plugin, ModuleType) and Path(getattr(plugin, "__file__", "") or "").resolve() == want:
            return plugin
    raise AssertionError("tests/conftest.py is not loaded")


def test_markers_are_registered_and_the_slow_ones_imply_slow(pytestconfig: pytest.Config) -> None:
    ini = _pyproject()["tool"]["pytest"]["ini_options"]
    registered = {m.split(":")[0].strip() for m in ini["markers"]}
    conftest = _conftest(pytestconfig)
    assert {"slow", "frameworks", "browser", "gpu"} <= registered
    assert registered >= conftest.SLOW_MARKERS and "slow" in conftest.SLOW_MARKERS
    used: dict[str, str] = {}
    for path in sorted((REPO / "tests").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_bytes(), str(path))):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) and node.value.attr == "mark"
                    and isinstance(node.value.value, ast.Name) and node.value.value.id == "pytest"):
                used.setdefault(node.attr, str(path.relative_to(REPO)))
    unregistered = {m: where for m, where in used.items() if m not in registered | BUILTIN_MARKS}
    assert not unregistered, f"markers used but not registered in pyproject.toml: {unregistered}"


def test_the_slow_markers_reach_the_items(request: pytest.FixtureRequest) -> None:
    """This very session: every collected test marked frameworks or browser, or using the browser fixture,
    carries slow, so "not slow" leaves it out."""
    items = request.session.items
    assert items and request.node in items
    for item in items:
        if item.get_closest_marker("frameworks") or item.get_closest_marker("browser") \
                or "browser" in getattr(item, "fixturenames", ()):
            assert item.get_closest_marker("slow"), item.nodeid


def test_a_module_all_slow_is_not_imported_when_m_leaves_it_out(pytestconfig: pytest.Config) -> None:
    conftest = _conftest(pytestconfig)
    lightning = REPO / "tests" / "integrations" / "test_lightning.py"
    assert conftest.module_markers(lightning) == {"frameworks"}
    assert conftest.module_markers(REPO / "tests" / "test_lint_config.py") == frozenset()
    can = conftest.can_select
    slow = frozenset({"slow", "frameworks"})
    assert not can("not slow", slow) and not can("not frameworks", slow) and not can("not slow and gpu", slow)
    assert can("slow", slow) and can("frameworks", slow) and can("gpu", slow) and can("not browser", slow)
    assert can("slow and not gpu", slow) and can("gpu or not slow", slow)
    assert can("((", slow)  # not an expression pytest takes: collect as usual, pytest reports the error


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


def _collect(*args: str) -> list[str]:
    import os
    import subprocess

    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
                         cwd=REPO, capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert out.returncode in (0, 5), out.stdout[-2000:] + out.stderr[-2000:]  # 5: nothing collected
    return [ln for ln in out.stdout.splitlines() if "::" in ln]


@pytest.mark.slow
def test_the_fast_command_leaves_out_frameworks_and_browsers() -> None:
    """In a real collection: the framework module is not even imported under -m "not slow"; the browser
    tests (they use the fixture, no marker written) go to -m slow; the two halves split the file's tests."""
    fast = _collect("-m", "not slow", "tests/integrations/test_accelerate.py", "tests/tbplugin/test_browser.py")
    slow = _collect("-m", "slow", "tests/tbplugin/test_browser.py")
    every = _collect("tests/tbplugin/test_browser.py")
    assert not [t for t in fast if "test_accelerate.py" in t], fast
    drives_a_browser = [t for t in every if "(browser" in _signature_of(t)]
    assert drives_a_browser and set(drives_a_browser) <= set(slow), (drives_a_browser, slow)
    assert not set(slow) & set(fast) and set(slow) | set(fast) == set(every), (slow, fast, every)


def _signature_of(node_id: str) -> str:
    """The `def` line of a collected test, read from its file (parametrized ids lose their brackets)."""
    path, name = node_id.split("::", 1)
    name = name.split("[", 1)[0]
    for line in (REPO / path).read_text().splitlines():
        if line.startswith(f"def {name}("):
            return line[len(f"def {name}"):]
    return ""

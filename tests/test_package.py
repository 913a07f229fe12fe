"""The package's front door: ``import gpuprof`` is cheap, ``dir(gpuprof)`` is the API, one version string.

Import cost is checked by what gets imported (``-X importtime`` of a fresh
interpreter, or ``sys.modules`` after the import), never by a clock: the
heavy dependencies (numpy, msgspec, rich, torch) are what made ``gpuprof
--help`` cost 8.5x a bare interpreter.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import gpuprof

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("numpy", "msgspec", "rich", "torch")


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))


def _imported_by(*args: str) -> list[str]:
    """The modules a fresh interpreter imports to run ``python -X importtime ARGS`` (from its stderr)."""
    proc = subprocess.run([sys.executable, "-X", "importtime", *args], env=_env(), cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=True)
    names = [m.group(1) for m in re.finditer(r"^import time:\s+\d+ \|\s+\d+ \|\s*(\S+)$", proc.stderr, re.M)]
    assert names, proc.stderr[-2000:]  # the reader saw the imports (else the checks below prove nothing)
    return names


def _tops(names: list[str]) -> set[str]:
    return {n.split(".")[0] for n in names}


def test_import_gpuprof_loads_no_heavy_dependency() -> None:
    names = _imported_by("-c", "import gpuprof")
    assert not _tops(names) & set(HEAVY), sorted(_tops(names) & set(HEAVY))
    ours = sorted(n for n in names if n.startswith("gpuprof"))
    # the root, its lazy-export helper, the notebook hook slot and the version: nothing of the analysis
    assert ours == ["gpuprof", "gpuprof.lazyexports", "gpuprof.notebookhook", "gpuprof.version"], ours


def _loaded_by(code: str) -> set[str]:
    """Every module in ``sys.modules`` once a fresh interpreter has run ``code`` (written to stderr, one a line)."""
    script = f"import sys\n{code}\nsys.stderr.write('\\n'.join(sorted(sys.modules)))\n"
    proc = subprocess.run([sys.executable, "-c", script], env=_env(), cwd=ROOT, capture_output=True, text=True,
                          timeout=120, check=True)
    names = set(proc.stderr.split())
    assert "sys" in names, proc.stderr[-2000:]  # the list was read (else the checks below prove nothing)
    return names


_HELP = ("import runpy\nsys.argv = ['gpuprof', '--help']\ntry:\n"
         "    runpy.run_module('gpuprof', run_name='__main__', alter_sys=True)\n"
         "except SystemExit as exit:\n    assert exit.code in (0, None), exit.code")


def test_the_commands_help_loads_no_heavy_dependency() -> None:
    """``gpuprof --help`` imports click and a handful of gpuprof's small modules: no third-party package but
    click, none of the heavy ones, nothing of the analysis.

    Judged by which packages are loaded, not by how many standard-library modules are: that count moves with
    the Python version and the environment (a ``.pth`` hook, a sitecustomize). What the environment loads
    into any interpreter is read from ``import click`` alone and set aside.
    """
    names = _loaded_by(_HELP)
    baseline = _loaded_by("import click")  # the interpreter, its site hooks and click
    assert "click" in _tops(sorted(names)) and "gpuprof.cli" in names
    assert not _tops(sorted(names)) & set(HEAVY), sorted(_tops(sorted(names)) & set(HEAVY))
    added = _tops(sorted(names - baseline))
    third_party = sorted(t for t in added if t not in sys.stdlib_module_names and t not in ("gpuprof", "click"))
    assert not third_party, third_party  # a package --help loads beyond click: an install-time dependency at least
    ours = [n for n in names if n.startswith("gpuprof.")]
    assert "gpuprof.trace" not in ours and "gpuprof.report" not in ours and "gpuprof.analysis" not in ours, ours
    # the commands' library paths and the MCP server load with a command, not for its help
    assert not [n for n in ours if n.split(".")[1] in ("commands", "mcp")], ours


def test_dir_lists_the_public_api_and_every_name_resolves() -> None:
    listed = dir(gpuprof)
    assert set(gpuprof.__all__) <= set(listed)
    helpers = [n for n in listed if not n.startswith("__") and n not in gpuprof.__all__]
    assert not helpers, helpers  # no lazy-export helper, no submodule bound by an import elsewhere
    for name in gpuprof.__all__:
        if name in ("profile", "profile_step"):
            continue  # capture: imports torch (tests/capture cover them)
        assert getattr(gpuprof, name) is not None
    assert gpuprof.Report.__module__ == "gpuprof.report"
    assert gpuprof.analyze.__module__ == "gpuprof.analysis"
    with pytest.raises(AttributeError, match="no attribute 'nonesuch'"):
        gpuprof.nonesuch  # noqa: B018 - the attribute access is the test


def test_a_report_still_draws_itself_in_a_notebook() -> None:
    """The HTML hook is registered by ``import gpuprof`` without importing the renderer until it is used."""
    code = ("import sys, gpuprof\n"
            "from gpuprof.report import Report\n"
            "assert 'gpuprof.render.notebook' not in sys.modules\n"
            "html = Report('analyze', inputs=['x.json'])._repr_html_()\n"
            "assert 'gpuprof.render.notebook' in sys.modules\n"
            "print(html)\n")
    out = subprocess.run([sys.executable, "-c", code], env=_env(), cwd=ROOT, capture_output=True, text=True,
                         timeout=120, check=True).stdout
    assert out.startswith('<div class="gpuprof">') and "analyze: 0 traces" in out, out


def test_one_version_string() -> None:
    """pyproject.toml reads the version from gpuprof/version.py; no second copy to keep equal."""
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in project["project"]
    assert "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "gpuprof.version.__version__"}
    from gpuprof.version import __version__

    assert gpuprof.__version__ is __version__
    assert re.fullmatch(r"\d+\.\d+\.\d+(\S*)", __version__)
    # the version is written once in the package (the report's "tool" field and --version read it)
    pattern = re.compile(r"__version__\s*=\s*['\"]")
    writers = [p.relative_to(ROOT).as_posix() for p in (ROOT / "gpuprof").rglob("*.py")
               if pattern.search(p.read_text(encoding="utf-8"))]
    assert writers == ["gpuprof/version.py"], writers


def test_the_command_says_the_one_version() -> None:
    from click.testing import CliRunner

    from gpuprof.cli import cli

    out = CliRunner().invoke(cli, ["--version"]).output
    assert gpuprof.__version__ in out


def test_the_wheel_ships_no_test_helper_and_no_shipped_module_imports_one() -> None:
    """The test helpers (``gpuprof_testing``: trace and snapshot writers, the shared data's paths) live in the
    tests tree, outside the package: pytest finds them through pyproject's ``pythonpath``, the packages
    setuptools finds with pyproject's ``include`` are gpuprof's alone and none a test helper, and nothing that
    ships imports them (the built wheel's names: tests/test_explanations.py's fresh-venv test)."""
    import ast

    from setuptools import find_packages

    import gpuprof_testing

    assert Path(gpuprof_testing.__file__).resolve().parent == ROOT / "tests" / "support" / "gpuprof_testing"
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    found = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["packages"]
    shipped = set(find_packages(str(ROOT), include=found["find"]["include"], exclude=found["find"].get("exclude", ())))
    assert {"gpuprof", "gpuprof.memory", "gpuprof.memory.snapshot", "gpuprof.capture.job"} <= shipped
    assert all(p == "gpuprof" or p.startswith("gpuprof.") for p in shipped), sorted(shipped)
    assert not {p for p in shipped if "testing" in p.split(".")}
    importers = []
    for path in (ROOT / "gpuprof").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([node.module or ""] if isinstance(node, ast.ImportFrom)
                     else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            importers += [f"{path.name}: {n}" for n in names if n.split(".")[0] in ("gpuprof_testing", "tests")]
    assert not importers

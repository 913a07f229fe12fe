"""The shape of gpuprof/capture, checked statically: no import circle, the end of the run never reaches
back into the live session, small modules, and every runtime check in the one list.

Imports are read from the source: module level, inside functions, and under ``if TYPE_CHECKING:``
too (a module that names another's types for mypy depends on it: the former session <-> summary
circle was one). ``from gpuprof.capture.checks.loader import dataloader`` is an import of the submodule, not of
the package's ``__init__``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from gpuprof_testing.cycles import cycles

CAPTURE = Path(__file__).resolve().parents[1] / "gpuprof" / "capture"
MAX_LINES = 470  # "no module over ~450 lines": the limit with a little slack


def _modules() -> dict[str, Path]:
    out = {}
    for path in CAPTURE.rglob("*.py"):
        rel = path.relative_to(CAPTURE.parent.parent).with_suffix("")
        name = ".".join(rel.parts)
        out[name.removesuffix(".__init__")] = path
    return out


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        pkg = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = pkg.split(".")[: len(pkg.split(".")) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                subs = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in mods]
                if subs:  # `from pkg import submodule`: the submodule
                    deps.update(subs)
                if len(subs) < len(node.names) and target in mods:
                    deps.add(target)
            elif isinstance(node, ast.Import):
                deps.update(a.name for a in node.names if a.name in mods)
        deps.discard(name)
        graph[name] = deps
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Import circles of more than one module, each sorted (gpuprof_testing.cycles, as tests/test_layers.py)."""
    return sorted(sorted(c) for c in cycles(graph))


def test_no_import_circle_in_capture() -> None:
    graph = _graph()
    assert "gpuprof.capture.session" in graph and graph["gpuprof.capture.session"]  # the walk found imports
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_one() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_end_of_run_never_reaches_the_live_session() -> None:
    """capture/end works from the frozen run object: it imports no session, window, check or API module."""
    live = ("gpuprof.capture.session", "gpuprof.capture.api", "gpuprof.capture.window", "gpuprof.capture.facts",
            "gpuprof.capture.checks")
    graph = _graph()
    for name, deps in graph.items():
        if name.startswith("gpuprof.capture.end"):
            bad = sorted(d for d in deps if d.startswith(live))
            assert not bad, f"{name} imports {bad}"


@pytest.mark.parametrize("path", sorted(CAPTURE.rglob("*.py")), ids=lambda p: str(p.relative_to(CAPTURE)))
def test_modules_stay_small(path: Path) -> None:
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"{path.name}: {lines} lines"


def test_every_check_module_is_in_the_one_list() -> None:
    """Adding a check is one module (or folder) in capture/checks and one line in monitors()."""
    pytest.importorskip("torch")
    from gpuprof.capture.checks import MonitorBase, monitors
    from gpuprof.capture.config import CaptureConfig

    listed = {type(m).__module__ for m in monitors(CaptureConfig(), lambda s: None)}  # the watch is one of them
    checks = [p.stem for p in (CAPTURE / "checks").glob("*.py")]  # a check alone, or with its modules in a folder
    checks += [p.parent.name for p in (CAPTURE / "checks").glob("*/__init__.py")]
    modules = {f"gpuprof.capture.checks.{c}" for c in checks if c not in ("__init__", "base", "errors")}
    assert listed == modules
    for m in monitors(CaptureConfig(), lambda s: None):
        assert isinstance(m, MonitorBase) and m.part and m.consequence


def _dynamic_getattrs(source: str) -> list[int]:
    """Lines of ``getattr(obj, name)`` calls whose name is not a string literal (a call chosen by name)."""
    return [node.lineno for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
            and len(node.args) >= 2 and not isinstance(node.args[1], ast.Constant)]


def test_monitors_are_called_through_their_typed_methods() -> None:
    """The session and the window call each Monitor point by name in the code (mypy checks the call), never
    ``getattr(monitor, point)`` with the point as data."""
    assert _dynamic_getattrs("def f(m, point):\n    return getattr(m, point)(1)\n") == [2]  # the check sees one
    assert _dynamic_getattrs("getattr(m, 'recording', None)\n") == []
    for name in ("session.py", "window.py", "checks/__init__.py", "checks/base.py"):
        assert _dynamic_getattrs((CAPTURE / name).read_text(encoding="utf-8")) == [], name

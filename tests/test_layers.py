"""Data flows one way: capture -> files -> trace -> rules -> report -> renderers.

A static check of gpuprof's own imports (module level and inside functions), so a shortcut across the
layers (the trace loader reaching into distributed, a rule reaching into the capture) fails here
instead of growing unseen.
"""

from __future__ import annotations

import ast
from pathlib import Path

from gpuprof.testing.cycles import cycles

PKG = Path(__file__).resolve().parents[1] / "gpuprof"

# package -> the gpuprof packages/modules it may import besides itself
ALLOWED = {
    # remote: inputs named by URL; redact: what is shown of one (a leaf, like units)
    "trace": {"errors", "findings", "frames", "inputs", "redact", "remote", "units"},
    "findings": {"units"},
    "report": {"findings", "redact", "trace", "units", "version"},
    "rules": {"codes", "codespec", "errors", "findings", "report", "trace", "units"},
    "render": {"atomic", "errors", "findings", "remote", "report", "trace", "units"},
}
# nobody below the command line imports it
CLI_USERS = {"cli", "__main__"}


def _imports() -> dict[str, dict[str, set[str]]]:
    """package -> {imported gpuprof package -> files importing it}."""
    out: dict[str, dict[str, set[str]]] = {}
    for path in PKG.rglob("*.py"):
        parts = path.relative_to(PKG).parts
        pkg = parts[0] if len(parts) > 1 else path.stem
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in names:
                if name.startswith("gpuprof."):
                    target = name.split(".")[1]
                    if target != pkg:
                        out.setdefault(pkg, {}).setdefault(target, set()).add(str(path.relative_to(PKG)))
    return out


def test_layers_import_only_downstream() -> None:
    deps = _imports()
    assert "trace" in deps and "rules" in deps  # the walk found the packages
    for pkg, allowed in ALLOWED.items():
        extra = {t: sorted(files) for t, files in deps.get(pkg, {}).items() if t not in allowed}
        assert not extra, f"gpuprof/{pkg} imports {extra}"


def test_nothing_below_the_cli_imports_it() -> None:
    users = {pkg for pkg, targets in _imports().items() if "cli" in targets}
    assert users <= CLI_USERS, users


def test_nothing_imports_the_framework_integrations() -> None:
    """gpuprof.integrations sits on top of the capture's public API; nothing in gpuprof depends on it."""
    users = {pkg for pkg, targets in _imports().items() if "integrations" in targets}
    assert not users, users


# Import circles (module level and inside functions) that are intended, each with its reason. Imports
# under `if TYPE_CHECKING:` are left out: they are never executed. Empty: gpuprof has none.
INTENDED_CYCLES: dict[frozenset[str], str] = {}


def _module_graph() -> dict[str, set[str]]:
    """gpuprof module -> the gpuprof modules it imports (a package's ``__init__`` is the package's name)."""
    mods: dict[str, Path] = {}
    for path in PKG.rglob("*.py"):
        parts = ("gpuprof", *path.relative_to(PKG).with_suffix("").parts)
        mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path

    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and _is_type_checking(node.test)
                for stmt in node.body for n in ast.walk(stmt)}
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and node.module.startswith("gpuprof"):
                # `from gpuprof.x import y` imports module gpuprof.x.y when there is one, else a name of gpuprof.x
                targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in mods else node.module
                           for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names if a.name.startswith("gpuprof")]
            for t in targets:
                r = resolve(t)
                if r is not None and r != mod:
                    graph[mod].add(r)
    return graph


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


_cycles = cycles  # gpuprof.testing.cycles: the one finder, shared with tests/test_capture_shape.py


def test_cycle_finder_finds_a_planted_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert _cycles(graph) == [frozenset("abc")]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_undocumented_import_circle() -> None:
    graph = _module_graph()
    assert "gpuprof.runner" in graph["gpuprof.flow"]  # the walk saw module-level imports
    assert "gpuprof.codes" in graph["gpuprof.flow"]  # and imports inside functions
    found = [c for c in _cycles(graph) if c not in INTENDED_CYCLES]
    assert not found, "import circles in gpuprof (break them, or document them in INTENDED_CYCLES): " + "; ".join(
        " <-> ".join(sorted(c)) for c in found)

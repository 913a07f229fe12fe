"""Data flows one way: capture -> files -> trace -> rules -> report -> renderers.

A static check of gpuprof's own imports (module level and inside functions), so a shortcut across the
layers (the trace loader reaching into distributed, a rule reaching into the capture) fails here
instead of growing unseen.
"""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "gpuprof"

# package -> the gpuprof packages/modules it may import besides itself
ALLOWED = {
    "trace": {"errors", "findings", "frames", "inputs", "remote", "units"},  # remote: inputs named by URL
    "findings": {"units"},
    "report": {"findings", "trace", "units"},
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

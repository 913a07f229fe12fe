"""Print the tests that read the real data, one pytest node id (or file) a line, for CI's second pass.

CI runs the suite once with the real data (``GPUPROF_SHARED_TRACES``), then once more with the data hidden,
to prove a fresh clone passes: the tests that read the data must skip, with their one reason, not fail.
Only those tests need the second run, so this picks them statically, erring towards more:

* a test function whose source names the data (``shared_path``, ``TRACES``, ``real_trace``, ...), or
  that takes a fixture (of its file or of a ``conftest.py`` above it) whose source does;
* a whole file when the data are named at its module level (outside any function: a constant built at
  import, a parametrize list).

Usage: ``python3 .ci/data_tests.py [tests]``.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

MARKERS = re.compile(r"\b(shared_path|snapshot_path|shared_trace|real_trace|v100_samples|realtraces|TRACES|SNAPSHOTS"
                     r"|GPUPROF_SHARED_TRACES)\b")

Func = ast.FunctionDef | ast.AsyncFunctionDef


def _functions(tree: ast.Module) -> list[tuple[str, Func]]:
    """(prefix, function) for module-level functions and methods of module-level classes."""
    out: list[tuple[str, Func]] = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.append(("", node))
        elif isinstance(node, ast.ClassDef):
            out += [(node.name + "::", n) for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    return out


def _names_data(text: str, names: set[str]) -> bool:
    return bool(MARKERS.search(text)) or any(re.search(rf"\b{re.escape(n)}\b", text) for n in names)


def _data_names(path: Path, inherited: set[str]) -> set[str]:
    """Fixtures and helpers of ``path`` (not tests) that reach the data, directly or through each other."""
    source = path.read_text(encoding="utf-8")
    helpers = [fn for _, fn in _functions(ast.parse(source)) if not fn.name.startswith("test")]
    names = set(inherited)
    changed = True
    while changed:
        changed = False
        for fn in helpers:
            if fn.name not in names and (_names_data(ast.get_source_segment(source, fn) or "", names)
                                         or {a.arg for a in fn.args.args} & names):
                names.add(fn.name)
                changed = True
    return names


def _module_level_uses(tree: ast.Module, source: str, names: set[str]) -> bool:
    """True when the data are reached outside every function body (imports aside)."""
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)) or (
                isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)):  # a docstring
            continue
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            parts: list[ast.AST] = [*node.decorator_list, *node.args.defaults]  # a parametrize list is module level
        elif isinstance(node, ast.ClassDef):
            parts = [*node.decorator_list] + [d for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                                              for d in n.decorator_list]
        else:
            parts = [node]
        if any(_names_data(ast.get_source_segment(source, p) or "", names) for p in parts):
            return True
    return False


def select(root: Path) -> list[str]:
    out: list[str] = []
    conftest_names: dict[Path, set[str]] = {}

    def inherited(d: Path) -> set[str]:
        """Data names of the conftest.py files from ``root`` down to ``d``."""
        if d in conftest_names:
            return conftest_names[d]
        above = inherited(d.parent) if d != root and root in d.parents else set()
        c = d / "conftest.py"
        conftest_names[d] = _data_names(c, above) if c.is_file() else above
        return conftest_names[d]

    for path in sorted(root.rglob("test_*.py")):
        source = path.read_text(encoding="utf-8")
        tree = ast.parse(source)
        names = _data_names(path, inherited(path.parent))
        if _module_level_uses(tree, source, names):
            out.append(str(path))
            continue
        for prefix, fn in _functions(tree):
            if not fn.name.startswith("test"):
                continue
            if _names_data(ast.get_source_segment(source, fn) or "", names) or {a.arg for a in fn.args.args} & names:
                out.append(f"{path}::{prefix}{fn.name}")
    return out


def main(argv: list[str]) -> int:
    for line in select(Path(argv[1] if len(argv) > 1 else "tests")):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

"""Where the script defines ``--step-function``'s function, read from its source before it runs.

The bootstrap wraps the named function as soon as it exists (:mod:`gpuprof.run.bootstrap`). Knowing where
the script defines it lets the bootstrap wait for it whatever the script does first (define classes, call
helpers, decorate) and reach a function defined inside another function:

* ``module``: the first name is bound at module level (a ``def``, a ``class`` for ``Class.method``, an
  assignment or an import): wrapped in the module's namespace once the module code has bound it;
* ``nested``: a function defined in a function of the script (``main.train_step``, or ``train_step`` alone
  when one function of the script defines it): wrapped in that function's frame, on its first call, once
  its ``def`` has run (a local variable replaced, as a debugger does);
* ``missing``: nowhere, or ambiguous: one line saying so, and nothing is profiled.

Only the source is read (:func:`ast.parse`), never run; a source that cannot be read or parsed gives
``module`` (the former behaviour: wait for a module-level name).
"""

from __future__ import annotations

import ast
import tokenize
from dataclasses import dataclass
from typing import Literal

__all__ = ["Located", "locate", "locate_in_file", "MAX_SOURCE_BYTES"]

MAX_SOURCE_BYTES = 16 * 2**20  # a script larger than this is not read: the module-level behaviour


@dataclass(frozen=True)
class Located:
    kind: Literal["module", "nested", "missing"]
    attr: str = ""  # module: the dotted name to resolve in the module's namespace
    outer: str = ""  # nested: the enclosing function's name (its code object's co_name)
    outer_line: int = 0  # its code object's co_firstlineno: the first decorator's line, else the def's
    inner: str = ""  # nested: the local name of the function
    line: int = 0  # where the function is defined (for messages)
    problem: str = ""  # missing: one line


_Def = ast.FunctionDef | ast.AsyncFunctionDef
_Scope = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef


def _children(node: ast.AST) -> list[ast.stmt]:
    """The statements directly in ``node``'s body, through if/for/while/with/try blocks (not into defs)."""
    out: list[ast.stmt] = []
    todo: list[ast.stmt] = list(getattr(node, "body", []))
    while todo:
        st = todo.pop(0)
        out.append(st)
        if isinstance(st, _Scope):
            continue
        for field in ("body", "orelse", "finalbody"):
            todo += list(getattr(st, field, []) or [])
        for handler in getattr(st, "handlers", []) or []:
            todo += list(handler.body)
        for case in getattr(st, "cases", []) or []:
            todo += list(case.body)
    return out


def _bound_names(st: ast.stmt) -> set[str]:
    if isinstance(st, _Scope):
        return {st.name}
    if isinstance(st, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in st.names}
    targets: list[ast.expr] = []
    if isinstance(st, ast.Assign):
        targets = list(st.targets)
    elif isinstance(st, (ast.AnnAssign, ast.AugAssign)):
        targets = [st.target]
    return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}


def _first_line(node: _Def) -> int:
    return min([d.lineno for d in node.decorator_list] + [node.lineno])


def _scope(node: ast.AST, name: str) -> _Scope | None:
    found = [st for st in _children(node) if isinstance(st, _Scope) and st.name == name]
    return found[-1] if found else None  # the last definition is the one that stands when the code runs


def locate(source: str, attr: str) -> Located:
    """Where ``attr`` (``name``, ``Class.method``, ``outer.inner``) is defined in ``source``."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):  # Python cannot run it either
        return Located("module", attr=attr)
    parts = attr.split(".")
    top = _children(tree)
    if any(parts[0] in _bound_names(st) for st in top):
        node: ast.AST = tree
        chain: list[_Scope] = []
        for part in parts:
            scope = _scope(node, part)
            if scope is None:
                break
            chain.append(scope)
            node = scope
        if len(chain) < len(parts) or not any(isinstance(c, _Def) for c in chain[:-1]):
            return Located("module", attr=attr)  # Class.method, or a name bound otherwise: resolved by attribute
        parent, last = chain[-2], chain[-1]
        if not isinstance(parent, _Def):
            return Located("missing", problem=f"{attr} is a method of a class defined inside a function; name a "
                                              "function of the script or of a module-level class")
        return Located("nested", outer=parent.name, outer_line=_first_line(parent), inner=last.name,
                       line=last.lineno)
    if len(parts) > 1:
        return Located("missing", problem=f"the script defines no {parts[0]!r} at module level")
    # a bare name that is not module-level: the function of the script that defines it
    hosts = [(outer, st) for outer in ast.walk(tree) if isinstance(outer, _Def)
             for st in _children(outer) if isinstance(st, _Def) and st.name == parts[0]]
    if not hosts:
        return Located("missing", problem=f"the script defines no function {parts[0]!r}")
    outers = {(o.name, _first_line(o)) for o, _ in hosts}
    if len(outers) > 1:
        names = ", ".join(sorted(f"{o}.{parts[0]} (line {line})" for o, line in outers))
        return Located("missing", problem=f"{parts[0]!r} is defined in more than one function: name one of {names}")
    outer, inner = hosts[-1]
    return Located("nested", outer=outer.name, outer_line=_first_line(outer), inner=inner.name, line=inner.lineno)


def locate_in_file(path: str, attr: str) -> Located:
    """:func:`locate` over a file's source; ``module`` when it cannot be read (or is too large to)."""
    try:
        with tokenize.open(path) as fh:  # the encoding the file declares, as Python reads it
            source = fh.read(MAX_SOURCE_BYTES + 1)
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return Located("module", attr=attr)
    if len(source) > MAX_SOURCE_BYTES:
        return Located("module", attr=attr)
    return locate(source, attr)

"""From a user function's first line to the line of the call that led to an event.

A trace's Python frames name functions, not statements: ``train.py(40): step``
is where ``step`` *starts* (the profiler notes a frame's line when it is
entered), so a finding located by the innermost user frame points at a
``def`` line. The call inside it is the one to change (``clip_grad_norm_``
before ``unscale_``, ``torch.save`` in the loop, ``model(x)`` under
``no_grad``). This module finds that call's line from two things:

* the trace: the frame ``C`` the user function made, directly, around the
  event (its name and its callees' names, up to a few levels: the optimizer's
  ``step`` is under a ``wrapper``, ``zero_grad`` under torch.compile's
  ``_fn``), and the calls next to it in time (``P`` before, ``N`` after);
* the user's source file, when it can be read here (the machine that
  trained, usually): the function at the recorded first line (its name must
  match there, else the file is not the one that ran), its calls in the
  order Python evaluates them (``model(torch.randn(8, 16))``: ``randn``,
  then ``model``).

A call is matched by name (``torch.nn.utils.clip_grad_norm_(...)``'s
``clip_grad_norm_`` is among ``C``'s names). A module call (``C`` is an
``nn.Module: Net_0`` range) has no name in the trace, so it is found between
the calls matching ``P`` and ``N``: among the calls there whose name is none
of the trace's (``model(x)``, ``self.net(x)``), not a builtin and not a
function of a known library (``torch.randn``), the k-th for the k-th module
call between them (``model(x)`` then ``loss_fn(out, y)``), when the counts
agree. Anything not decided (no source, a different
file, two candidates) keeps the function's first line: never a guess.

Reading the source is bounded (:data:`MAX_SOURCE_BYTES`), follows no
symlink as the file itself, never blocks on a FIFO or device (a regular file
only) and shows nothing of the file but a line number.
"""

from __future__ import annotations

import ast
import builtins
import os
import re
import sys
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from gpuprof.frames import LIBRARY_ROOTS
from gpuprof.safefile import read_regular_stat

__all__ = ["MAX_SOURCE_BYTES", "call_line", "callee_name", "source_calls", "Call"]

MAX_SOURCE_BYTES = 4 << 20  # a source file larger than this is not read (no user script is)
_SCAN = 4000  # frames looked at around the event, each way (a deep loop body: bounded work)
_DEPTH = 4  # levels under a direct call whose names count as its own (wrappers: optimizer.step, zero_grad)
MODULE = "\0module"  # the name of an ``nn.Module:`` range: a call of a module object

_FRAME = re.compile(r"^.*\(\d+\): (.+)$")
_BUILTIN = re.compile(r"^<built-in (?:method|function) ([\w.]+)")
_NOT_MODULE = frozenset(dir(builtins)) | {"super"}
# call roots that are libraries, not the user's module objects: torch.randn(...), F.relu(...), np.mean(...)
_LIBRARY_ROOTS = LIBRARY_ROOTS | {"F", "nn", "np", "math", "time", "random", "sys", "pd", "plt", "dist"}


def callee_name(frame: str) -> str | None:
    """The function name a frame was called by: ``torch/optim/optimizer.py(1023): zero_grad`` -> ``zero_grad``,
    ``<built-in function collect>`` -> ``collect``, an ``nn.Module: Net_0`` range -> :data:`MODULE`."""
    if frame.startswith("nn.Module: "):
        return MODULE
    m = _BUILTIN.match(frame)
    if m:
        return m.group(1).rsplit(".", 1)[-1]
    m = _FRAME.match(frame)
    return m.group(1) if m else None


@dataclass(frozen=True)
class Call:
    """One call in a function's body: the name it calls by (``a.b.save(...)`` -> ``save``; None for
    ``f()()``), its line, and whether it may be a call of a module object (a plain name or attribute
    that is not a builtin and not rooted at a known library)."""

    name: str | None
    line: int
    maybe_module: bool


def _terminal(func: ast.expr) -> tuple[str | None, str | None]:
    """(the name called, the root name of a dotted callee) of a call's ``func``."""
    if isinstance(func, ast.Name):
        return func.id, func.id
    if isinstance(func, ast.Attribute):
        root: ast.expr = func
        while isinstance(root, ast.Attribute):
            root = root.value
        return func.attr, root.id if isinstance(root, ast.Name) else None
    return None, None


class _Calls(ast.NodeVisitor):
    """A function's calls in evaluation order (arguments before the call), not entering nested scopes."""

    def __init__(self) -> None:
        self.calls: list[Call] = []

    def visit_Call(self, node: ast.Call) -> None:  # noqa: N802 - the visitor's naming
        self.generic_visit(node)  # the callee's own calls (out.sum().backward) and the arguments first
        name, root = _terminal(node.func)
        module = name is not None and name not in _NOT_MODULE and root not in _LIBRARY_ROOTS
        self.calls.append(Call(name, node.lineno, module))

    def _skip(self, node: ast.AST) -> None:
        return None  # a nested function, class or lambda: its calls run in a frame of its own

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = visit_Lambda = _skip  # noqa: N815


_CACHE: OrderedDict[tuple[str, int, int, int, str], tuple[Call, ...] | None] = OrderedDict()
_CACHE_SIZE = 64


def _read_source(path: str) -> tuple[tuple[int, int], bytes] | None:
    """((mtime_ns, size), bytes) of a regular file (:func:`gpuprof.safefile.read_regular`: no link followed, no
    FIFO blocked on, nothing over :data:`MAX_SOURCE_BYTES` read)."""
    if "\0" in path:
        return None
    try:
        got = read_regular_stat(path, MAX_SOURCE_BYTES)
    except OSError:
        return None
    return None if got is None else ((got[0].st_mtime_ns, got[0].st_size), got[1])


def _candidates(path: str) -> list[str]:
    """Where a recorded source path may be: itself, and for a relative one (torch writes a file's path
    relative to the ``sys.path`` entry it was imported from: ``train.py``, ``pkg/model.py``) under each
    entry of this process's ``sys.path`` (the capture's own process: the run's; ``analyze``: the current
    directory first)."""
    if os.path.isabs(path):
        return [path]
    out = [path]
    for base in sys.path:
        if isinstance(base, str) and base and os.path.isabs(base):
            out.append(os.path.join(base, path))
    return out[:32]


def source_calls(path: str, def_line: int, function: str) -> tuple[Call, ...] | None:
    """The calls of ``function`` starting at ``def_line`` of ``path`` (its decorators' first line or the
    ``def``'s, as Python records it), or spanning it (a frame the profiler found running records its current
    line); ``<module>``: the module's top level. None when the file cannot be read or holds no such function
    there (a relative path: the first of :func:`_candidates` that does)."""
    for candidate in _candidates(path):
        calls = _source_calls(candidate, def_line, function)
        if calls is not None:
            return calls
    return None


def _source_calls(path: str, def_line: int, function: str) -> tuple[Call, ...] | None:
    got = _read_source(path)
    if got is None:
        return None
    (mtime, size), data = got
    key = (path, mtime, size, def_line, function)
    if key in _CACHE:
        _CACHE.move_to_end(key)
        return _CACHE[key]
    calls = _parse(data, def_line, function)
    _CACHE[key] = calls
    if len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return calls


def _parse(data: bytes, def_line: int, function: str) -> tuple[Call, ...] | None:
    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    body: list[ast.stmt] | None = None
    if function == "<module>":
        body = [s for s in tree.body if not isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    else:
        # the function of that name starting at the line (a frame entered while profiling: its first line),
        # else the innermost one spanning it (a frame already running when the profiler started: torch
        # records the line it was at)
        spanning: list[tuple[int, list[ast.stmt]]] = []
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == function:
                first = min([node.lineno] + [d.lineno for d in node.decorator_list])
                if def_line in (first, node.lineno):
                    body = node.body
                    break
                last = getattr(node, "end_lineno", None) or node.lineno
                if first <= def_line <= last:
                    spanning.append((last - first, node.body))
        if body is None and spanning:
            body = min(spanning, key=lambda s: s[0])[1]
    if body is None:
        return None
    visitor = _Calls()
    try:
        for stmt in body:
            visitor.visit(stmt)
    except RecursionError:  # a chain the parser took but the walk cannot (x = f(1) + f(1) + ... 2,000 times)
        return None
    return tuple(visitor.calls)


# ---------------------------------------------------------------------- the trace side


def _direct_calls(ts: np.ndarray, end: np.ndarray, f_start: float, f_end: float, lo: int, hi: int) -> list[int]:
    """Indices in [lo, hi) of the frames directly inside the frame spanning [f_start, f_end]: inside it,
    and inside no other frame of the range (frames are sorted by start and properly nested)."""
    out: list[int] = []
    open_until = -np.inf
    for j in range(lo, hi):
        s, e = ts[j], end[j]
        if s < f_start or e > f_end or (s == f_start and e == f_end):
            continue
        if s >= open_until or (s == open_until and out and ts[out[-1]] < s):
            out.append(j)
            open_until = e
    return out


def _names_under(names: list[str], code: np.ndarray, ts: np.ndarray, end: np.ndarray, j: int, hi: int) -> set[str]:
    """The callee names of frame ``j`` and of the frames nested in it, ``_DEPTH`` levels down (nested: inside
    both its ends; a frame starting where another ends follows it, as torch's microsecond times often touch)."""
    out: set[str] = set()
    stack: list[float] = []
    for k in range(j, min(hi, j + _SCAN)):
        if k > j and ts[k] >= end[j]:
            break
        if end[k] > end[j]:
            continue
        while stack and ts[k] >= stack[-1] and k > j:
            stack.pop()
        if len(stack) < _DEPTH:
            name = callee_name(names[code[k]])
            if name is not None:
                out.add(name)
        stack.append(end[k])
    return out


def call_line(path: str, def_line: int, function: str, names: list[str], code: np.ndarray, ts: np.ndarray,
              end: np.ndarray, user: int, t: float) -> int | None:
    """The line in the user frame ``user`` (an index into one thread's frames, sorted by start; its
    source ``path``/``def_line``/``function``) of the call it made that was running at ``t``; None when
    not decided (see the module docstring)."""
    calls = source_calls(path, def_line, function)
    if not calls:
        return None
    n = len(ts)
    lo, hi = user + 1, min(n, int(np.searchsorted(ts, t, side="right")) + _SCAN)
    lo = max(lo, int(np.searchsorted(ts, t, side="right")) - _SCAN)
    direct = _direct_calls(ts, end, float(ts[user]), float(end[user]), lo, hi)
    # the direct call that started last at or before t (calls touching at t: the one starting there)
    at = next((i for i in range(len(direct) - 1, -1, -1) if ts[direct[i]] <= t), None)
    if at is None or t > end[direct[at]]:
        return None
    own = [_names_under(names, code, ts, end, j, hi) for j in direct]
    target = own[at]
    if MODULE not in target:
        lines = {c.line for c in calls if c.name in target}
        if len(lines) == 1:
            return lines.pop()
    # between the calls the neighbours match (the nearest neighbours that match any)
    def matches(i: int) -> bool:
        return any(c.name in own[i] for c in calls)

    bi = next((i for i in range(at - 1, -1, -1) if matches(i)), None)
    ai = next((i for i in range(at + 1, len(own)) if matches(i)), None)
    candidates = _between(calls, own[bi] if bi is not None else None, own[ai] if ai is not None else None)
    if MODULE in target:
        # module calls have no name in the trace: the k-th module call between the neighbours is the k-th
        # call of a module-like name between them in the source (model(x), then loss_fn(out, y))
        known = set().union(*own)
        found = [k for k in candidates if calls[k].maybe_module and calls[k].name not in known]
        lo_i = -1 if bi is None else bi
        hi_i = len(own) if ai is None else ai
        modules = [i for i in range(lo_i + 1, hi_i) if MODULE in own[i] and not matches(i)]
        if len(found) == len(modules) and at in modules:
            return calls[found[modules.index(at)]].line
        lines = {calls[k].line for k in found}
    else:
        lines = {calls[k].line for k in candidates if calls[k].name in target}
    return lines.pop() if len(lines) == 1 else None


def _between(calls: tuple[Call, ...], before: set[str] | None, after: set[str] | None) -> range:
    """The positions in ``calls`` strictly between a call matching ``before`` and the nearest later call
    matching ``after`` (the closest such pair); the open side when a neighbour is missing."""
    b = [k for k, c in enumerate(calls) if before is not None and c.name in before]
    a = [k for k, c in enumerate(calls) if after is not None and c.name in after]
    if before is None and after is None:
        return range(len(calls))
    if before is None:
        return range(0, a[0]) if a else range(0)
    if after is None:
        return range(b[-1] + 1, len(calls)) if b else range(0)
    pairs = [(j - i, i, j) for i in b for j in a if j > i]
    if not pairs:
        return range(0)
    _, i, j = min(pairs)
    return range(i + 1, j)

"""Host memory growth over the whole job (GP640, series ``host_rss``) and the census that names its holder.

**The series.** The memory monitor reads the process's resident set size
(``/proc/self/statm``) at most every ``RSS_INTERVAL_S`` at a step boundary,
on CPU and on CUDA runs alike (:class:`gpuprof.capture.memory.MemorySampler`):
``(step, bytes)`` pairs, kept for the whole job.

**Steady growth** (:func:`host_growth`). Over the samples from step
``leak_skip_steps`` on (warm-up: the allocator, the loader's first batches):

* the rate is the Theil-Sen slope (the median of the pairwise slopes, on at
  most ``MAX_FIT`` evenly spaced samples), so a one-time jump (a cache filled
  at step 10, a checkpoint buffer) moves it little, where a least-squares
  slope would call it growth;
* the growth must persist: the Theil-Sen slope of the last half of the
  samples is at least half the whole rate (growth that stopped is no leak);
* the rate is at least ``leak_min_bytes_per_step`` and the rise along that
  rate over the samples at least ``leak_min_total_bytes``.

The onset is the first sampled step from which the RSS stays above the
level of the first samples by more than the noise (``ONSET_MARGIN`` times
the rate, 2 MiB at least) for the rest of the job.

**The census** (:class:`Census`), taken once, on the training thread, when
the live check first sees the growth: live tensors are counted through the
garbage collector (at most ``MAX_OBJECTS`` objects looked at), each tensor
with a ``grad_fn`` with the size of its autograd graph (at most
``MAX_NODES`` nodes walked in all); ``CENSUS_STEPS`` steps later the census
is taken again. A tensor whose graph grew between the two is a value kept
with its graph and added to every step (``total += loss``); a growing count
of tensors with a ``grad_fn`` is outputs or losses kept with their graphs
(``losses.append(loss)``). The holder is named from the tensor's referrers (a
local variable of a frame, an attribute of an object, a module's global) and
the line from the source of that frame's function or that object's class: the
statement that adds to it (``name +=``, ``name = name + ...``) or appends to
it. Bounded in time: the census stops walking at its limits and says so.
It runs inside the session's ``step()``, whose time is no step's; the step
after each of its two passes (run with caches just walked through) is marked
``own_work``, so it never makes a phase or an anomaly (``at_steps``).
"""

from __future__ import annotations

import ast
import gc
import inspect
import linecache
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from types import FrameType, ModuleType
from typing import Any

import numpy as np

from gpuprof.capture.config import CheckOptions
from gpuprof.findings import Evidence, Finding, SourceLocation
from gpuprof.runtimecodes import runtime_check

__all__ = ["HostGrowth", "host_growth", "theil_sen", "Census", "CensusResult", "host_growth_finding",
           "CENSUS_STEPS", "MAX_FIT", "MAX_NODES", "MAX_OBJECTS"]

MiB = 1024 * 1024
HOST_MIN_SPAN = 30  # steps the readings must span, at least
MAX_FIT = 200  # samples the Theil-Sen fit uses at most (evenly spaced): 19,900 pairs
ONSET_MARGIN = 3.0  # the onset: RSS above the first samples' level by this many steps of growth (2 MiB at least)
CENSUS_STEPS = 3  # steps between the two censuses
MAX_OBJECTS = 2_000_000  # objects the census looks at, at most
MAX_NODES = 200_000  # autograd nodes the census walks, at most (all tensors together)
MAX_SOURCE_BYTES = 4 * 1024 * 1024  # a source file larger than this is not parsed for the holder's line
MAX_FRAMES = 64  # frames of the training thread looked at for the holder's name
CHECK_EVERY = 20  # the live check runs once per this many new RSS samples (about a second)


def theil_sen(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray,
              part: Sequence[int] | np.ndarray | None = None) -> float:
    """The median of the pairwise slopes of ``y`` against ``x`` (on at most ``MAX_FIT`` evenly spaced points);
    ``part``: only pairs of points in the same part (a recorded window between two parts: its memory is
    gpuprof's)."""
    xa = np.asarray(x, dtype=np.float64)
    ya = np.asarray(y, dtype=np.float64)
    pa = np.zeros(len(xa), dtype=np.int64) if part is None else np.asarray(part, dtype=np.int64)
    if len(xa) > MAX_FIT:
        pick = np.linspace(0, len(xa) - 1, MAX_FIT).round().astype(np.int64)
        xa, ya, pa = xa[pick], ya[pick], pa[pick]
    i, j = np.triu_indices(len(xa), 1)
    dx = xa[j] - xa[i]
    ok = (dx > 0) & (pa[i] == pa[j])
    if not ok.any():
        return 0.0
    return float(np.median((ya[j] - ya[i])[ok] / dx[ok]))


@dataclass(frozen=True)
class HostGrowth:
    """Steady host (RSS) growth: its rate, onset and extent."""

    bytes_per_step: float
    onset_step: int
    first_step: int
    last_step: int
    first_bytes: int
    last_bytes: int
    samples: int
    late_bytes_per_step: float  # the rate over the last half of the samples


def host_growth(steps: Sequence[int], rss: Sequence[int], options: CheckOptions,
                windows: Sequence[tuple[int, int]] = ()) -> HostGrowth | None:
    """Steady RSS growth in the samples ``(steps[i], rss[i])`` (module docstring), else None. ``windows``:
    ``[start, end)`` steps gpuprof recorded (and the steps after, while it wrote the trace): their samples are
    left out, and no slope is taken across one (the profiler's buffers are gpuprof's memory, not the job's)."""
    s = np.asarray(steps, dtype=np.float64)
    v = np.asarray(rss, dtype=np.float64)
    keep = s >= options.leak_skip_steps
    part = np.zeros(len(s), dtype=np.int64)
    for a, b in windows:
        keep &= ~((s >= a) & (s < b))
        part += s >= b
    s, v, part = s[keep], v[keep], part[keep]
    n = len(s)
    if n < max(options.leak_min_steps, 4) or s[-1] - s[0] < max(options.leak_min_steps, HOST_MIN_SPAN):
        return None
    rate = theil_sen(s, v, part)
    if rate < options.leak_min_bytes_per_step or rate * (s[-1] - s[0]) < options.leak_min_total_bytes:
        return None
    half = n // 2
    late = theil_sen(s[half:], v[half:], part[half:])
    if late < 0.5 * rate:
        return None
    margin = max(ONSET_MARGIN * rate, 2 * MiB)
    base = float(np.median(v[:max(3, n // 20)]))
    above = v > base + margin
    # the first sample from which every later one is above the base level
    tail_ok = np.flip(np.logical_and.accumulate(np.flip(above)))
    first = int(np.argmax(tail_ok)) if tail_ok.any() else n - 1
    # back from that sample along the rate to where the growth began (the margin is crossed after the onset)
    onset = max(int(s[0]), int(round(s[first] - (v[first] - base) / rate)))
    return HostGrowth(bytes_per_step=rate, onset_step=onset, first_step=int(s[0]), last_step=int(s[-1]),
                      first_bytes=int(v[0]), last_bytes=int(v[-1]), samples=n, late_bytes_per_step=late)


# --- the census -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CensusResult:
    """What the two censuses ``steps`` steps apart found (any field may be empty: nothing was found)."""

    steps: int
    grad_tensors_before: int
    grad_tensors_after: int
    graph_growth_nodes: int = 0  # nodes the fastest-growing graph gained over the steps
    graph_nodes: int = 0  # its size at the second census
    holder: str | None = None  # the name that keeps it ("running_loss", "self.total", "losses")
    location: SourceLocation | None = None  # the statement that adds to it
    pattern: str | None = None  # "graph_kept" (total += loss) or "outputs_kept" (losses.append(loss))
    truncated: bool = False  # a bound stopped the walk
    at_steps: tuple[int, int] = (0, 0)  # the steps after which the two censuses ran (the next ones are own_work)

    @property
    def grad_tensor_growth(self) -> int:
        return self.grad_tensors_after - self.grad_tensors_before


def _graph_size(fn: Any, budget: list[int]) -> int:
    """Nodes reachable from ``fn`` (an autograd node), walking at most ``budget[0]`` nodes (decremented)."""
    seen: set[int] = set()
    todo = [fn]
    while todo and budget[0] > 0:
        node = todo.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        budget[0] -= 1
        try:
            todo += [nxt for nxt, _ in node.next_functions]
        except (AttributeError, TypeError, RuntimeError):
            continue
    return len(seen)


def _tensors() -> tuple[dict[int, tuple[Any, int]], int, bool]:
    """{id: (tensor, graph nodes)} of the live tensors with a grad_fn, their count, and whether a bound hit."""
    import torch

    out: dict[int, tuple[Any, int]] = {}
    count = 0
    budget = [MAX_NODES]
    objs = gc.get_objects()
    truncated = len(objs) > MAX_OBJECTS
    kinds: dict[type, bool] = {}  # per type: a tensor type? (type(), not isinstance: no lazy proxy is asked)
    try:
        for o in objs[:MAX_OBJECTS]:
            tp = type(o)
            is_tensor = kinds.get(tp)
            if is_tensor is None:
                is_tensor = kinds[tp] = issubclass(tp, torch.Tensor)
            if is_tensor:
                try:
                    fn = o.grad_fn
                except RuntimeError:
                    continue
                if fn is None:
                    continue
                count += 1
                out[id(o)] = (o, _graph_size(fn, budget) if budget[0] > 0 else 0)
    finally:
        del objs
    return out, count, truncated or budget[0] <= 0


class Census:
    """The two censuses around ``CENSUS_STEPS`` steps (module docstring). Training thread only."""

    def __init__(self, start_step: int) -> None:
        self.start_step = start_step
        before, self._count, self.truncated = _tensors()
        # only sizes and weak identities are kept: the census never keeps a tensor alive between the two
        self._sizes = {i: size for i, (_, size) in before.items()}
        self._largest = max(self._sizes.values(), default=0)
        del before

    def due(self, step: int) -> bool:
        return step >= self.start_step + CENSUS_STEPS

    def finish(self, step: int) -> CensusResult:
        after, count, truncated = _tensors()
        try:
            best: tuple[int, Any, int] | None = None
            for i, (t, size) in after.items():
                grew = size - self._sizes.get(i, size)
                if i in self._sizes and grew > 0 and (best is None or grew > best[0]):
                    best = (grew, t, size)
            if best is None and after:  # `total = total + loss`: a new tensor each step, its graph the largest
                t, size = max(after.values(), key=lambda ts: ts[1])
                if size - self._largest > 0:
                    best = (size - self._largest, t, size)
            steps = step - self.start_step
            holder = loc = pattern = None
            grew_nodes = nodes = 0
            if best is not None and best[0] >= steps:  # a graph that gained at least a node a step
                grew_nodes, t, nodes = best
                holder, loc = _holder(t, ("+=", "+"))
                pattern = "graph_kept"
            elif count - self._count >= steps:  # at least one more tensor with its graph kept a step
                newest = [t for i, (t, _) in after.items() if i not in self._sizes]
                holder, loc = _container_holder(newest)
                pattern = "outputs_kept"
            return CensusResult(steps=steps, grad_tensors_before=self._count, grad_tensors_after=count,
                                graph_growth_nodes=grew_nodes, graph_nodes=nodes, holder=holder, location=loc,
                                pattern=pattern, truncated=self.truncated or truncated,
                                at_steps=(self.start_step, step))
        finally:
            after.clear()


def _user_file(path: str) -> bool:
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the gpuprof package
    p = os.path.abspath(path)
    return os.path.isfile(p) and not p.startswith(here + os.sep) and "site-packages" not in p.split(os.sep) \
        and not p.startswith(os.path.dirname(os.__file__) + os.sep)


def _holder(t: Any, ops: tuple[str, ...]) -> tuple[str | None, SourceLocation | None]:
    """The name that holds tensor ``t`` and the statement that adds to it: a local variable of a frame of this
    thread (the training loop's, the census runs at its step boundary), else a global or an attribute."""
    frame: FrameType | None = sys._getframe(1)
    depth = 0
    while frame is not None and depth < MAX_FRAMES:
        code = frame.f_code
        if _user_file(code.co_filename):
            for name, val in list(frame.f_locals.items()):
                if val is t and isinstance(name, str) and name.isidentifier():
                    return name, _statement(code.co_filename, code.co_firstlineno, name, False, ops)
        frame, depth = frame.f_back, depth + 1
    for ref in gc.get_referrers(t):
        if isinstance(ref, dict):
            # an identifier only: a key set through setattr() or a dict may hold any text (escapes, newlines)
            key = next((k for k, v in ref.items() if v is t and isinstance(k, str) and k.isidentifier()), None)
            if key is None:
                continue
            name = str(key)
            for owner in gc.get_referrers(ref):
                if isinstance(owner, ModuleType) and getattr(owner, "__dict__", None) is ref:
                    f = getattr(owner, "__file__", None)
                    return name, _statement(f, 1, name, False, ops) if f else None
                if getattr(owner, "__dict__", None) is ref:
                    try:
                        f = inspect.getsourcefile(type(owner))
                    except (TypeError, OSError):
                        f = None
                    return f"{type(owner).__name__}.{name}", _statement(f, 1, name, True, ops) if f else None
    return None, None


def _container_holder(newest: list[Any]) -> tuple[str | None, SourceLocation | None]:
    """The list (or dict) the newest tensors with a graph are kept in, by its name, and the line appending."""
    for t in newest[-5:]:
        for ref in gc.get_referrers(t):
            if isinstance(ref, list) and len(ref) >= 2:
                name, loc = _holder(ref, ("append",))
                if name is not None:
                    return name, loc
    return None, None


def _statement(path: str | None, first_line: int, name: str, attribute: bool,
               ops: tuple[str, ...]) -> SourceLocation | None:
    """The first statement in ``path`` (from ``first_line``) that adds to ``name`` (``ops`` ``+=``/``+``) or
    appends to it (``append``); ``attribute``: ``<obj>.name``. None when the file cannot be read or parsed."""
    if not path or not _user_file(path):
        return None
    try:
        if os.path.getsize(path) > MAX_SOURCE_BYTES:
            return None
        src = "".join(linecache.getlines(path)) or open(path, encoding="utf-8").read()  # noqa: SIM115
        tree = ast.parse(src)
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError, RecursionError, MemoryError):
        return None  # a source we cannot read: the finding names the holder without its line

    def named(node: ast.AST) -> bool:
        if attribute:
            return isinstance(node, ast.Attribute) and node.attr == name
        return isinstance(node, ast.Name) and node.id == name

    hits: list[int] = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if line < first_line:
            continue
        if "+=" in ops and isinstance(node, ast.AugAssign) and named(node.target):
            hits.append(line)
        elif "+" in ops and isinstance(node, ast.Assign) and any(named(t) for t in node.targets) \
                and isinstance(node.value, ast.BinOp) and any(named(x) for x in (node.value.left, node.value.right)):
            hits.append(line)
        elif "append" in ops and isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ("append", "extend") and named(node.func.value):
            hits.append(line)
    if not hits:
        return None
    return SourceLocation(path, min(hits), None)


# --- the finding -----------------------------------------------------------------------------------------


def host_growth_finding(g: HostGrowth, census: CensusResult | None, location: SourceLocation | None) -> Finding:
    """GP640 for steady host growth, with what the census found."""
    c = runtime_check("GP640")
    total = g.last_bytes - g.first_bytes
    msg = (f"the process's resident memory (RSS) grows by {g.bytes_per_step / MiB:.2f} MiB per step from step "
           f"{g.onset_step} ({g.first_bytes / MiB:.0f} -> {g.last_bytes / MiB:.0f} MiB by step {g.last_step}, "
           f"robust slope over {g.samples} samples)")
    advice = ("Look for objects kept across steps: `total_loss += loss` keeps every step's autograd graph "
              "alive (use `loss.item()` or `loss.detach()`), lists of outputs/losses appended each step, "
              "or caches keyed by step.")
    extra: dict[str, object] = {
        "growth_kind": "steady", "series": "host_rss", "samples": g.samples, "onset_step": g.onset_step,
        "first_step": g.first_step, "last_step": g.last_step, "first_bytes": g.first_bytes,
        "last_bytes": g.last_bytes, "total_growth_bytes": total,
        "late_bytes_per_step": round(g.late_bytes_per_step)}
    where = location
    if census is not None:
        extra["census"] = {"steps": census.steps, "grad_tensors_before": census.grad_tensors_before,
                           "grad_tensors_after": census.grad_tensors_after,
                           "graph_growth_nodes": census.graph_growth_nodes, "graph_nodes": census.graph_nodes,
                           "holder": census.holder, "pattern": census.pattern, "at_steps": list(census.at_steps),
                           "site": str(census.location) if census.location else None,
                           "truncated": census.truncated}
        name = f"`{census.holder}`" if census.holder else "a tensor"
        at = f" at {census.location}" if census.location else ""
        if census.pattern == "graph_kept":
            msg += (f": {name} is a tensor kept with its autograd graph and added to every step{at} (its graph "
                    f"gained {census.graph_growth_nodes} nodes in {census.steps} steps, {census.graph_nodes} in all)")
            advice = (f"Add the loss's value, not the tensor: `{census.holder or 'total'} += loss.item()` (or "
                      "`loss.detach()`); the tensor keeps every step's graph, and the activations it saved, alive.")
        elif census.pattern == "outputs_kept":
            msg += (f": tensors with their autograd graphs are kept, {census.grad_tensor_growth} more in "
                    f"{census.steps} steps" + (f", in {name}{at}" if census.holder else ""))
            advice = ("Keep values, not graphs: append `loss.item()` or `out.detach()` (`.cpu()` for outputs "
                      "kept for later), so each step's graph is freed.")
        else:
            msg += "; the census of live tensors found no tensor or graph growing with it (host objects, or " \
                   "memory outside Python)"
        if census.location is not None:
            where = census.location
    return Finding(
        code=c.code, name=c.name, severity=c.severity, message=msg, advice=advice,
        evidence=(Evidence("growth_bytes_per_step", round(g.bytes_per_step), None, "bytes", extra=extra),),
        location=where, origin="runtime", cost_us_per_step=None)

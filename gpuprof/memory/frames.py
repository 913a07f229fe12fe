"""Allocation sites: which line of the user's code asked for the memory.

A snapshot records, for every allocation, the stack at the moment it was
made (``frames``: ``{"filename", "line", "name"}`` dicts, innermost first,
Python and, with ``context="all"``, C++ frames mixed). The *allocation site*
is the first frame, counting from the innermost, that belongs to the user's
code (:func:`gpuprof.frames.is_user_file`, the policy all of gpuprof uses):
frames inside torch itself, installed packages, the Python standard library,
C/C++ sources and interpreter internals are skipped, because "aten::empty in
TensorFactories.cpp" says nothing about which of your lines to change.
Without a user frame the site is the innermost library Python frame
(``origin`` "library"); a stack of C++ frames only (the autograd engine's
backward thread records no Python frame) is named for what it is
(:func:`native_site`, ``origin`` "native"), never as a line of code.

:class:`SiteTable` interns sites so an analysis of a million allocations
keeps one small object per distinct site, and caches the frame walk per
frames list (snapshots share one list object among entries with the same
stack, so the cache hits almost always).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from gpuprof.frames import is_user_file

__all__ = ["Site", "SiteTable", "DEFAULT_INTERNAL_PATTERNS", "UNKNOWN_SITE", "PRE_TRACE_SITE", "frame_text",
           "native_site"]

# Filename patterns skipped besides gpuprof's one user-frame policy (gpuprof.frames.is_user_file:
# torch, installed packages, the standard library, interpreter internals, C/C++ frames);
# `gpuprof memory --skip-frames REGEX` adds to them (e.g. the user's own framework's wrappers).
DEFAULT_INTERNAL_PATTERNS: tuple[str, ...] = ()


def _scalar(v: Any) -> str:
    # Only scalars are printed: a container from a hostile pickle may share
    # itself so often that its text would be exponentially long.
    if isinstance(v, (str, int, float)) or v is None:
        return str(v)
    return "?"


_BACKWARD_NODE = re.compile(r"torch::autograd::generated::(\w+Backward\d*)::apply")
_OP = re.compile(r"at::_ops::(\w+)::call\(")


def native_site(frames: Sequence[Any]) -> str | None:
    """A C++-only stack named for what it is, never as a line to fix: the autograd engine's backward pass (and
    the backward node), a cuBLAS/cuDNN workspace, the innermost ATen operator, or the caching allocator."""
    names = [_scalar(f.get("name", "")) for f in frames if isinstance(f, dict)]
    if not names:
        return None
    text = "\n".join(names)
    node = _BACKWARD_NODE.search(text)
    op = _OP.search(text)
    what = ""
    if "getNewWorkspace" in text or "BlasHandle" in text or "BlasLtHandle" in text:
        what = "cuBLAS workspace"
    elif "cudnn" in text.lower():
        what = "cuDNN workspace" if "workspace" in text.lower() else ""
    if node is not None or "torch::autograd::Engine" in text or "execute_native_thread_routine" in text:
        inner = ", ".join(x for x in (what, node.group(1) if node else "", f"aten::{op.group(1)}" if op else "") if x)
        return f"<autograd engine, backward pass (C++ stack only{': ' + inner if inner else ''})>"
    if what:
        return f"<{what} (C++ stack only)>"
    if op is not None:
        return f"<aten::{op.group(1)} (C++ stack only, no Python frame recorded)>"
    if "CachingAllocator" in text:
        return "<CUDA caching allocator (C++ stack only)>"
    return f"<C++ stack only: {names[0][:80]}>"


def frame_text(frame: Any) -> str:
    """``file:line:function`` for one frame dict (or whatever the file holds)."""
    if isinstance(frame, dict):
        return f"{_scalar(frame.get('filename', '?'))}:{_scalar(frame.get('line', '?'))}:{_scalar(frame.get('name', '?'))}"
    return _scalar(frame)


@dataclass(frozen=True)
class Site:
    """Where an allocation was made: the first user frame, plus the full stack for display.

    ``file`` is empty for the two pseudo-sites :data:`UNKNOWN_SITE` (no stack
    was recorded) and :data:`PRE_TRACE_SITE` (allocated before the recorded
    history began).
    """

    label: str  # "train.py:42 (forward)" or a pseudo-site description
    file: str = ""
    line: int | None = None
    function: str | None = None
    stack: tuple[str, ...] = field(default=(), compare=False, hash=False)  # innermost first
    # "user": a line of the user's code; "library": no user frame, the innermost library Python frame;
    # "native": a C++-only stack, named for what it is (autograd backward, cuBLAS workspace...); "" pseudo-sites
    origin: str = field(default="user", compare=False, hash=False)

    def to_dict(self) -> dict[str, Any]:
        return {"site": self.label, "file": self.file or None, "line": self.line, "function": self.function,
                "origin": self.origin or None, "stack": list(self.stack)}


UNKNOWN_SITE = Site("<no stack recorded>", origin="")
PRE_TRACE_SITE = Site("<allocated before the recorded history>", origin="")

_MAX_STACK = 24  # frames kept for display per site


class SiteTable:
    """Interns :class:`Site` objects; site ids are small ints (0 and 1 are the pseudo-sites)."""

    UNKNOWN = 0
    PRE_TRACE = 1

    def __init__(self, internal_patterns: Iterable[str] = DEFAULT_INTERNAL_PATTERNS) -> None:
        self.sites: list[Site] = [UNKNOWN_SITE, PRE_TRACE_SITE]
        self._ids: dict[Any, int] = {}
        self._by_list: dict[int, tuple[Any, int]] = {}  # id(frames list) -> (list kept alive, site id)
        pats = tuple(internal_patterns)
        self._internal = re.compile("|".join(f"(?:{p})" for p in pats)) if pats else None
        self._file_internal: dict[str, bool] = {}

    def __len__(self) -> int:
        return len(self.sites)

    def is_internal(self, filename: str) -> bool:
        hit = self._file_internal.get(filename)
        if hit is None:
            hit = not is_user_file(filename) or bool(self._internal is not None and self._internal.search(filename))
            self._file_internal[filename] = hit
        return hit

    def add_label(self, label: str, file: str = "", line: int | None = None, function: str | None = None,
                  stack: Sequence[str] = ()) -> int:
        """Intern a site given directly (trace-derived sites: an operator or a Python frame)."""
        key = ("label", label)
        sid = self._ids.get(key)
        if sid is None:
            sid = len(self.sites)
            # a trace-derived site is a line of code only with a file; operator chains and pseudo-sites have none
            origin = ("user" if not self.is_internal(file) else "library") if file else ""
            self.sites.append(Site(label, file, line, function, tuple(stack[:_MAX_STACK]), origin=origin))
            self._ids[key] = sid
        return sid

    def user_frames(self, limit: int = 512) -> set[tuple[str, int | None, str]]:
        """The user's frames on every stack this table resolved (history and blocks alike), as (file's base name,
        line, function): a frame of the user's code by the same policy as the sites. Base names, so the same
        program run from another directory or machine has the same frames. At most ``limit`` frames per stack."""
        out: set[tuple[str, int | None, str]] = set()
        seen: set[int] = set()
        for frames, _sid in self._by_list.values():
            for f in frames[:limit]:
                if id(f) in seen or not isinstance(f, dict):
                    continue
                seen.add(id(f))
                fn, name, line = f.get("filename"), f.get("name"), f.get("line")
                if not isinstance(fn, str) or not isinstance(name, str) or self.is_internal(fn):
                    continue
                path = fn.replace("\\", "/")
                if not path.endswith(".py") or "torchinductor_" in path:
                    continue  # Python source only; a compiled graph's generated file is named per compile
                out.add((path.rsplit("/", 1)[-1], line if isinstance(line, int) else None, name))
        return out

    def entry_scripts(self, limit: int = 512) -> set[str]:
        """The scripts the recorded stacks start in: the base name of the outermost ``<module>`` frame of the
        user's code on each stack (``train.py``). Notebook cells (``ipykernel_*``, ``<ipython-input-*>``) are left
        out: each cell is a file of its own, the program is the notebook."""
        out: set[str] = set()
        for frames, _sid in self._by_list.values():
            for f in reversed(frames[:limit]):
                if not isinstance(f, dict) or f.get("name") != "<module>":
                    continue
                fn = f.get("filename")
                if isinstance(fn, str) and not self.is_internal(fn) and fn.endswith(".py") \
                        and "ipykernel_" not in fn and "<ipython-input" not in fn:
                    out.add(fn.replace("\\", "/").rsplit("/", 1)[-1])
                break
        return out

    def knows(self, frames: Any) -> bool:
        """Whether this very frames list was resolved already (then ``site_of`` costs O(1))."""
        cached = self._by_list.get(id(frames))
        return cached is not None and cached[0] is frames

    def site_of(self, frames: Any) -> int:
        """The site id of a snapshot ``frames`` list (innermost first); unknown for anything but a list."""
        if not frames or not isinstance(frames, (list, tuple)):  # a hostile or torn snapshot: "frames": 5
            return self.UNKNOWN
        cached = self._by_list.get(id(frames))
        if cached is not None and cached[0] is frames:
            return cached[1]
        sid = self._resolve(frames)
        self._by_list[id(frames)] = (frames, sid)
        return sid

    def _resolve(self, frames: Sequence[Any]) -> int:
        chosen = None
        fallback = None
        for fr in frames:
            if not isinstance(fr, dict):
                continue
            fn = fr.get("filename")
            if not isinstance(fn, str):
                continue
            if not self.is_internal(fn):
                chosen = fr
                break
            if fallback is None and fn.endswith(".py"):
                fallback = fr  # innermost Python frame, used when every frame is internal
        fr = chosen if chosen is not None else fallback
        if fr is None:
            native = native_site(frames)
            if native is None:
                return self.UNKNOWN
            nkey = ("native", native)
            nid = self._ids.get(nkey)
            if nid is None:
                nid = len(self.sites)
                self.sites.append(Site(native, stack=tuple(frame_text(f) for f in frames[:_MAX_STACK]),
                                       origin="native"))
                self._ids[nkey] = nid
            return nid
        file = _scalar(fr.get("filename", "?"))
        line = fr.get("line")
        line = int(line) if isinstance(line, int) else None
        func = fr.get("name")
        func = _scalar(func) if func is not None else None
        key = (file, line, func)
        sid = self._ids.get(key)
        if sid is None:
            label = f"{file}:{line}" if line is not None else file
            if func:
                label += f" ({func})"
            stack = tuple(frame_text(f) for f in frames[:_MAX_STACK])
            sid = len(self.sites)
            self.sites.append(Site(label, file, line, func, stack, origin="user" if chosen is not None else "library"))
            self._ids[key] = sid
        return sid

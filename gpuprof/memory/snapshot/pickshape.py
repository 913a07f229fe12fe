"""Which parts of a snapshot pickle the streaming reader hands on (:mod:`gpuprof.memory.snapshot.pickstream`).

A snapshot is a top-level dict whose ``segments`` list and ``device_traces`` lists (one per device) hold
almost all of the file. :class:`Shape` recognises those lists as the reader makes them, marks the dicts made
as their items, and hands each item to the sink when its list receives it, instead of keeping it.
"""

from __future__ import annotations

from typing import Any

from gpuprof.memory.snapshot.pickops import CONSUMED, NotStreamable, Sink

__all__ = ["Shape"]

_SEGMENTS = -1  # roles of the streamed lists; a device's history list has its device index
_TRACES = -2


class Shape:
    """Where each new container goes: which lists are streamed, which dicts are their items.

    The pickler appends a single item with APPEND (the list is then the top of the stack) and batches with
    MARK ... APPENDS/SETITEMS (the container sits just below the MARK); a top-level dict's ``segments`` and
    ``device_traces`` values, each device's list in ``device_traces`` and the dicts in those lists are
    recognised as they are made. An item of a streamed list is handed to the sink when the list receives it.
    """

    def __init__(self, sink: Sink) -> None:
        self.sink = sink
        self.top: Any = None  # the top-level dict
        self.roles: dict[int, int] = {}  # id(streamed list) -> role
        self.lists: list[list[Any]] = []  # the streamed lists, kept alive (their ids are keys)
        self.pending: set[int] = set()  # ids of dicts made as items of a streamed list (memo: a marker)
        self.keys: set[str] = set()
        self.segments: list[Any] | None = None
        self.traces: list[Any] | None = None
        self.n_traces = 0  # device lists appended to device_traces
        self.interned: set[int] = set()  # ids of the lists shared for their equal references (kept by the reader)

    def parent(self, stack: list[Any], marks: list[int], is_dict: bool) -> tuple[Any, int] | None:
        """The container an object made now goes into, and the items above its MARK (None: unknown)."""
        if stack:
            role = self.roles.get(id(stack[-1]))
            if role is not None and (role == _TRACES) != is_dict:
                return stack[-1], 0
        if marks and 0 < marks[-1] <= len(stack):
            return stack[marks[-1] - 1], len(stack) - marks[-1]
        return None

    def new(self, obj: Any, stack: list[Any], marks: list[int]) -> None:
        """Note where the new dict or list ``obj`` (not yet pushed) goes."""
        is_dict = type(obj) is dict
        if not stack and not marks:
            if self.top is None and is_dict:
                self.top = obj
            return
        par = self.parent(stack, marks, is_dict)
        if par is None:
            return
        parent, above = par
        role = self.roles.get(id(parent))
        if role is not None:
            if role == _TRACES and not is_dict:
                self._stream(obj, self.n_traces + above)
            elif role != _TRACES and is_dict:
                self.pending.add(id(obj))
            return
        if parent is self.top and not is_dict and above % 2 == 1 and stack[-1] in ("segments", "device_traces"):
            key = stack[-1]
            if key in self.keys:
                raise NotStreamable(f"a second {key!r} key")
            self.keys.add(key)
            if key == "segments":
                self.segments = obj
                self._stream(obj, _SEGMENTS)
            else:
                if self.segments is None:  # parsed in file order: segments must come first
                    raise NotStreamable("device_traces before segments")
                self.traces = obj
                self._stream(obj, _TRACES)

    def _stream(self, lst: list[Any], role: int) -> None:
        self.roles[id(lst)] = role
        self.lists.append(lst)

    def plain_list_slot(self, stack: list[Any], marks: list[int]) -> bool:
        """Whether a list made now may be a frames list (not one of the streamed lists)."""
        par = self.parent(stack, marks, False)
        return par is None or (id(par[0]) not in self.roles and par[0] is not self.top)

    def memo_value(self, o: Any) -> Any:
        """What the memo keeps for the container ``o``: a marker for the streamed ones."""
        return CONSUMED if id(o) in self.pending or id(o) in self.roles else o

    def extend(self, target: Any, items: list[Any]) -> None:
        """APPEND(S) ``items`` to ``target``: handed to the sink when ``target`` is streamed."""
        role = self.roles.get(id(target)) if type(target) is list else None
        if role is None:
            if type(target) is not list:
                raise NotStreamable("APPENDS to something other than a list")
            if id(target) in self.interned:  # one object stands for several equal lists: they must not change
                raise NotStreamable("an interned list changed")
            target.extend(items)
            return
        if role == _TRACES:
            for it in items:
                if type(it) is not list or self.roles.get(id(it)) != self.n_traces:
                    raise NotStreamable("device_traces holds something other than its own lists")
                self.n_traces += 1
            return
        pending = self.pending
        for it in items:
            if type(it) is dict:
                if id(it) not in pending:
                    raise NotStreamable("a history entry or segment made elsewhere")
                pending.discard(id(it))
            if role == _SEGMENTS:
                self.sink.segment(it)
        if role != _SEGMENTS:
            self.sink.entries(role, items)  # one APPENDS batch (the pickler writes 1000 a batch)

"""Read a snapshot pickle as a stream, in memory bounded by what gpuprof keeps, not by the file.

``pickle.load`` of a snapshot builds a Python object for every history entry
(a dict, its ints, its frames list): 10-30x the file, so a 1 GB snapshot needs
tens of GB. This module walks the pickle's opcodes itself, from a file read in
chunks, and hands each history entry and each segment to a :class:`Sink` as
soon as it is complete; nothing keeps it afterwards. It builds only plain data
(dicts, lists, tuples, sets, strings, bytes, numbers, booleans, None), like
:mod:`gpuprof.memory.safeload`: every opcode that names a global, calls,
builds an object, uses a persistent id, an extension code or an out-of-band
buffer is refused with :class:`~gpuprof.memory.safeload.UnsafePickleError`
before anything is built from it.

What keeps memory bounded:

* a history entry (a dict in ``device_traces[i]``) or a segment (a dict in
  ``segments``) is passed on when its list receives it, and its memo slot
  holds a marker instead of the dict;
* a frames list made only of references to frame dicts already seen (what
  PyTorch writes for every entry: one list per entry, its frame dicts
  shared) is interned by the bytes of those references into one tuple, so a
  million entries with a thousand distinct stacks keep a thousand tuples, and
  the site/kind caches (keyed by the list object) hit;
* memoized strings are interned by value;
* declared lengths are checked against what is left of the file before any
  read, and the input is read in chunks.

The reader accepts exactly the layout PyTorch's pickler writes. Anything it
cannot stream and still reproduce what ``pickle.load`` would build (a
reference back to a history entry or segment passed on already, a memo slot
written twice, text-protocol opcodes, a second ``segments`` key...) raises
:class:`NotStreamable`; the caller then reads the file in whole, as before.
"""

from __future__ import annotations

import re
import struct
from typing import Any, Protocol

from gpuprof.memory.safeload import UnsafePickleError

__all__ = ["Sink", "NotStreamable", "CorruptPickle", "StreamReader", "MAX_MARK_DEPTH"]

_CHUNK = 1 << 20
_MARGIN = 16  # bytes every fixed-size opcode with its argument fits in
_LOOKAHEAD = 8192  # a whole frames list of references (at most 1000 per batch, 5 bytes each) fits in it
MAX_MARK_DEPTH = 10_000  # open MARKs: real snapshots nest a handful; deeper is read in whole (bounded there)

# A frames list of references only: EMPTY_LIST, its memo write, MARK, 1-1000 BINGET/LONG_BINGET, APPENDS, and
# no further APPEND(S) for this list (then the next opcode would be MARK or APPEND).
_FRAMES_RUN = re.compile(rb"(\x94|q.|r....)\(((?:h.|j....){1,1000})e(?![(a])", re.S)

_I4 = struct.Struct("<i")
_U4 = struct.Struct("<I")
_U8 = struct.Struct("<Q")
_F8 = struct.Struct(">d")


class NotStreamable(Exception):
    """The pickle is valid for ``pickle.load`` in a way the streaming reader does not reproduce."""


class CorruptPickle(Exception):
    """The pickle is malformed or truncated (the message says how)."""


class Sink(Protocol):
    """Receives the streamed parts of a snapshot, in file order."""

    def segment(self, s: Any) -> None: ...

    def entry(self, device: int, e: Any) -> None: ...


class Readable(Protocol):
    def read(self, n: int = -1, /) -> bytes: ...


class _Consumed:
    """The memo marker of an object handed on (a reference to it cannot be honoured: read in whole)."""


_CONSUMED = _Consumed()
_ROLE_SEGMENTS = -1
_ROLE_TRACES = -2


_UNSAFE_GLOBAL = ("refusing to load: the pickle tries to import {}, "
                  "and a memory snapshot holds only plain data (dicts, lists, strings, numbers)")


class StreamReader:
    """One pass over a pickle from ``fh``; :meth:`read` returns the top object with streamed lists left empty.

    ``size``: the file's size (declared lengths are checked against it).
    """

    def __init__(self, fh: Readable, size: int, sink: Sink) -> None:
        self.fh = fh
        self.size = size
        self.sink = sink
        self.read_so_far = 0  # bytes read from fh
        self.eof = False
        self.streamed = False  # whether a segments list or device_traces was recognised
        self.segments_list: list[Any] | None = None
        self.traces_list: list[Any] | None = None
        self.top: Any = None
        self.n_traces = 0  # device lists device_traces held

    def _more(self, buf: bytes, pos: int, want: int = _CHUNK) -> bytes:
        """The unread rest of ``buf`` and at least ``want`` more bytes (fewer only at the end of the file)."""
        parts = [buf[pos:]]
        got = 0
        want = max(want, _CHUNK)
        while got < want:
            data = self.fh.read(want - got)
            if not data:
                self.eof = True
                break
            parts.append(data)
            got += len(data)
        self.read_so_far += got
        return b"".join(parts)

    def _take(self, buf: bytes, pos: int, n: int) -> tuple[bytes, bytes, int]:
        """``n`` bytes at ``pos`` (reading on as needed): (the bytes, the buffer, the new position)."""
        if n > self.size - (self.read_so_far - (len(buf) - pos)):
            raise CorruptPickle(f"a length of {n:,} bytes runs past the end of the {self.size:,}-byte file")
        if pos + n > len(buf):
            buf = self._more(buf, pos, n - (len(buf) - pos))
            pos = 0
            if n > len(buf):
                raise CorruptPickle("truncated (the file ended inside a value)")
        return buf[pos:pos + n], buf, pos + n

    def read(self) -> Any:  # noqa: C901 - one dispatch loop, kept in one frame for speed
        sink = self.sink
        stack: list[Any] = []
        marks: list[int] = []
        memo: list[Any] = []
        strings: dict[str, str] = {}
        frames_cache: dict[bytes, tuple[Any, ...]] = {}
        pending: set[int] = set()  # ids of dicts made as items of a streamed list (memo: a marker)
        devtrace: dict[int, tuple[list[Any], int]] = {}  # id(device list) -> (list, device index)
        consumers: dict[int, int] = {}  # id(streamed list) -> role (device index >= 0, or _ROLE_*)
        buf = self._more(b"", 0)
        pos = 0
        push = stack.append
        top_dict: Any = None
        role_keys: set[str] = set()

        def memo_put(idx: int, obj: Any) -> None:
            if idx == len(memo):
                memo.append(obj)
            else:
                raise NotStreamable("a memo slot written out of order")

        def memo_get(idx: int) -> Any:
            if idx >= len(memo):
                raise CorruptPickle(f"a reference to memo slot {idx:,}, never written")
            o = memo[idx]
            if o is _CONSUMED:
                raise NotStreamable("a reference back to a history entry or segment")
            return o

        def memo_value(o: Any) -> Any:
            """What the memo keeps for ``o`` (the top of the stack)."""
            if type(o) is str:
                s = strings.setdefault(o, o)
                stack[-1] = s
                return s
            if id(o) in pending or id(o) in consumers:
                return _CONSUMED
            return o

        def pop_mark() -> list[Any]:
            if not marks:
                raise CorruptPickle("an opcode needs a MARK and there is none")
            k = marks.pop()
            items = stack[k:]
            del stack[k:]
            return items

        def parent_of_new(is_dict: bool) -> tuple[Any, int] | None:
            """The container an object pushed now goes into, and how many items sit above its MARK (None: unknown).

            The pickler appends a single item with APPEND (the list is then the top of the stack) and batches
            with MARK ... APPENDS/SETITEMS (the container sits just below the MARK)."""
            if stack:
                role = consumers.get(id(stack[-1]))
                if role is not None and (role == _ROLE_TRACES) != is_dict:
                    return stack[-1], 0
            if marks and 0 < marks[-1] <= len(stack):
                return stack[marks[-1] - 1], len(stack) - marks[-1]
            return None

        def new_container(obj: Any) -> None:
            nonlocal top_dict
            if not stack and not marks:
                if self.top is None and top_dict is None and type(obj) is dict:
                    top_dict = obj
                return
            is_dict = type(obj) is dict
            par = parent_of_new(is_dict)
            if par is None:
                return
            parent, above = par
            role = consumers.get(id(parent))
            if role is not None:
                if role == _ROLE_TRACES and not is_dict:
                    devtrace[id(obj)] = (obj, self.n_traces + above)
                    consumers[id(obj)] = self.n_traces + above
                elif role != _ROLE_TRACES and is_dict:
                    pending.add(id(obj))
                return
            if parent is top_dict and top_dict is not None and not is_dict and above % 2 == 1:
                key = stack[-1]
                if key in ("segments", "device_traces"):
                    if key in role_keys:
                        raise NotStreamable(f"a second {key!r} key")
                    role_keys.add(key)
                    if key == "segments":
                        self.segments_list = obj
                        consumers[id(obj)] = _ROLE_SEGMENTS
                    else:
                        if self.segments_list is None:  # parsed in file order, segments must come first
                            raise NotStreamable("device_traces before segments")
                        self.traces_list = obj
                        consumers[id(obj)] = _ROLE_TRACES
                    self.streamed = True

        def extend(target: Any, items: list[Any]) -> None:
            role = consumers.get(id(target)) if type(target) is list else None
            if role is None:
                if type(target) is not list:
                    raise NotStreamable("APPENDS to something other than a list")
                target.extend(items)
                return
            if role == _ROLE_TRACES:
                for it in items:
                    if type(it) is not list or id(it) not in devtrace or devtrace[id(it)][1] != self.n_traces:
                        raise NotStreamable("device_traces holds something other than its own lists")
                    self.n_traces += 1
                return
            for it in items:
                if type(it) is dict:
                    if id(it) not in pending:
                        raise NotStreamable("a history entry or segment made elsewhere")
                    pending.discard(id(it))
                if role == _ROLE_SEGMENTS:
                    sink.segment(it)
                else:
                    sink.entry(role, it)

        try:
            while True:
                if pos > len(buf) - _MARGIN:
                    buf = self._more(buf, pos)
                    pos = 0
                op = buf[pos]
                pos += 1
                if op == 0x68:  # BINGET
                    push(memo_get(buf[pos]))
                    pos += 1
                elif op == 0x6A:  # LONG_BINGET
                    push(memo_get(_U4.unpack_from(buf, pos)[0]))
                    pos += 4
                elif op == 0x94:  # MEMOIZE
                    if not stack:
                        raise CorruptPickle("MEMOIZE on an empty stack")
                    memo_put(len(memo), memo_value(stack[-1]))
                elif op == 0x8C:  # SHORT_BINUNICODE
                    n = buf[pos]
                    raw, buf, pos = self._take(buf, pos + 1, n)
                    push(raw.decode("utf-8", "surrogatepass"))
                elif op == 0x4B:  # BININT1
                    push(buf[pos])
                    pos += 1
                elif op == 0x8A:  # LONG1
                    n = buf[pos]
                    raw, buf, pos = self._take(buf, pos + 1, n)
                    push(int.from_bytes(raw, "little", signed=True))
                elif op == 0x28:  # MARK
                    if len(marks) >= MAX_MARK_DEPTH:
                        raise NotStreamable("nested deeper than the streaming reader goes")
                    marks.append(len(stack))
                elif op == 0x75:  # SETITEMS
                    items = pop_mark()
                    if not stack or type(stack[-1]) is not dict:
                        raise NotStreamable("SETITEMS on something other than a dict")
                    d = stack[-1]
                    if len(items) % 2:
                        raise CorruptPickle("SETITEMS with an odd number of items")
                    for i in range(0, len(items), 2):
                        d[items[i]] = items[i + 1]
                elif op == 0x7D:  # EMPTY_DICT
                    d = {}
                    new_container(d)
                    push(d)
                elif op == 0x5D:  # EMPTY_LIST
                    if len(buf) - pos < _LOOKAHEAD and not self.eof:
                        buf = self._more(buf, pos)
                        pos = 0
                    m = _FRAMES_RUN.match(buf, pos)
                    if m is not None and (m.end() < len(buf) or self.eof) and _plain_list_slot(parent_of_new(False), consumers, top_dict):
                        run = m.group(2)
                        fr = frames_cache.get(run)
                        if fr is None:
                            refs = []
                            i = 0
                            while i < len(run):
                                if run[i] == 0x68:
                                    refs.append(memo_get(run[i + 1]))
                                    i += 2
                                else:
                                    refs.append(memo_get(_U4.unpack_from(run, i + 1)[0]))
                                    i += 5
                            fr = frames_cache.setdefault(run, tuple(refs))
                        w = m.group(1)
                        idx = len(memo) if w[0] == 0x94 else (w[1] if w[0] == 0x71 else _U4.unpack_from(w, 1)[0])
                        memo_put(idx, fr)
                        push(fr)
                        pos = m.end()
                        continue
                    lst: list[Any] = []
                    new_container(lst)
                    push(lst)
                elif op == 0x65:  # APPENDS
                    items = pop_mark()
                    if not stack:
                        raise CorruptPickle("APPENDS on an empty stack")
                    extend(stack[-1], items)
                elif op == 0x4A:  # BININT
                    push(_I4.unpack_from(buf, pos)[0])
                    pos += 4
                elif op == 0x4D:  # BININT2
                    push(buf[pos] | buf[pos + 1] << 8)
                    pos += 2
                elif op == 0x4E:  # NONE
                    push(None)
                elif op == 0x88:  # NEWTRUE
                    push(True)
                elif op == 0x89:  # NEWFALSE
                    push(False)
                elif op == 0x47:  # BINFLOAT
                    push(_F8.unpack_from(buf, pos)[0])
                    pos += 8
                elif op == 0x61:  # APPEND
                    if len(stack) < 2:
                        raise CorruptPickle("APPEND needs a list and an item")
                    it = stack.pop()
                    extend(stack[-1], [it])
                elif op == 0x73:  # SETITEM
                    if len(stack) < 3 or type(stack[-3]) is not dict:
                        raise NotStreamable("SETITEM on something other than a dict")
                    v = stack.pop()
                    k = stack.pop()
                    stack[-1][k] = v
                elif op == 0x71:  # BINPUT
                    if not stack:
                        raise CorruptPickle("BINPUT on an empty stack")
                    memo_put(buf[pos], memo_value(stack[-1]))
                    pos += 1
                elif op == 0x72:  # LONG_BINPUT
                    if not stack:
                        raise CorruptPickle("LONG_BINPUT on an empty stack")
                    memo_put(_U4.unpack_from(buf, pos)[0], memo_value(stack[-1]))
                    pos += 4
                elif op == 0x58 or op == 0x8D:  # BINUNICODE, BINUNICODE8
                    n = _U4.unpack_from(buf, pos)[0] if op == 0x58 else _U8.unpack_from(buf, pos)[0]
                    raw, buf, pos = self._take(buf, pos + (4 if op == 0x58 else 8), n)
                    push(raw.decode("utf-8", "surrogatepass"))
                elif op == 0x43 or op == 0x42 or op == 0x8E or op == 0x96:  # (SHORT_)BINBYTES(8), BYTEARRAY8
                    if op == 0x43:
                        n, pos = buf[pos], pos + 1
                    elif op == 0x42:
                        n, pos = _U4.unpack_from(buf, pos)[0], pos + 4
                    else:
                        n, pos = _U8.unpack_from(buf, pos)[0], pos + 8
                    raw, buf, pos = self._take(buf, pos, n)
                    push(bytearray(raw) if op == 0x96 else raw)
                elif op == 0x8B:  # LONG4
                    n = _I4.unpack_from(buf, pos)[0]
                    if n < 0:
                        raise CorruptPickle("LONG4 with a negative length")
                    raw, buf, pos = self._take(buf, pos + 4, n)
                    push(int.from_bytes(raw, "little", signed=True))
                elif op == 0x29:  # EMPTY_TUPLE
                    push(())
                elif op == 0x85 or op == 0x86 or op == 0x87:  # TUPLE1, TUPLE2, TUPLE3
                    n = op - 0x84
                    if len(stack) < n or (marks and marks[-1] > len(stack) - n):
                        raise CorruptPickle("TUPLE with too few items")
                    t = tuple(stack[-n:])
                    del stack[-n:]
                    push(t)
                elif op == 0x74:  # TUPLE
                    push(tuple(pop_mark()))
                elif op == 0x6C:  # LIST
                    push(pop_mark())
                elif op == 0x64:  # DICT
                    items = pop_mark()
                    if len(items) % 2:
                        raise CorruptPickle("DICT with an odd number of items")
                    push({items[i]: items[i + 1] for i in range(0, len(items), 2)})
                elif op == 0x8F:  # EMPTY_SET
                    push(set())
                elif op == 0x90:  # ADDITEMS
                    items = pop_mark()
                    if not stack or type(stack[-1]) is not set:
                        raise NotStreamable("ADDITEMS on something other than a set")
                    stack[-1].update(items)
                elif op == 0x91:  # FROZENSET
                    push(frozenset(pop_mark()))
                elif op == 0x95:  # FRAME: a hint for buffering, nothing to build
                    pos += 8
                elif op == 0x80:  # PROTO
                    if buf[pos] > 5:
                        raise CorruptPickle(f"unsupported pickle protocol {buf[pos]}")
                    pos += 1
                elif op == 0x30:  # POP
                    if marks and marks[-1] == len(stack):
                        marks.pop()  # POP of a MARK (as pickle does)
                    elif not stack:
                        raise CorruptPickle("POP on an empty stack")
                    else:
                        pending.discard(id(stack.pop()))
                elif op == 0x31:  # POP_MARK
                    for o in pop_mark():
                        pending.discard(id(o))
                elif op == 0x2E:  # STOP
                    if len(stack) != 1 or marks:
                        raise CorruptPickle("STOP with an unfinished stack")
                    self.top = stack[0]
                    if self.streamed and (type(self.top) is not dict or self.top is not top_dict):
                        raise NotStreamable("the streamed lists are not in the top dict")
                    return self.top
                elif op in _UNSAFE:
                    raise UnsafePickleError(_unsafe_message(op, buf, pos, stack))
                elif op in _TEXT:
                    raise NotStreamable("a text-protocol opcode")
                elif op == 0x32:  # DUP
                    raise NotStreamable("DUP")
                else:
                    raise CorruptPickle(f"invalid load key, {bytes([op])!r}")
        except (IndexError, struct.error):
            raise CorruptPickle("truncated (the file ended inside an opcode)") from None
        except UnicodeDecodeError as err:
            raise CorruptPickle(f"a string that is not UTF-8 ({str(err)[:120]})") from None
        except TypeError as err:  # an unhashable key
            raise CorruptPickle(f"TypeError: {str(err)[:200]}") from None


# GLOBAL, STACK_GLOBAL, INST, OBJ, REDUCE, BUILD, NEWOBJ, NEWOBJ_EX, EXT1/2/4, PERSID, BINPERSID, NEXT_BUFFER,
# READONLY_BUFFER: each names, calls or builds something beyond plain data.
_UNSAFE = frozenset(b"c\x93ioRb\x81\x92\x82\x83\x84PQ\x97\x98")
# INT, LONG, FLOAT, STRING, UNICODE, BINSTRING, SHORT_BINSTRING, GET, PUT: protocol 0/1 text forms (read in whole)
_TEXT = frozenset(b"ILFSVTUgp")


def _plain_list_slot(par: tuple[Any, int] | None, consumers: dict[int, int], top_dict: Any) -> bool:
    """Whether a list made where ``par`` says may be a frames list (not one of the lists streamed)."""
    return par is None or (id(par[0]) not in consumers and par[0] is not top_dict)


def _unsafe_message(op: int, buf: bytes, pos: int, stack: list[Any]) -> str:
    if op in (0x63, 0x69):  # GLOBAL, INST: "module\nname\n" follows
        parts = buf[pos:pos + 512].split(b"\n", 2)
        if len(parts) >= 2:
            name = f"{parts[0].decode('ascii', 'replace')}.{parts[1].decode('ascii', 'replace')}"
            return _UNSAFE_GLOBAL.format(name[:200])
    if op == 0x93 and len(stack) >= 2 and isinstance(stack[-2], str) and isinstance(stack[-1], str):
        return _UNSAFE_GLOBAL.format(f"{stack[-2]}.{stack[-1]}"[:200])
    if op in (0x50, 0x51):
        return ("refusing to load: the pickle uses a persistent id (torch.save format?), "
                "and a memory snapshot holds only plain data")
    return (f"refusing to load: the pickle uses opcode {bytes([op])!r}, which builds or calls objects, "
            "and a memory snapshot holds only plain data")

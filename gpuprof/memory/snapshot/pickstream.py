"""Read a snapshot pickle as a stream, in memory bounded by what gpuprof keeps, not by the file.

``pickle.load`` of a snapshot builds a Python object for every history entry: 10-30x the file, so a 1 GB
snapshot needs tens of GB. This module walks the pickle's opcodes itself, from the file read in chunks, and
hands each history entry and each segment to a :class:`~gpuprof.memory.snapshot.pickops.Sink` as soon as its list
receives it; nothing keeps it afterwards (its memo slot holds a marker). It builds only plain data, like
:mod:`gpuprof.memory.snapshot.safeload`, and refuses the same opcodes (:mod:`gpuprof.memory.snapshot.pickops`).

Besides: a frames list made only of references to frame dicts already seen (PyTorch writes one such list per
entry, the frame dicts shared) is interned by the bytes of those references into one list (never changed
afterwards: a change is read in whole), so a million entries with a thousand distinct stacks keep a thousand
lists and the site/kind caches (keyed by the list
object) hit; memoized strings are interned by value; declared lengths are checked against what is left of
the file before anything is read.

The reader takes the layout PyTorch's pickler writes. Whatever it cannot stream and still reproduce what
``pickle.load`` builds (a reference back to an entry handed on, a memo slot written out of order, text-protocol
opcodes, a second ``segments`` key, a frames list that contains itself...) raises :class:`~gpuprof.memory.snapshot.pickops.NotStreamable`; the caller then
reads the file in whole, as before.
"""

from __future__ import annotations

from struct import error as struct_error
from typing import Any

from gpuprof.memory.snapshot.pickops import (
    CONSUMED,
    F8,
    FRAMES_RUN,
    I4,
    TEXT,
    U4,
    U8,
    UNSAFE,
    CorruptPickle,
    NotStreamable,
    Readable,
    Sink,
    refs,
    unsafe_message,
)
from gpuprof.memory.snapshot.pickshape import Shape
from gpuprof.memory.snapshot.safeload import UnsafePickleError

__all__ = ["StreamReader", "NotStreamable", "CorruptPickle", "MAX_MARK_DEPTH"]

_CHUNK = 256 << 10
_MARGIN = 16  # bytes every fixed-size opcode with its argument fits in
_LOOKAHEAD = 8192  # a whole frames list of references (at most 1000 per batch, 5 bytes each) fits in it
MAX_MARK_DEPTH = 10_000  # open MARKs: real snapshots nest a handful; deeper is read in whole (bounded there)
_i4 = I4.unpack_from
_u4 = U4.unpack_from
_f8 = F8.unpack_from
_u8 = U8.unpack_from
_HINT = 48  # bytes of a frames run that find it again (see _entry)
_HINTS_KEPT = 1 << 14
_LONG1_MASK = [(1 << (8 * n)) - 1 for n in range(9)]
_LONG1_SIGN = [1 << (8 * n - 1) if n else 1 for n in range(9)]
_match_frames = FRAMES_RUN.match


def _entry(d: dict[Any, Any], buf: bytes, p: int, lim: int, memo: list[Any], strings: dict[str, str],
           frames_cache: dict[bytes, list[Any]], interned: set[int],
           runs_seen: dict[bytes, tuple[bytes, list[Any]]]) -> int:
    """Fill the history entry or segment ``d`` (its EMPTY_DICT just read) from ``buf[p:]`` when it has the
    pickler's common shape: MEMOIZE, MARK, pairs of a memo-string key and a scalar, a memoized string or a
    frames list of references, SETITEMS, all before ``lim``. Returns the position after it, or -1 with
    nothing changed (``d`` left empty) for the general loop to read it opcode by opcode, which gives the
    same result, or refuses it the same way."""
    if buf[p] != 0x94 or buf[p + 1] != 0x28:
        return -1
    p += 2
    base = len(memo) + 1  # the dict's own slot comes first
    adds: list[Any] = []
    while p <= lim:
        op = buf[p]
        if op == 0x6A:
            k = _u4(buf, p + 1)[0]
            p += 5
        elif op == 0x68:
            k = buf[p + 1]
            p += 2
        elif op == 0x75:  # SETITEMS: the entry is whole
            memo.append(CONSUMED)
            memo.extend(adds)
            return p + 1
        else:
            break
        try:
            key = memo[k]
        except IndexError:
            break
        if key is CONSUMED or p > lim:
            break
        op = buf[p]
        if op == 0x6A:
            try:
                v = memo[_u4(buf, p + 1)[0]]
            except IndexError:
                break
            if v is CONSUMED:
                break
            p += 5
        elif op == 0x68:
            try:
                v = memo[buf[p + 1]]
            except IndexError:
                break
            if v is CONSUMED:
                break
            p += 2
        elif op == 0x8A:  # LONG1 of up to 8 bytes (lim leaves _MARGIN bytes to read 8 from)
            n = buf[p + 1]
            if n > 8:
                break
            v = _u8(buf, p + 2)[0] & _LONG1_MASK[n]
            if v >= _LONG1_SIGN[n]:  # two's complement of n bytes
                v -= _LONG1_SIGN[n] << 1
            p += 2 + n
        elif op == 0x4B:  # BININT1
            v = buf[p + 1]
            p += 2
        elif op == 0x4A:  # BININT
            v = _i4(buf, p + 1)[0]
            p += 5
        elif op == 0x4D:  # BININT2
            v = buf[p + 1] | buf[p + 2] << 8
            p += 3
        elif op == 0x8C:  # SHORT_BINUNICODE, memoized or not
            n = buf[p + 1]
            if p + 2 + n > lim:
                break
            v = buf[p + 2:p + 2 + n].decode("utf-8", "surrogatepass")
            p += 2 + n
            if buf[p] == 0x94:
                v = strings.setdefault(v, v)
                adds.append(v)
                p += 1
        elif op == 0x5D:  # EMPTY_LIST: a frames list of references only
            if buf[p + 1] == 0x94 and buf[p + 2] == 0x28:
                # the run FRAMES_RUN would match, when it is one met before: its bytes, then APPENDS and no
                # further APPEND(S) (the regex tokenizes the same bytes the same way and stops at the same place)
                hint = runs_seen.get(buf[p + 3:p + 3 + _HINT])
                if hint is not None:
                    run, v = hint
                    q = p + 3 + len(run)
                    if q + 1 <= lim and buf[q] == 0x65 and buf[q + 1] != 0x28 and buf[q + 1] != 0x61 \
                            and buf.startswith(run, p + 3):
                        try:
                            d[key] = v
                        except TypeError:
                            break
                        adds.append(v)
                        p = q + 1
                        continue
            m = _match_frames(buf, p + 1)
            if m is None or m.end() > lim:
                break
            w = m.group(1)
            slot = base + len(adds)
            if w[0] != 0x94 and (w[1] if w[0] == 0x71 else _u4(w, 1)[0]) != slot:
                break
            run = m.group(2)
            v = frames_cache.get(run)
            if v is None:
                try:
                    v = refs(run, memo, writing=slot)
                except (NotStreamable, IndexError):
                    break
                frames_cache[run] = v
                interned.add(id(v))
            if w[0] == 0x94:
                if len(runs_seen) >= _HINTS_KEPT:
                    runs_seen.clear()
                runs_seen[buf[p + 3:p + 3 + _HINT]] = (run, v)
            adds.append(v)
            p = m.end()
        elif op == 0x4E:
            v = None
            p += 1
        elif op == 0x88 or op == 0x89:
            v = op == 0x88
            p += 1
        elif op == 0x47:  # BINFLOAT
            v = _f8(buf, p + 1)[0]
            p += 9
        else:
            break
        try:
            d[key] = v
        except TypeError:  # an unhashable key: the general loop says so
            break
    d.clear()
    return -1


class StreamReader:
    """One pass over a pickle from ``fh`` (``size`` bytes: declared lengths are checked against it).

    :meth:`read` returns the top object, the streamed lists in it left empty; ``streamed`` says whether any
    was (else the object is whole), ``segments_list``/``traces_list`` are those lists, ``n_traces`` how many
    device lists ``device_traces`` held.
    """

    def __init__(self, fh: Readable, size: int, sink: Sink) -> None:
        self.fh = fh
        self.size = size
        self.shape = Shape(sink)
        self.read_so_far = 0  # bytes read from fh
        self.eof = False

    @property
    def streamed(self) -> bool:
        return bool(self.shape.roles)

    @property
    def segments_list(self) -> list[Any] | None:
        return self.shape.segments

    @property
    def traces_list(self) -> list[Any] | None:
        return self.shape.traces

    @property
    def n_traces(self) -> int:
        return self.shape.n_traces

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

    def read(self) -> Any:
        try:
            return self._loop()
        except (IndexError, struct_error):
            raise CorruptPickle("truncated, or a reference to a memo slot never written") from None
        except UnicodeDecodeError as err:
            raise CorruptPickle(f"a string that is not UTF-8 ({str(err)[:120]})") from None
        except TypeError as err:  # an unhashable key
            raise CorruptPickle(f"TypeError: {str(err)[:200]}") from None

    def _loop(self) -> Any:  # noqa: C901 - one dispatch loop, kept in one frame for speed
        shape = self.shape
        stack: list[Any] = []
        marks: list[int] = []
        memo: list[Any] = []
        strings: dict[str, str] = {}
        frames_cache: dict[bytes, list[Any]] = {}
        runs_seen: dict[bytes, tuple[bytes, list[Any]]] = {}  # a frames run's first bytes -> the run, its list
        interned = shape.interned
        push = stack.append
        memoize = memo.append
        buf = self._more(b"", 0)
        blen = len(buf)
        pos = 0
        lim = -1  # past it, the slow path: read on, and check the frame's end
        frame_end = -1  # where the current FRAME ends (file offset; -1: none)

        def memo_put(idx: int, obj: Any) -> None:
            if idx != len(memo):
                raise NotStreamable("a memo slot written out of order")
            if type(obj) is str:  # interned: snapshots repeat their strings
                obj = stack[-1] = strings.setdefault(obj, obj)
            elif type(obj) is dict or type(obj) is list:
                obj = shape.memo_value(obj)
            memo.append(obj)

        def pop_mark(into: bool = False) -> list[Any]:
            """The items above the last MARK; ``into``: they go into the container below it, which must sit
            above the MARK before (pickle.load checks the same)."""
            if not marks:
                raise CorruptPickle("an opcode needs a MARK and there is none")
            k = marks.pop()
            items = stack[k:]
            del stack[k:]
            if into and (k == 0 or (marks and marks[-1] > k - 1)):
                raise CorruptPickle("stack underflow (a container below its MARK)")
            return items

        pending = shape.pending
        roles_get = shape.roles.get
        while True:
            if pos > lim:
                if frame_end >= 0 and pos + self.read_so_far - blen >= frame_end:
                    if pos + self.read_so_far - blen > frame_end:  # pickle.load's readers disagree then: read in whole
                        raise NotStreamable("an opcode runs past the end of its frame")
                    frame_end = -1
                if pos > blen - _MARGIN and not self.eof:
                    buf = self._more(buf, pos)
                    blen = len(buf)
                    pos = 0
                lim = blen - _MARGIN if frame_end < 0 else min(blen - _MARGIN, frame_end - (self.read_so_far - blen) - 1)
            op = buf[pos]
            pos += 1
            if op == 0x68:  # BINGET
                o = memo[buf[pos]]
                pos += 1
                if o is CONSUMED:
                    raise NotStreamable("a reference back to a history entry or segment")
                push(o)
            elif op == 0x6A:  # LONG_BINGET
                o = memo[U4.unpack_from(buf, pos)[0]]
                pos += 4
                if o is CONSUMED:
                    raise NotStreamable("a reference back to a history entry or segment")
                push(o)
            elif op == 0x94:  # MEMOIZE
                if marks and marks[-1] >= len(stack):
                    raise CorruptPickle("MEMOIZE with nothing above the MARK")
                o = stack[-1]
                t = type(o)
                if t is str:
                    o = stack[-1] = strings.setdefault(o, o)
                elif t is dict or t is list:
                    o = shape.memo_value(o)
                memoize(o)
            elif op == 0x8C or op == 0x8A:  # SHORT_BINUNICODE, LONG1
                n = buf[pos]
                end = pos + 1 + n
                if end <= blen:
                    raw = buf[pos + 1:end]
                    pos = end
                else:
                    raw, buf, pos = self._take(buf, pos + 1, n)
                    blen, lim = len(buf), -1
                push(raw.decode("utf-8", "surrogatepass") if op == 0x8C else int.from_bytes(raw, "little", signed=True))
            elif op == 0x4B:  # BININT1
                push(buf[pos])
                pos += 1
            elif op == 0x28:  # MARK
                if len(marks) >= MAX_MARK_DEPTH:
                    raise NotStreamable("nested deeper than the streaming reader goes")
                marks.append(len(stack))
            elif op == 0x75:  # SETITEMS
                items = pop_mark(True)
                d = stack[-1]
                if type(d) is not dict:
                    raise NotStreamable("SETITEMS on something other than a dict")
                if len(items) % 2:
                    raise CorruptPickle("SETITEMS with an odd number of items")
                for i in range(0, len(items), 2):
                    d[items[i]] = items[i + 1]
            elif op == 0x7D:  # EMPTY_DICT
                d = {}
                # an item of a device's history list, batched (the list below the MARK; the first item: the
                # list on top, the MARK above it) or appended alone: what Shape.new finds then, read whole at once
                role = roles_get(id(stack[-1]), -9) if stack else -9
                if role == -9 and marks and 0 < marks[-1] <= len(stack):
                    role = roles_get(id(stack[marks[-1] - 1]), -9)
                if role >= 0:
                    pending.add(id(d))
                    push(d)
                    if pos + 2 <= lim and len(marks) < MAX_MARK_DEPTH:
                        end = _entry(d, buf, pos, lim, memo, strings, frames_cache, interned, runs_seen)
                        if end >= 0:
                            pos = end
                    continue
                shape.new(d, stack, marks)
                push(d)
            elif op == 0x5D:  # EMPTY_LIST
                if blen - pos < _LOOKAHEAD and not self.eof:
                    buf = self._more(buf, pos)
                    blen, pos, lim = len(buf), 0, -1
                m = FRAMES_RUN.match(buf, pos)
                if m is not None and (m.end() < blen or self.eof) and shape.plain_list_slot(stack, marks):
                    w = m.group(1)
                    slot = len(memo) if w[0] == 0x94 else (w[1] if w[0] == 0x71 else U4.unpack_from(w, 1)[0])
                    if slot != len(memo):
                        raise NotStreamable("a memo slot written out of order")
                    run = m.group(2)
                    fr = frames_cache.get(run)
                    if fr is None:
                        # a reference to `slot` is to this very list (it contains itself): pickle.load makes that
                        # cycle; one list interned for equal references cannot (read in whole)
                        fr = frames_cache[run] = refs(run, memo, writing=slot)
                        interned.add(id(fr))
                    memo_put(slot, fr)
                    push(fr)
                    pos = m.end()
                    continue
                lst: list[Any] = []
                shape.new(lst, stack, marks)
                push(lst)
            elif op == 0x65:  # APPENDS
                items = pop_mark(True)
                shape.extend(stack[-1], items)
            elif op == 0x4A:  # BININT
                push(I4.unpack_from(buf, pos)[0])
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
                push(F8.unpack_from(buf, pos)[0])
                pos += 8
            elif op == 0x61:  # APPEND
                it = stack.pop()
                if not stack or (marks and marks[-1] > len(stack) - 1):
                    raise CorruptPickle("APPEND needs a list and an item")
                shape.extend(stack[-1], [it])
            elif op == 0x73:  # SETITEM
                if len(stack) < 3 or (marks and marks[-1] > len(stack) - 3):
                    raise CorruptPickle("SETITEM needs a dict, a key and a value")
                if type(stack[-3]) is not dict:
                    raise NotStreamable("SETITEM on something other than a dict")
                v = stack.pop()
                k = stack.pop()
                stack[-1][k] = v
            elif op == 0x71 or op == 0x72:  # BINPUT, LONG_BINPUT
                if marks and marks[-1] >= len(stack):
                    raise CorruptPickle("PUT with nothing above the MARK")
                if op == 0x71:
                    memo_put(buf[pos], stack[-1])
                    pos += 1
                else:
                    memo_put(U4.unpack_from(buf, pos)[0], stack[-1])
                    pos += 4
            elif op == 0x58 or op == 0x8D:  # BINUNICODE, BINUNICODE8
                n = U4.unpack_from(buf, pos)[0] if op == 0x58 else U8.unpack_from(buf, pos)[0]
                raw, buf, pos = self._take(buf, pos + (4 if op == 0x58 else 8), n)
                blen, lim = len(buf), -1
                push(raw.decode("utf-8", "surrogatepass"))
            elif op == 0x43 or op == 0x42 or op == 0x8E or op == 0x96:  # (SHORT_)BINBYTES(8), BYTEARRAY8
                if op == 0x43:
                    n, pos = buf[pos], pos + 1
                elif op == 0x42:
                    n, pos = U4.unpack_from(buf, pos)[0], pos + 4
                else:
                    n, pos = U8.unpack_from(buf, pos)[0], pos + 8
                raw, buf, pos = self._take(buf, pos, n)
                blen, lim = len(buf), -1
                push(bytearray(raw) if op == 0x96 else raw)
            elif op == 0x8B:  # LONG4
                n = I4.unpack_from(buf, pos)[0]
                if n < 0:
                    raise CorruptPickle("LONG4 with a negative length")
                raw, buf, pos = self._take(buf, pos + 4, n)
                blen, lim = len(buf), -1
                push(int.from_bytes(raw, "little", signed=True))
            elif op == 0x29:  # EMPTY_TUPLE
                push(())
            elif op == 0x85 or op == 0x86 or op == 0x87:  # TUPLE1, TUPLE2, TUPLE3
                n = op - 0x84
                if len(stack) < n or (marks and marks[-1] > len(stack) - n):
                    raise CorruptPickle("TUPLE with too few items")
                tup = tuple(stack[-n:])
                del stack[-n:]
                push(tup)
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
                items = pop_mark(True)
                if type(stack[-1]) is not set:
                    raise NotStreamable("ADDITEMS on something other than a set")
                stack[-1].update(items)
            elif op == 0x91:  # FROZENSET
                push(frozenset(pop_mark()))
            elif op == 0x95:  # FRAME: its length, checked as pickle.load checks it
                if frame_end >= 0:
                    raise NotStreamable("a frame begins inside another")
                n = U8.unpack_from(buf, pos)[0]
                pos += 8
                frame_end = self.read_so_far - blen + pos + n
                if frame_end > self.size:
                    raise CorruptPickle("truncated (a frame runs past the end of the file)")
                lim = -1
            elif op == 0x80:  # PROTO
                if buf[pos] > 5:
                    raise CorruptPickle(f"unsupported pickle protocol {buf[pos]}")
                pos += 1
            elif op == 0x30:  # POP
                if marks and marks[-1] == len(stack):
                    marks.pop()  # POP of a MARK (as pickle does)
                else:
                    shape.pending.discard(id(stack.pop()))
            elif op == 0x31:  # POP_MARK
                for o in pop_mark():
                    shape.pending.discard(id(o))
            elif op == 0x2E:  # STOP
                if not stack or (marks and marks[-1] >= len(stack)):
                    raise CorruptPickle("STOP with nothing to return")
                if len(stack) != 1 or marks:  # pickle.load returns the top and ignores the rest: do as it does
                    raise NotStreamable("STOP with items left on the stack")
                if self.streamed and stack[0] is not shape.top:
                    raise NotStreamable("the streamed lists are not in the top dict")
                return stack[0]
            elif op in UNSAFE:
                raise UnsafePickleError(unsafe_message(op, buf, pos, stack))
            elif op in TEXT:
                raise NotStreamable("a text-protocol opcode")
            elif op == 0x32:  # DUP: a second reference the streamed items must not have
                raise NotStreamable("DUP")
            else:
                raise CorruptPickle(f"invalid load key, {bytes([op])!r}")


"""Normalising raw trace events (:mod:`gpuprof.trace.raw`) into the trace model.

One flat loop per chunk turns each decoded event into a compact
:class:`~gpuprof.trace.model.Event` of one :class:`~gpuprof.trace.vocab.Kind`
(the several spellings of one arg become one field, ids become ints,
payloads take the encoding the accessors of :mod:`gpuprof.trace.model`
read) and reads the metadata (devices, rank, process and thread names).
"""

from __future__ import annotations

import json

import msgspec

from gpuprof.errors import InputError
from gpuprof.trace import raw as R
from gpuprof.trace.collectives import comm_args, is_comm_event_name
from gpuprof.trace.model import (
    CONCRETE_INPUT_OPS,
    DTYPE_BF16,
    DTYPE_DOUBLE,
    DTYPE_FLOAT,
    DTYPE_FP16,
    DTYPE_HALF,
    OP_AUTOGRAD,
    DeviceInfo,
    Event,
    KernelConfig,
    MemoryPayload,
    Trace,
)
from gpuprof.trace.namerepair import repair_note
from gpuprof.trace.pairing import pair_slices
from gpuprof.trace.table import TableBuilder
from gpuprof.trace.vocab import CATEGORY_KIND, Kind, parse_copy_name

__all__ = ["Builder", "device_info", "shape_text"]

# plain ints for the hot loop
_CAT_KIND: dict[str, int] = {cat: int(kind) for cat, kind in CATEGORY_KIND.items()}
_GPU_KINDS = frozenset({int(Kind.KERNEL), int(Kind.MEMCPY), int(Kind.MEMSET), int(Kind.GPU_SYNC), int(Kind.GPU_ANNOTATION)})

_DTYPE_FLAGS: dict[str, int] = {
    "float": DTYPE_FLOAT,
    "c10::Half": DTYPE_HALF | DTYPE_FP16,
    "c10::BFloat16": DTYPE_HALF | DTYPE_BF16,
    "Half": DTYPE_HALF | DTYPE_FP16,
    "BFloat16": DTYPE_HALF | DTYPE_BF16,
    "c10::Float8_e4m3fn": DTYPE_HALF,
    "c10::Float8_e5m2": DTYPE_HALF,
    "double": DTYPE_DOUBLE,
}


# an operator's "Sequence number" kept past its chunk (B/E events): only its presence is read
_PRESENT = msgspec.Raw(b"0")
_ABSENT = msgspec.Raw()

# distinct "Input type" texts remembered with their flags: a real trace has hundreds; past this many (a
# generated trace of all-different lists) the rest are decoded each time, so the cache stays bounded
_TYPE_CACHE_MAX = 1 << 16
# values shared (Builder._numbers, _durations) before the table is emptied (checked per chunk): most values that
# repeat are near each other in the file (an operator, its launch and its kernel; a block's allocation and free),
# and a small table stays in the CPU's cache. Measured on the 200 MB benchmark traces: a table of 2**20 ids cost
# 19% more loading time (cache misses) than none on the V100 one; 2**16 costs ~0-7% and keeps most of the memory
_NUMBERS_MAX = 1 << 16
_DURATIONS_MAX = 1 << 16
# distinct pids/tids shared (see Builder): once this many are held, values already there are still
# shared but no more are added (checked per chunk), so a trace of all-different thread ids pays a
# bounded table (a few MB), not one entry per event
_INTERN_MAX = 1 << 16


def _type_flags(raw: bytes) -> int:
    """The DTYPE_* flags of an operator's ``Input type`` JSON text (a list of type names).

    Anything else (a string, a number: no profiler writes one) has no flags, as an
    unreadable value (1e400, deep nesting, bytes that are not UTF-8) has: the dtype is unknown,
    and the trace stays readable (as with an odd ``Input Dims``).
    """
    try:
        types = msgspec.json.decode(raw)
    except (msgspec.DecodeError, RecursionError, UnicodeDecodeError):
        return 0
    flags = 0
    if type(types) is list:
        dtype_flags = _DTYPE_FLAGS
        for s in types:
            if type(s) is str:
                flags |= dtype_flags.get(s, 0)
    return flags

# The largest timestamp or duration (µs) an event may have: 2^53 µs is 285 years, beyond any clock a
# profiler reads (epoch µs are ~1.7e15), and the largest a float64 holds to the µs. Beyond it (1.7e308)
# sums of times overflow to inf and every step, gap and share computed from them is meaningless.
MAX_TIME_US = float(2**53)


_I64 = 2**63


def _as_int(x: object) -> int:
    """An id or index written as an int or a string; -1 when absent, unreadable or beyond int64 (the columns')."""
    if type(x) is int:
        return x
    if x is None:
        return -1
    try:
        v = int(x)  # type: ignore[call-overload]  # any value: a failure is -1 below
    except (TypeError, ValueError):
        return -1
    return v if -_I64 <= v < _I64 else -1


_UNSEEN = object()


def _json_value(raw: bytes) -> object:
    """An undecoded value as msgspec decodes it (None: absent, or not readable: 1e400, bytes that are not UTF-8)."""
    if not raw:
        return None
    try:
        return msgspec.json.decode(raw)
    except (msgspec.DecodeError, RecursionError, UnicodeDecodeError):
        return None


def _dims(x: object) -> tuple[int, ...] | None:
    """A grid/block value: a list of up to 3 non-negative ints, else None."""
    if type(x) is not list:
        return None
    if len(x) == 3:  # what Kineto writes: tested without a generator (one per kernel, twice)
        a, b, c = x
        if type(a) is int and type(b) is int and type(c) is int and a >= 0 and b >= 0 and c >= 0:
            return (a, b, c)
        return None
    if 0 < len(x) < 3 and all(type(v) is int and v >= 0 for v in x):
        return tuple(x)
    return None


def _address(x: object) -> int:
    """A [memory] event's Addr: an int, or a string in any base Python reads ("0x7f..."); -1 when absent."""
    if type(x) is int:
        return x
    if isinstance(x, str):
        try:
            return int(x, 0)
        except ValueError:
            return -1
    return -1


def _cache_address(addresses: dict[object, int], x: object) -> int:
    """``_address(x)``, remembered for a string (an allocation's free repeats its address)."""
    got = _address(x)
    if type(x) is str:
        addresses[x] = got
    return got


class Builder:
    """Turns raw events into a :class:`Trace`: :meth:`ingest` chunk by chunk, then :meth:`finish`.

    Keeps only the events of a known kind (see :mod:`gpuprof.trace.vocab`),
    each as one compact :class:`Event`; B/E pairs are matched once all chunks
    are in (see :mod:`gpuprof.trace.pairing`).
    """

    def __init__(self, path: str) -> None:
        self.trace = Trace(path=path)
        self.events_seen = 0
        self.names_repaired = 0  # set by the decoder (gpuprof.trace.namerepair)
        # per distinct name: one string object for all its events, whether it is a communication event
        # (is_comm_event_name, asked once per name) and its code among the Python frames' names (given every
        # name, see TableBuilder.add_columns): one look-up per event for the three
        self._name_info: dict[str, tuple[str, bool, int]] = {}
        # one object per distinct int or str pid/tid: a trace has a few processes and threads, and
        # an unshared pid and tid cost 56-110 bytes per event (a third of a small event's memory).
        # (Durations are shared too, in _durations below, but only those of the events kept as rows: hashing
        # the Python frames' durations, which go to columns, cost 10% more loading time for nothing.)
        self._ids: dict[int | str, int | str] = {}
        # one object per distinct External id and correlation id of the operators, runtime calls and GPU work
        # (a launch shares its ids with its operator and its kernel), and per distinct size, total and address
        # of the [memory] events: an int past 256 is an object of its own (32 bytes) each time the decoder reads
        # it. With the durations (24 bytes a float; a trace has a few thousand distinct ones) that was 8-9% of
        # `analyze`'s peak memory on the 200 MB benchmark traces (issue 44). Both tables are emptied when
        # loading is done, and whenever one holds _NUMBERS_MAX / _DURATIONS_MAX values (bounded, whatever the trace)
        self._numbers: dict[int, int] = {}
        self._addresses: dict[object, int] = {}  # a [memory] event's Addr written as a string -> its int, shared as the numbers
        self._durations: dict[float, float] = {}
        self._type_flags: dict[bytes, int] = {}  # Input type text -> DTYPE_* flags
        self._stacks: dict[str, str] = {}
        self._shapes: dict[bytes, str] = {}  # Input Dims bytes -> one string object per distinct text
        self._extras: dict[tuple[int, str | None, str | None], tuple[int, str | None, str | None]] = {}
        self._extras2: dict[tuple[int, str], tuple[int, str]] = {}
        self._extras5: dict[tuple[int, str | None, str | None, float | None, str | None], object] = {}
        self._configs: dict[tuple[tuple[int, ...] | None, tuple[int, ...] | None, int, float], KernelConfig] = {}
        # (grid and block texts, registers, occupancy as written) -> the shared KernelConfig (None: none, a
        # null grid without registers): registers and occupancy are compared as numbers (38 == 38.0), as
        # _kernel_config reads them (int() and float() of equal numbers are equal). Bounded as _type_flags
        self._config_keys: dict[tuple[object, ...], KernelConfig | None] = {}
        # Python frames go to columns, not Events: most of a with_stack trace's events (see gpuprof.trace.table)
        self._python = TableBuilder(int(Kind.PYTHON_FUNCTION))
        self._device_props: list[R.RawDeviceProps] = []
        # B/E events in file order: paired in finish(), once every chunk is in,
        # so a pair split across chunks (or across processes) still pairs
        self._slices: list[R.RawEvent] = []
        self._no_dur = 0  # X events without dur, kept as zero-length
        self._bad_time = 0  # events whose ts or dur is beyond MAX_TIME_US (or NaN): left out
        self._pairs = 0  # B/E pairs made into complete events

    # -- header / metadata
    def metadata(self, top: R.RawTrace) -> None:
        props = top.deviceProperties or top.computeProperties
        if props and not self._device_props:
            self._device_props = list(props)
        di = top.distributedInfo
        if di is not None:
            r, w = _as_int(di.rank), _as_int(di.world_size)
            if r >= 0 and self.trace.rank is None:
                self.trace.rank = r
            if w > 0 and self.trace.world_size is None:
                self.trace.world_size = w
            if isinstance(di.backend, str) and not self.trace.backend:
                self.trace.backend = di.backend
        if top.baseTimeNanoseconds is not None and self.trace.base_time_ns is None:
            self.trace.base_time_ns = int(top.baseTimeNanoseconds)
        if top.with_stack:
            self.trace.with_stack = True
        if top.profile_memory:
            self.trace.profile_memory = True

    # -- events
    def ingest(self, events: list[R.RawEvent]) -> None:  # noqa: C901 - one hot loop, kept flat for speed
        t = self.trace
        self.events_seen += len(events)
        name_info = self._name_info
        cat_kind = _CAT_KIND
        out = {
            int(Kind.CPU_OP): t.ops,
            int(Kind.USER_ANNOTATION): t.annotations,
            int(Kind.RUNTIME): t.runtime,
            int(Kind.KERNEL): t.kernels,
            int(Kind.MEMCPY): t.memcpys,
            int(Kind.MEMSET): t.memsets,
            int(Kind.GPU_SYNC): t.gpu_syncs,
            int(Kind.GPU_ANNOTATION): t.gpu_annotations,
            int(Kind.MEMORY): t.memory,
        }
        K_OP = int(Kind.CPU_OP)
        K_KERNEL = int(Kind.KERNEL)
        K_MEMCPY = int(Kind.MEMCPY)
        K_MEM = int(Kind.MEMORY)
        K_PY = int(Kind.PYTHON_FUNCTION)
        # Python frames: their fields gathered here, added to the table's columns at the end of the chunk
        py_code: list[int] = []
        py_thread: list[tuple[int | str, int | str]] = []
        py_ts: list[float] = []
        py_dur: list[float] = []
        py_ids: list[tuple[int, int, int]] = []  # (position, ext, corr) of the few with an id
        py_name_codes = self._python.name_codes
        ops_add = t.ops.append
        mem_add = t.memory.append
        type_flags = self._type_flags
        # setdefault adds a value, get only shares one already there (see _INTERN_MAX)
        intern_id = self._ids.setdefault if len(self._ids) < _INTERN_MAX else self._ids.get
        if len(self._numbers) >= _NUMBERS_MAX:
            self._numbers.clear()
        if len(self._addresses) >= _NUMBERS_MAX:
            self._addresses.clear()
        addresses = self._addresses
        share = self._numbers.setdefault
        if len(self._durations) >= _DURATIONS_MAX:
            self._durations.clear()
        same_dur = self._durations.setdefault
        stacks = self._stacks
        shapes = self._shapes
        extras = self._extras
        extras2 = self._extras2
        comm_out = t.comm_events
        gpu_kinds = _GPU_KINDS
        configs = self._config_keys
        max_time, min_time = MAX_TIME_US, -MAX_TIME_US
        for ev in events:
            ph = ev.ph
            if ph == "X":
                kind = cat_kind.get(ev.cat)  # type: ignore[arg-type]
                if kind is None:
                    continue
            elif ph == "i" or ph == "I":
                if ev.name != "[memory]":
                    continue
                kind = K_MEM
            elif ph == "M":
                self._meta(ev)
                continue
            elif ph == "B" or ph == "E":
                a = ev.args
                if a is not None and a.input_dims:
                    # kept past this chunk: an undecoded value must not point into the chunk's buffer
                    a.input_dims = msgspec.Raw(bytes(a.input_dims))
                if a is not None and a.input_type:
                    it = bytes(a.input_type)
                    a.input_type = _ABSENT if it == b"null" else msgspec.Raw(it)  # null: absent, as before
                if a is not None and a.seq_nr:
                    a.seq_nr = _PRESENT
                if a is not None and (a.kernel_flop or a.concrete_inputs):  # as Input Dims
                    a.kernel_flop, a.concrete_inputs = msgspec.Raw(bytes(a.kernel_flop)), msgspec.Raw(bytes(a.concrete_inputs))
                if a is not None and (a.grid or a.block):  # as Input Dims
                    a.grid, a.block = msgspec.Raw(bytes(a.grid)), msgspec.Raw(bytes(a.block))
                self._slices.append(ev)  # paired in finish()
                continue
            else:
                continue
            ts = ev.ts
            if ts is None:  # missing: cannot be placed on a timeline
                continue
            if not min_time <= ts <= max_time:  # NaN, inf, 1.7e308: no clock reads that
                self._bad_time += 1
                continue
            dur = ev.dur
            if dur is None or not dur > 0:
                if dur is None and ph == "X":
                    self._no_dur += 1
                dur = 0.0
            elif dur > max_time:
                self._bad_time += 1
                continue
            name = ev.name
            if type(name) is not str:
                name = "" if name is None else str(name)
            info = name_info.get(name)
            if info is None:
                info = name_info[name] = (name, is_comm_event_name(name), py_name_codes.setdefault(name, len(py_name_codes)))
            name, is_comm, code = info  # one string object per distinct name
            # a float pid/tid (no profiler writes one) is kept as written; Event's types name the usual ones
            pid: int | str | None = ev.pid  # type: ignore[assignment]
            tid: int | str | None = ev.tid  # type: ignore[assignment]
            a = ev.args
            if kind == K_PY:  # as columns (see TableBuilder.add_columns): nothing shared, no Event
                if pid is None:
                    pid = -1
                if tid is None:
                    tid = -1
                py_code.append(code)
                py_thread.append((pid, tid))
                py_ts.append(ts)
                py_dur.append(dur)
                if a is None:
                    continue
                if is_comm:
                    comm_out.append(Event(kind, name, ts, dur, pid, tid, extra=comm_args(a)))
                x = a.external_id
                if x is None:
                    x = a.external_id_lc
                c = a.correlation
                if x is not None or c is not None:  # (Python frames have neither)
                    py_ids.append((len(py_ts) - 1, x if type(x) is int else _as_int(x), c if type(c) is int else _as_int(c)))
                continue
            if pid is None:
                pid = -1
            elif type(pid) is not float:  # a float is kept as written: 1.0 must not become 1
                pid = intern_id(pid, pid)
            if tid is None:
                tid = -1
            elif type(tid) is not float:
                tid = intern_id(tid, tid)
            if a is None:
                out[kind].append(Event(kind, name, ts, dur, pid, tid))
                continue
            if is_comm:
                comm_out.append(Event(kind, name, ts, dur, pid, tid, extra=comm_args(a)))
            x = a.external_id
            if x is None:
                x = a.external_id_lc
            # absent (None) inline: no call for the most common case (Python frames have neither)
            ext = x if type(x) is int else -1 if x is None else _as_int(x)
            c = a.correlation
            corr = c if type(c) is int else -1 if c is None else _as_int(c)
            if kind == K_OP:
                flags = 0
                it = a.input_type
                if it:  # undecoded JSON text: decoded once per distinct text
                    key = bytes(it)
                    f = type_flags.get(key)
                    if f is None:
                        f = _type_flags(key)
                        if len(type_flags) < _TYPE_CACHE_MAX:
                            type_flags[key] = f
                    flags = f
                if a.seq_nr:  # the op recorded an autograd node (see OP_AUTOGRAD)
                    flags |= OP_AUTOGRAD
                cs = a.call_stack
                extra: object = flags
                dims = a.input_dims
                if dims:
                    # the input shapes as their JSON text, one string per distinct text, and one payload
                    # tuple per distinct (flags, stack, shapes): the operator view groups by them and
                    # steps compare them (static shapes?), at no memory per operator
                    raw = bytes(dims)
                    shape = shapes.get(raw)
                    if shape is None:
                        shape = shapes[raw] = shape_text(raw)
                    key3 = (flags, stacks.setdefault(cs, cs) if cs else None, shape)
                    extra = extras.setdefault(key3, key3)
                elif cs:
                    key2 = (flags, stacks.setdefault(cs, cs))
                    extra = extras2.setdefault(key2, key2)  # shared, as the 3-tuples
                if a.kernel_flop or (a.concrete_inputs and name in CONCRETE_INPUT_OPS):
                    extra = self._op_more(extra, a)
                ops_add(Event(kind, name, ts, same_dur(dur, dur), pid, tid, share(ext, ext), corr, -1, -1, 0, extra))
            elif kind in gpu_kinds:
                d = a.device
                device = d if type(d) is int else _as_int(d)
                if device < 0:
                    device = pid if type(pid) is int else 0
                s = a.stream
                stream = s if type(s) is int else _as_int(s)
                if stream < 0:
                    stream = tid if type(tid) is int else _as_int(tid)
                nb = a.bytes
                nbytes = int(nb) if nb is not None and nb == nb and nb > 0 else 0
                if kind == K_MEMCPY:
                    extra = parse_copy_name(name)
                elif kind == K_KERNEL and (a.grid or a.registers is not None):
                    # the grid and block texts (undecoded) looked up as written: decoded once per distinct configuration
                    key4 = (bytes(a.grid), bytes(a.block), a.registers, a.occupancy)
                    extra = configs.get(key4, _UNSEEN)
                    if extra is _UNSEEN:
                        extra = self._kernel_config(*key4)
                        if len(configs) < _TYPE_CACHE_MAX:
                            configs[key4] = extra
                else:
                    extra = None
                out[kind].append(Event(kind, name, ts, same_dur(dur, dur), pid, tid, share(ext, ext), share(corr, corr), device, stream,
                                       nbytes, extra))
            elif kind == K_MEM:
                nb = a.mem_bytes
                nbytes = int(nb) if nb is not None and nb == nb else 0
                ta, tr = a.total_allocated, a.total_reserved
                # an int (what profilers write) inline: no call per event
                ad, di, dt = a.addr, a.device_id, a.device_type
                # sizes, totals and addresses repeat (a block's free has its allocation's): shared as the ids
                allocated = int(ta) if ta is not None and ta == ta else None
                reserved = int(tr) if tr is not None and tr == tr else -1
                extra = MemoryPayload(
                    None if allocated is None else share(allocated, allocated),
                    share(reserved, reserved),
                    share(ad, ad) if type(ad) is int else addresses.get(ad) or _cache_address(addresses, ad),
                )
                mem_add(
                    Event(kind, name, ts, 0.0, pid, tid, ext, corr, di if type(di) is int else _as_int(di),
                          dt if type(dt) is int else _as_int(dt), share(nbytes, nbytes), extra)
                )
            else:  # runtime calls, user annotations
                out[kind].append(Event(kind, name, ts, same_dur(dur, dur), pid, tid, share(ext, ext), share(corr, corr)))
        if py_ts:
            self._python.add_columns(py_code, py_thread, py_ts, py_dur, py_ids, intern_id)

    def _op_more(self, extra: object, a: R.RawArgs) -> object:
        """The 5-tuple payload (model.op_flops) of an op with recorded FLOPs or kept Concrete Inputs, shared."""
        flop: float | None = None
        if a.kernel_flop:
            try:
                flop = float(bytes(a.kernel_flop))  # a JSON number; anything else (a string, NaN) counts as absent
            except ValueError:
                flop = None
            if flop is not None and not 0.0 <= flop < 1e30:
                flop = None
        concrete = None
        if a.concrete_inputs:
            raw = bytes(a.concrete_inputs)
            concrete = self._shapes.get(raw)
            if concrete is None:
                concrete = self._shapes[raw] = raw.decode("utf-8", "replace")
        if flop is None and concrete is None:
            return extra
        base = extra if type(extra) is tuple else (extra, None)
        key = (base[0], base[1], base[2] if len(base) == 3 else None, flop, concrete)
        return self._extras5.setdefault(key, key)

    def _kernel_config(self, grid_text: bytes, block_text: bytes, regs: float | None, occ: float | None) -> KernelConfig | None:
        """One shared KernelConfig per distinct launch configuration (a value of the wrong type, or one that does
        not decode, counts as absent); None for a null grid without registers (as no grid)."""
        grid, block = _json_value(grid_text), _json_value(block_text)
        if grid is None and regs is None:
            return None
        registers = int(regs) if isinstance(regs, (int, float)) and 0 <= regs < 1e6 else -1  # NaN fails the test
        occupancy = float(occ) / 100.0 if isinstance(occ, (int, float)) and 0 <= occ <= 100 else -1.0
        key = (_dims(grid), _dims(block), registers, occupancy)
        got = self._configs.get(key)
        if got is None:
            got = self._configs[key] = KernelConfig(*key)
        return got

    def _meta(self, ev: R.RawEvent) -> None:
        a = ev.args
        if a is None:
            return
        if ev.name == "process_labels" and isinstance(a.labels, str):
            pid: int | str = ev.pid if ev.pid is not None else -1  # type: ignore[assignment]  # as in ingest
            self.trace.process_labels[pid] = a.labels
        elif ev.name == "thread_name" and isinstance(a.name, str):
            key = (ev.pid if ev.pid is not None else -1, ev.tid if ev.tid is not None else -1)
            self.trace.thread_names[key] = a.name  # type: ignore[index]  # a float pid/tid: as in ingest

    # -- finish
    def finish(self) -> Trace:
        t = self.trace
        if self._slices:
            self._pair_slices()
        if self._no_dur:
            n = self._no_dur
            t.load_notes.append(f"{n} complete event{'' if n == 1 else 's'} (ph X) without dur: kept with zero duration")
        if self._bad_time:
            n = self._bad_time
            t.load_notes.append(f"{n} event{'' if n == 1 else 's'} with a timestamp or duration that is not a "
                                f"number or beyond any clock (over {MAX_TIME_US:.0f} µs): left out")
        if self.names_repaired:
            t.load_notes.append(repair_note(self.names_repaired))
        t.num_events = self.events_seen
        t.python = self._python.table()
        self._numbers, self._durations = {}, {}  # every event is in: the tables only cost memory now
        if t.num_events and not t.kept_events:
            raise InputError(t.path, self._nothing_usable())
        t.devices = [device_info(p, i) for i, p in enumerate(self._device_props)]
        if any(d.vendor != "amd" and not d.name for d in t.devices) and _uses_hip(t):
            # ROCm traces may leave the device name empty; the runtime's names tell the vendor.
            t.devices = [
                DeviceInfo(id=d.id, name=d.name, compute_capability=None, total_memory=d.total_memory, num_sms=d.num_sms, vendor="amd")
                if not d.name
                else d
                for d in t.devices
            ]
        t.sort()
        return t


    def _pair_slices(self) -> None:
        """Turn the B/E events into complete events (see gpuprof.trace.pairing) and normalise those."""
        paired = pair_slices(self._slices)
        self._slices = []
        seen = self.events_seen
        self.ingest(paired.complete)
        self.events_seen = seen  # each pair was counted as its two events already
        self.trace.load_notes += paired.notes()
        self._pairs = len(paired.complete)

    def _nothing_usable(self) -> str:
        """Why a trace with events has none gpuprof can analyse (one line)."""
        pairs = self._pairs
        found = f"; {pairs} B/E pairs were found, none of a known category" if pairs else ""
        return (
            f"no events gpuprof can analyse among the {self.events_seen} in the file: no complete events "
            f"(ph X, or B/E pairs) of a PyTorch profiler category (cpu_op, kernel, cuda_runtime, ...) "
            f"and no [memory] events{found}"
        )


def _uses_hip(t: Trace) -> bool:
    return any(r.name.startswith("hip") for r in t.runtime[:2000])


def device_info(p: R.RawDeviceProps, index: int) -> DeviceInfo:
    dev_id = _as_int(p.id)
    if dev_id < 0:
        dev_id = index
    major = _as_int(p.computeMajor if p.computeMajor is not None else p.major)
    minor = _as_int(p.computeMinor if p.computeMinor is not None else p.minor)
    name = p.name or ""
    low = name.lower()
    if "nvidia" in low or "tesla" in low or "quadro" in low or "geforce" in low:
        vendor = "nvidia"
    elif "amd" in low or "instinct" in low or "radeon" in low:
        vendor = "amd"
    else:
        vendor = ""
    cc = (major, minor) if major >= 0 and minor >= 0 else None
    if vendor == "amd":
        cc = None  # ROCm reports gfx numbers here, not CUDA compute capabilities
    elif cc is not None and not vendor:
        vendor = "nvidia"
    sms = p.numSms if p.numSms is not None else p.multiProcessorCount
    total = int(p.totalGlobalMem) if p.totalGlobalMem else None
    return DeviceInfo(id=dev_id, name=name, compute_capability=cc, total_memory=total, num_sms=sms, vendor=vendor)


_LAYOUT = frozenset(b"\n\r\t")


def shape_text(raw: bytes) -> str:
    """An ``Input Dims`` value as one line of JSON, the same in every view (issue 37).

    Kineto writes ``[[32, 3, 224, 224], []]``; some exporters write the same list over several indented
    lines, which every renderer then showed as ``\\x0a`` escapes, and two texts of one shape made two rows.
    Such a text is re-written in Kineto's form (once per distinct text); one that is no JSON keeps its
    characters, its layout folded to single spaces.
    """
    if _LAYOUT.isdisjoint(raw) and b"  " not in raw:
        return raw.decode("utf-8", "replace")
    text = raw.decode("utf-8", "replace")
    try:
        return json.dumps(json.loads(text), ensure_ascii=False)
    except ValueError:
        return " ".join(text.split())

"""The events of a timeline's lanes, gathered from a trace's shared columns (docs/views.md, "Timeline").

* **host lanes** ``host:<pid>:<tid>``: operators, runtime calls and user
  ``record_function`` ranges of one thread (``ProfilerStep#N`` ranges are the
  step boundaries, not events; Python frames are left out: the operators show
  the same time, and a ``with_stack`` trace has ten times as many frames),
  each at its nesting depth on the thread;
* **GPU lanes** ``gpu:<device>:<stream>``: kernels, copies, memsets and the
  GPU side of syncs, at depth 0 (a stream runs one thing at a time);
* **the collective lane** ``collective:<rank>``: the trace's collective
  kernels (NCCL, RCCL, Gloo) again, on one lane per rank, so several ranks'
  collectives can be drawn one above the other.

Numpy over each event list's columns (built once per trace, shared with the
rules); Python loops run per distinct name, per thread or per stream.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Union

import numpy as np

from gpuprof.trace.arrays import sorted_unique
from gpuprof.trace.columns import Columns, columns
from gpuprof.trace.gpuwork import is_communication_kernel
from gpuprof.trace.model import Event, Trace
from gpuprof.trace.threads import stack_parents_of
from gpuprof.trace.timelinerows import EVENT_KINDS, MAX_DEPTH
from gpuprof.trace.vocab import step_number

__all__ = ["LaneEvents", "gather", "nest"]

Raw = tuple[Union[int, str], Union[int, str]]
KIND = {k: i for i, k in enumerate(EVENT_KINDS)}


@dataclass
class LaneEvents:
    """Every event of the recorded span, by lane: parallel arrays, and the lanes in the order they are drawn."""

    lane_ids: list[str] = field(default_factory=list)
    lane_kinds: list[str] = field(default_factory=list)
    lane_labels: list[str] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    lane: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    start: np.ndarray = field(default_factory=lambda: np.zeros(0))  # µs, the trace's clock
    dur: np.ndarray = field(default_factory=lambda: np.zeros(0))
    name: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    kind: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    depth: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    raw: dict[Raw, str] = field(default_factory=dict)  # a (pid, tid) as events carry it -> its lane id
    deep: int = 0  # host events nested deeper than MAX_DEPTH, left out


class _Acc:
    """Parts of the arrays, appended list by list, with one name table and one lane table for all."""

    def __init__(self) -> None:
        self.out = LaneEvents()
        self._names: dict[str, int] = {}
        self._lanes: dict[str, int] = {}
        self.parts: list[tuple[np.ndarray, ...]] = []

    def lane(self, lane_id: str, kind: str, label: str) -> int:
        got = self._lanes.get(lane_id)
        if got is None:
            got = self._lanes[lane_id] = len(self.out.lane_ids)
            self.out.lane_ids.append(lane_id)
            self.out.lane_kinds.append(kind)
            self.out.lane_labels.append(label)
        return got

    def name_codes(self, names: list[str]) -> np.ndarray:
        table = self._names
        return np.fromiter((table.setdefault(n, len(table)) for n in names), np.int64, len(names))

    def add(self, lane: np.ndarray, start: np.ndarray, dur: np.ndarray, name: np.ndarray, kind: np.ndarray) -> None:
        self.parts.append((lane, start, dur, name, kind))

    def done(self) -> LaneEvents:
        out = self.out
        out.names = list(self._names)
        if self.parts:
            out.lane, out.start, out.dur, out.name, out.kind = (np.concatenate(c) for c in zip(*self.parts))
            out.depth = np.zeros(len(out.start), np.int64)
        return out


def _host_label(trace: Trace, key: Raw, main: Raw | None) -> str:
    name = trace.thread_names.get(key)
    text = name or f"thread {key[1]} (pid {key[0]})"
    return ("main thread: " + text) if key == main else text


def gather(trace: Trace, lo: float, hi: float, main: Raw | None) -> LaneEvents:
    """The events overlapping ``[lo, hi]`` (the recorded steps), by lane: the main thread's lane first, then
    the other host threads, the GPU streams by device and stream, and the collective lane."""
    acc = _Acc()
    if main is not None:
        acc.lane(f"host:{main[0]}:{main[1]}", "host", _host_label(trace, main, main))
    for events, kind in ((trace.annotations, "annotation"), (trace.ops, "op"), (trace.runtime, "runtime")):
        _add_host(acc, trace, events, KIND[kind], lo, hi, main, _not_step if kind != "runtime" else None)
    gpu: list[tuple[Sequence[Event], str]] = [(trace.kernels, "kernel"), (trace.memcpys, "memcpy"),
                                              (trace.memsets, "memset"), (trace.gpu_syncs, "sync")]
    streams: set[tuple[int, int, str]] = set()
    gpu_parts = [_gpu_part(trace, ev, KIND[k], lo, hi) for ev, k in gpu]
    for part in gpu_parts:
        if part is not None:
            streams.update(part[0])
    for dev, stream, raw_id in sorted(streams, key=lambda s: (s[0], s[1], s[2])):
        acc.lane(raw_id, "gpu", f"GPU {dev} stream {stream}" if dev >= 0 else f"GPU {raw_id[4:]}")
    for part in gpu_parts:
        if part is not None:
            its, inverse, sel, cols, kinds, raw = part
            lane = np.array([acc.lane(i, "gpu", "") for _, _, i in its], np.int64)[inverse]
            acc.add(lane, cols.ts[sel], cols.dur[sel], acc.name_codes(cols.names)[cols.name_code[sel]], kinds)
            acc.out.raw.update(raw)
    _add_collectives(acc, trace, lo, hi)
    return acc.done()


def _not_step(name: str) -> bool:
    return step_number(name) is None


def _in_span(ts: np.ndarray, dur: np.ndarray, lo: float, hi: float) -> np.ndarray:
    inside: np.ndarray = (ts <= hi) & (ts + dur >= lo)
    return inside


def _add_host(acc: _Acc, trace: Trace, events: Sequence[Event], kind: int, lo: float, hi: float, main: Raw | None,
              wanted: Callable[[str], bool] | None) -> None:
    if not len(events):
        return
    c = columns(trace, events)
    sel = _in_span(c.ts, c.dur, lo, hi)
    if wanted is not None:  # per distinct name
        ok = np.fromiter(map(wanted, c.names), bool, len(c.names))
        sel &= ok[c.name_code]
    idx = np.flatnonzero(sel)
    if not len(idx):
        return
    lanes = np.full(len(c.threads), -1, np.int64)
    for code in sorted_unique(c.thread_code[idx]).tolist():  # a lane for each thread with events in the steps only
        t = c.threads[code]
        lanes[code] = acc.lane(f"host:{t[0]}:{t[1]}", "host", _host_label(trace, t, main))
        acc.out.raw[t] = f"host:{t[0]}:{t[1]}"
    acc.add(lanes[c.thread_code[idx]], c.ts[idx], c.dur[idx], acc.name_codes(c.names)[c.name_code[idx]],
            np.full(len(idx), kind, np.int64))


def _gpu_part(trace: Trace, events: Sequence[Event], kind: int, lo: float, hi: float
              ) -> tuple[list[tuple[int, int, str]], np.ndarray, np.ndarray, Columns, np.ndarray, dict[Raw, str]] | None:
    """One GPU list's events in the span: its streams ``(device, stream, lane id)``, each selected event's
    stream (an index into them), the selection, the columns, the kinds, and the lane of each (pid, tid) the
    events carry."""
    if not len(events):
        return None
    c = columns(trace, events)
    sel = np.flatnonzero(_in_span(c.ts, c.dur, lo, hi))
    if not len(sel):
        return None
    dev, stream, thread = c.device[sel], c.stream[sel], c.thread_code[sel]
    # a stream is its (device, stream) where the trace gives them; else the event's (pid, tid) as written
    known = (dev >= 0) & (stream >= 0)
    nt = len(c.threads)
    first = np.full(nt, -1, np.int64)
    first[thread] = np.arange(len(sel))  # an event of each thread code present (which one does not matter)
    if (dev == dev[first[thread]]).all() and (stream == stream[first[thread]]).all():
        # as Kineto writes them: one (device, stream) per (pid, tid), so the thread codes are the streams (no sort)
        present = np.flatnonzero(first >= 0)
        key = np.stack([np.where(known, dev, -1)[first[present]], np.where(known, stream, -1)[first[present]],
                        np.where(known[first[present]], -1, present)])
        pairs, inverse = key, np.searchsorted(present, thread)
    else:
        key = np.stack([np.where(known, dev, -1), np.where(known, stream, -1), np.where(known, -1, thread)])
        pairs, inverse = np.unique(key, axis=1, return_inverse=True)
    streams = []
    for d, s, t in pairs.T.tolist():
        streams.append((d, s, f"gpu:{d}:{s}") if t < 0 else (-1, t, f"gpu:{c.threads[t][0]}:{c.threads[t][1]}"))
    inverse = inverse.reshape(-1)
    kinds = np.full(len(sel), kind, np.int64)
    if events is trace.kernels:
        comm = np.fromiter(map(is_communication_kernel, c.names), bool, len(c.names))
        kinds[comm[c.name_code[sel]]] = KIND["collective"]
    raw = {c.threads[t]: streams[int(inverse[i])][2] for t, i in enumerate(first.tolist()) if i >= 0}
    return streams, inverse, sel, c, kinds, raw


def _add_collectives(acc: _Acc, trace: Trace, lo: float, hi: float) -> None:
    if not len(trace.kernels):
        return
    c = columns(trace, trace.kernels)
    comm = np.fromiter(map(is_communication_kernel, c.names), bool, len(c.names))
    idx = np.flatnonzero(comm[c.name_code] & _in_span(c.ts, c.dur, lo, hi))
    if not len(idx):
        return
    rank = trace.rank if trace.rank is not None else 0
    lane = acc.lane(f"collective:{rank}", "collective", f"collectives, rank {rank}")
    acc.add(np.full(len(idx), lane, np.int64), c.ts[idx], c.dur[idx], acc.name_codes(c.names)[c.name_code[idx]],
            np.full(len(idx), KIND["collective"], np.int64))


def nest(out: LaneEvents) -> None:
    """Put the events in (lane, start) order, the enclosing event first, and give each host event its nesting
    depth on its thread (0 at top level); those deeper than MAX_DEPTH are dropped (counted in ``deep``)."""
    if not len(out.start):
        return
    order = np.lexsort((-out.dur, out.start))  # by start, the enclosing event first
    lane = out.lane[order]
    order = order[np.argsort(lane.astype(np.int16) if len(out.lane_ids) < 32768 else lane, kind="stable")]
    for f in ("lane", "start", "dur", "name", "kind", "depth"):
        setattr(out, f, getattr(out, f)[order])
    host = np.array([k == "host" for k in out.lane_kinds], bool)
    bounds = np.flatnonzero(np.r_[True, out.lane[1:] != out.lane[:-1], True])
    depth = out.depth
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        if not host[out.lane[a]]:
            continue
        s = out.start[a:b]
        parent = stack_parents_of(s, s + out.dur[a:b])
        d = np.zeros(b - a, np.int64)
        anc = parent.copy()
        for _ in range(MAX_DEPTH):  # one numpy pass per level, at most MAX_DEPTH
            up = anc >= 0
            if not up.any():
                break
            d += up
            anc = np.where(up, parent[np.maximum(anc, 0)], -1)
        d[anc >= 0] = MAX_DEPTH  # still deeper
        depth[a:b] = d
    keep = depth < MAX_DEPTH
    out.deep = int((~keep).sum())
    if out.deep:
        for f in ("lane", "start", "dur", "name", "kind", "depth"):
            setattr(out, f, getattr(out, f)[keep])

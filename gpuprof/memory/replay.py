"""Replay one device's allocator history: totals over time, and who holds memory when.

Definitions (used by every figure ``gpuprof memory`` prints):

* **allocated**: bytes in blocks handed to tensors and not yet freed by them
  (rises at ``alloc``, falls at ``free_requested``), i.e.
  ``torch.cuda.memory_allocated()``;
* **reserved**: bytes the caching allocator holds from the device (rises at
  ``segment_alloc``/``segment_map``, falls at ``segment_free``/``segment_unmap``),
  i.e. ``torch.cuda.memory_reserved()``;
* **pending free**: bytes freed by their tensor but not yet reusable because
  work on another stream may still read them (``record_stream``): between
  ``free_requested`` and ``free_completed``.

A snapshot's history is a ring buffer: it may start after the program did.
The totals before the first recorded event are therefore derived backwards
from the state at snapshot time (``initial = final - sum of recorded
changes``), and blocks freed in the history without a recorded allocation
were allocated before it (the pseudo-site "allocated before the recorded
history").
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from typing import Callable, MutableSequence, Sequence

from gpuprof.memory.frames import SiteTable
from gpuprof.memory.model import (
    ALLOC,
    FREE_COMPLETED,
    FREE_REQUESTED,
    SEGMENT_ALLOC,
    SEGMENT_FREE,
    BlockState,
    DeviceMemory,
)

__all__ = ["Totals", "Holders", "ReplayResult", "replay_totals", "replay_holders", "site_series", "bucket_peaks", "align_history_sizes"]


@dataclass
class Totals:
    """Pass 1: running totals. ``*_at`` are event indices (-1: before the first event)."""

    initial_allocated: int
    initial_reserved: int | None
    final_allocated: int
    final_reserved: int | None
    peak_allocated: int
    peak_allocated_at: int
    peak_reserved: int | None
    peak_reserved_at: int
    unallocated_at_peak_reserved: int | None  # reserved - allocated at the peak-reserved moment
    num_allocations: int
    timeline: list[tuple[float, int, int | None]]  # (time, max allocated, max reserved) per bucket
    allocated_at: dict[int, int] = field(default_factory=dict)  # allocated after selected events (OOMs)
    reserved_at: dict[int, int | None] = field(default_factory=dict)
    inconsistent: bool = False  # the history and the final state disagree
    reserved_at_peak_allocated: int | None = None  # reserved when allocated peaked


def align_history_sizes(dm: DeviceMemory) -> int:
    """Give each recorded allocation still live at snapshot time its block's size; returns the bytes added.

    PyTorch's history records the size *asked for* (``alloc``: the request; ``free_requested``: the block's
    ``requested_size``, the same figure), while the allocator counts, and a snapshot's blocks hold, the block's
    size: the request rounded up to 512 bytes, plus a remainder too small to split off (up to 1 MiB in the large
    pool). The totals are derived backwards from the blocks (initial = final - recorded changes), so without this
    the rounding of every block live at the end was counted as memory allocated before the history began: bytes
    no block holds (3.75 MiB on ``ftcourse_memory_snapshot.pickle``, 10.47 MiB on ``cs336kk_ctx128_fwd_fp32``).
    A block freed inside the history keeps its recorded size at both ends (they cancel)."""
    if dm.segments is None or not len(dm) or dm.allocated is not None:
        return 0
    final: dict[int, int] = {}
    for seg in dm.segments:
        for b in seg.blocks:
            if b.state == BlockState.ALLOCATED:
                final[b.address] = b.size
    if not final:
        return 0
    live: dict[int, int] = {}  # address -> index of its allocation not yet freed
    act, addr = dm.action, dm.addr
    for i in range(len(act)):
        a = act[i]
        if a == ALLOC:
            live[addr[i]] = i
        elif a == FREE_REQUESTED:
            live.pop(addr[i], None)
    added = 0
    size = dm.size
    for ad, i in live.items():
        s = final.get(ad)
        if s is not None and s != size[i]:
            added += s - size[i]
            size[i] = s
    return added


def _final_state(dm: DeviceMemory) -> tuple[int | None, int | None]:
    if dm.segments is None:
        return None, None
    alloc = 0
    reserved = 0
    for seg in dm.segments:
        reserved += seg.total_size
        for b in seg.blocks:
            if b.state == BlockState.ALLOCATED:
                alloc += b.size
    return alloc, reserved


def _running_sums(act: Sequence[int], size: Sequence[int], n: int, compact: bool
                  ) -> tuple[MutableSequence[int], MutableSequence[int], int, int, int]:
    """Allocated and reserved after each event, relative to the start, and their ends and allocated's minimum.
    ``compact``: in 64-bit arrays (8 bytes an event, not 40 as a list of ints; OverflowError beyond)."""
    rel_a: MutableSequence[int] = array("q", bytes(8 * n)) if compact else [0] * n
    rel_r: MutableSequence[int] = array("q", bytes(8 * n)) if compact else [0] * n
    ca = cr = 0
    mina = 0
    for i in range(n):
        a = act[i]
        if a == ALLOC:
            ca += size[i]
        elif a == FREE_REQUESTED:
            ca -= size[i]
            if ca < mina:
                mina = ca
        elif a == SEGMENT_ALLOC:
            cr += size[i]
        elif a == SEGMENT_FREE:
            cr -= size[i]
        rel_a[i] = ca
        rel_r[i] = cr
    return rel_a, rel_r, ca, cr, mina


def replay_totals(dm: DeviceMemory, buckets: int = 400, mark: tuple[int, ...] = ()) -> Totals:
    """Running allocated/reserved totals, peaks, and a ``buckets``-point max-preserving timeline.

    ``mark``: event indices whose totals (after the event) are kept in ``allocated_at``/``reserved_at``.
    """
    n = len(dm)
    final_a, final_r = _final_state(dm)
    act, size = dm.action, dm.size
    inconsistent = False

    if dm.allocated is not None:  # the file recorded totals (profiler traces)
        alloc_series = dm.allocated
        res_series = dm.reserved
        first = size[0] if n else 0
        init_a = alloc_series[0] - (first if act[0] == ALLOC else -first) if n else 0
        init_r: int | None = res_series[0] if (n and res_series) else None
        rel_a = rel_r = None
    else:
        # Relative running sums; the absolute level is fixed from the final state below.
        try:
            rel_a, rel_r, ca, cr, mina = _running_sums(act, size, n, True)
        except OverflowError:  # sums beyond 64 bits (a hostile file): exact Python ints
            rel_a, rel_r, ca, cr, mina = _running_sums(act, size, n, False)
        if final_a is not None:
            init_a = final_a - ca
            if init_a + mina < 0:
                inconsistent = True
                init_a = -mina
        else:
            init_a = -mina
        if final_r is not None:
            init_r = final_r - cr
            if init_r < 0:
                inconsistent = True
                init_r = 0
        elif dm.has_segment_events:
            init_r = 0
        else:
            init_r = None
        alloc_series = None
        res_series = None

    def a_at(i: int) -> int:
        return alloc_series[i] if alloc_series is not None else init_a + rel_a[i]  # type: ignore[index]

    def r_at(i: int) -> int | None:
        if res_series is not None:
            return res_series[i]
        if init_r is None:
            return None
        return init_r + rel_r[i]  # type: ignore[index]

    peak_a, peak_a_at = init_a, -1
    peak_r, peak_r_at = init_r, -1
    n_alloc = 0
    tl: list[tuple[float, int, int | None]] = []
    t = dm.time
    t0 = t[0] if n else 0.0
    span = (t[-1] - t0) if n else 0.0
    scale = (buckets - 1) / span if span > 0 else 0.0
    cur_b = -1
    bmax_a = 0
    bmax_r: int | None = None
    bt = t0
    fast = rel_a is not None and rel_r is not None and init_r is not None
    if rel_a is not None and rel_r is not None and init_r is not None:
        # the common case (a snapshot's history with its segments): the loop below, a_at/r_at inlined
        n_alloc = act.count(ALLOC)
        ir: int = init_r
        pr, pr_at = ir, -1
        br = 0
        i = 0
        for ra, rr, ti in zip(rel_a, rel_r, t):
            xa = init_a + ra
            xr = ir + rr
            if xa > peak_a:
                peak_a, peak_a_at = xa, i
            if xr > pr:
                pr, pr_at = xr, i
            b = int((ti - t0) * scale)
            if b != cur_b:
                if cur_b >= 0:
                    tl.append((bt, bmax_a, br))
                cur_b, bt, bmax_a, br = b, ti, xa, xr
            else:
                if xa > bmax_a:
                    bmax_a = xa
                if xr > br:
                    br = xr
            i += 1
        peak_r, peak_r_at, bmax_r = pr, pr_at, (br if cur_b >= 0 else None)
    for i in range(0 if fast else n):
        if act[i] == ALLOC:
            n_alloc += 1
        va = a_at(i)
        vr = r_at(i)
        if va > peak_a:
            peak_a, peak_a_at = va, i
        if vr is not None and (peak_r is None or vr > peak_r):
            peak_r, peak_r_at = vr, i
        b = int((t[i] - t0) * scale)
        if b != cur_b:
            if cur_b >= 0:
                tl.append((bt, bmax_a, bmax_r))
            cur_b, bt, bmax_a, bmax_r = b, t[i], va, vr
        else:
            if va > bmax_a:
                bmax_a = va
            if vr is not None and (bmax_r is None or vr > bmax_r):
                bmax_r = vr
    if cur_b >= 0:
        tl.append((bt, bmax_a, bmax_r))
    last_a = a_at(n - 1) if n else init_a
    last_r = r_at(n - 1) if n else init_r
    if final_a is None:
        final_a = last_a
    if final_r is None:
        final_r = last_r
    if n == 0:
        peak_a, peak_r = final_a, final_r
    unalloc = None
    if peak_r is not None:
        unalloc = peak_r - (a_at(peak_r_at) if peak_r_at >= 0 else init_a)
    return Totals(initial_allocated=init_a, initial_reserved=init_r, final_allocated=final_a, final_reserved=final_r,
                  peak_allocated=peak_a, peak_allocated_at=peak_a_at, peak_reserved=peak_r, peak_reserved_at=peak_r_at,
                  unallocated_at_peak_reserved=unalloc, num_allocations=n_alloc, timeline=tl,
                  allocated_at={i: a_at(i) for i in mark if 0 <= i < n},
                  reserved_at={i: r_at(i) for i in mark if 0 <= i < n}, inconsistent=inconsistent,
                  reserved_at_peak_allocated=(r_at(peak_a_at) if peak_a_at >= 0 else init_r) if n else final_r)


@dataclass
class Holders:
    """Live blocks at one moment, by site: ``site id -> [bytes, blocks]`` plus the blocks' sizes and times."""

    by_site: dict[int, list[int]] = field(default_factory=dict)
    sizes: list[int] = field(default_factory=list)
    alloc_times: dict[int, list[float]] = field(default_factory=dict)  # site -> allocation times of its live blocks
    # (kind id, site id) -> [bytes, blocks, first allocation time]: what the live blocks are (KindTable ids)
    by_kind: dict[tuple[int, int], list[float]] = field(default_factory=dict)

    def add(self, site: int, size: int, t: float | None = None, kind: int = 0) -> None:
        e = self.by_site.get(site)
        if e is None:
            self.by_site[site] = [size, 1]
        else:
            e[0] += size
            e[1] += 1
        self.sizes.append(size)
        if t is not None:
            self.alloc_times.setdefault(site, []).append(t)
        k = self.by_kind.get((kind, site))
        tt = t if t is not None else -1.0
        if k is None:
            self.by_kind[(kind, site)] = [size, 1, tt]
        else:
            k[0] += size
            k[1] += 1
            if 0 <= tt < k[2] or k[2] < 0:
                k[2] = tt

    @property
    def total(self) -> int:
        return sum(v[0] for v in self.by_site.values())


@dataclass
class ReplayResult:
    """Pass 2: live blocks at the chosen moments, and record_stream waiting."""

    holders: dict[int, Holders]  # event index (-1 = snapshot time) -> holders
    pending_max_bytes: int  # most bytes waiting on other streams when an allocation was requested
    pending_frees: int  # frees whose completion was deferred
    pending_bytes_total: int
    pending_max_wait: float  # longest deferral (µs, or events without timestamps)
    pending_at: dict[int, int]  # pending bytes at the chosen moments


def replay_holders(dm: DeviceMemory, moments: tuple[int, ...]) -> ReplayResult:
    """Replay allocations and frees; keep who is live just after each event index in ``moments``."""
    n = len(dm)
    act, addr, size, site, t = dm.action, dm.addr, dm.size, dm.site, dm.time
    kind = dm.kind if len(dm.kind) == n else [0] * n  # traces record no stacks to classify
    live: dict[int, tuple[int, int, float, int]] = {}  # addr -> (size, site, time, kind)
    orphans: list[tuple[int, int]] = []  # (index, size) of frees without a recorded allocation
    pending: dict[int, tuple[int, float]] = {}
    pend_bytes = 0
    pend_max = 0
    deferred = 0
    deferred_bytes = 0
    max_wait = 0.0
    want = set(i for i in moments if 0 <= i < n)
    at_moment: dict[int, dict[int, tuple[int, int, float, int]]] = {}
    pend_at: dict[int, int] = {}
    last_req = -2
    for i in range(n):
        a = act[i]
        if a == ALLOC:
            live[addr[i]] = (size[i], site[i], t[i], kind[i])
            if pend_bytes > pend_max:
                pend_max = pend_bytes
        elif a == FREE_REQUESTED:
            if live.pop(addr[i], None) is None:
                orphans.append((i, size[i]))
            pending[addr[i]] = (size[i], t[i])
            pend_bytes += size[i]
            last_req = i
        elif a == FREE_COMPLETED:
            p = pending.pop(addr[i], None)
            if p is not None:
                pend_bytes -= p[0]
                # A plain free completes in the very next entry (the allocator holds its lock);
                # anything later waited for other streams' work.
                if i != last_req + 1:
                    deferred += 1
                    deferred_bytes += p[0]
                    if t[i] - p[1] > max_wait:
                        max_wait = t[i] - p[1]
        if i in want:
            at_moment[i] = dict(live)
            pend_at[i] = pend_bytes
    # Blocks live at the end of the snapshot that the history never allocated: older than the history.
    pre_live: list[tuple[int, int, int]] = []  # (size, site, kind)
    final_live = dict(live)
    if dm.segments is not None:
        for seg in dm.segments:
            for b in seg.blocks:
                if b.state == BlockState.ALLOCATED and b.address not in live:
                    pre_live.append((b.size, b.site, b.kind))
                    final_live[b.address] = (b.size, b.site, 0.0, b.kind)
    holders: dict[int, Holders] = {}
    for m in moments:
        h = Holders()
        if m < 0 or m >= n:
            src = final_live if m < 0 else live  # past the end: the live blocks, then those older than the history
            for sz, st, tm, kd in src.values():
                h.add(st, sz, tm if tm else None, kd)
            if m >= n:
                for sz, st, kd in pre_live:
                    h.add(st if st != SiteTable.UNKNOWN else SiteTable.PRE_TRACE, sz, None, kd)
        else:
            for sz, st, tm, kd in at_moment.get(m, {}).values():
                h.add(st, sz, tm, kd)
            for oi, sz in orphans:  # allocated before the history, freed after this moment
                if oi > m:
                    h.add(SiteTable.PRE_TRACE, sz)
            for sz, st, kd in pre_live:
                h.add(st if st != SiteTable.UNKNOWN else SiteTable.PRE_TRACE, sz, None, kd)
        holders[m] = h
    return ReplayResult(holders=holders, pending_max_bytes=pend_max, pending_frees=deferred,
                        pending_bytes_total=deferred_bytes, pending_max_wait=max_wait, pending_at=pend_at)


def site_series(dm: DeviceMemory, site_slot: dict[int, int], slots: int, buckets: int
                ) -> tuple[list[float], list[list[int]]]:
    """Live bytes per slot (a slot groups sites; the last slot is "other") at the end of each time bucket.

    Returns (bucket times, one list of ``slots + 1`` values per bucket). Blocks
    allocated before the history are not in any slot: the caller shows them
    as the difference to the allocated total.
    """
    site = dm.site
    return bucket_peaks(dm, lambda i: site_slot.get(site[i], slots), slots + 1, buckets)


def bucket_peaks(dm: DeviceMemory, column_of: Callable[[int], int], width: int, buckets: int
                 ) -> tuple[list[float], list[list[int]]]:
    """Live bytes per column over time: (bucket times, one list of ``width`` values per bucket), each row the
    bucket's highest moment after an event (so peaks survive aggregation). Allocation event ``i`` counts in
    column ``column_of(i)`` until its block is freed; without addresses frees cannot be matched, so nothing is
    counted (the caller shows the total as unattributed)."""
    n = len(dm)
    times: list[float] = []
    rows: list[list[int]] = []
    if n == 0:
        return times, rows
    act, addr, size, t = (dm.action if dm.has_addresses else [-1] * n), dm.addr, dm.size, dm.time
    cur = [0] * width
    live: dict[int, tuple[int, int]] = {}
    t0 = t[0]
    span = t[-1] - t0
    scale = (buckets - 1) / span if span > 0 else 0.0
    cur_b, bt, peak_row, peak_sum = 0, t0, list(cur), -1
    for i in range(n):
        b = int((t[i] - t0) * scale)
        if b != cur_b:
            times.append(bt)
            rows.append(peak_row)
            cur_b, bt, peak_sum = b, t[i], -1
        a = act[i]
        if a == ALLOC:
            c = column_of(i)
            cur[c] += size[i]
            live[addr[i]] = (size[i], c)
        elif a == FREE_REQUESTED:
            p = live.pop(addr[i], None)
            if p is not None:
                cur[p[1]] -= p[0]
        tot = sum(cur)
        if tot > peak_sum:
            peak_sum, peak_row = tot, list(cur)
    times.append(bt)
    rows.append(peak_row)
    return times, rows

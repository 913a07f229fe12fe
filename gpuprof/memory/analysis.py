"""``gpuprof memory FILE``: where the memory went, as a report section plus findings.

Per device the section holds: peak allocated and reserved (and when), the
totals over time, the number of allocations, the top holders at the peak by
allocation site and by size class, fragmentation, the OOM (when there was
one) and blocks waiting on other streams. The figures are defined in
:mod:`gpuprof.memory.replay`; the finding codes (GP510-GP519) in
``docs/memory.md``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Mapping

from gpuprof.codespec import option_default, replace_fields
from gpuprof.findings import Evidence, Finding, Severity, SourceLocation
from gpuprof.memory.attribution import KindTable
from gpuprof.memory.breakdown import StageRanges, backward_ended, breakdown, stage_timeline, state_by_kind
from gpuprof.memory.codes import MEMORY_CODES
from gpuprof.memory.devices import precision_advice, run_mode
from gpuprof.memory.fixes import rank_fixes
from gpuprof.memory.frames import DEFAULT_INTERNAL_PATTERNS, Site, SiteTable
from gpuprof.memory.model import (
    FREE_COMPLETED,
    FREE_REQUESTED,
    SEGMENT_FREE,
    BlockState,
    DeviceMemory,
    MemoryData,
    OomEvent,
)
from gpuprof.memory.replay import Holders, ReplayResult, Totals, replay_holders, replay_totals
from gpuprof.memory.units import SIZE_CLASSES, fmt_bytes, size_class
from gpuprof.report import Report

__all__ = ["MemoryOptions", "MemorySection", "DeviceAnalysis", "analyze_device", "analyze_memory", "memory_report",
           "CODES", "memory_values"]

UNATTRIBUTED = "<unattributed: the trace records no allocation addresses>"

# code -> (name, what it means), kept for callers of the former dict; the declarations are
# gpuprof.memory.codes.MEMORY_CODES (with options and examples), the long form docs/memory.md.
CODES: dict[str, tuple[str, str]] = {s.code: (s.name, s.title) for s in MEMORY_CODES}


def _d(name: str) -> Any:
    return option_default(MEMORY_CODES, name)


@dataclass(frozen=True)
class MemoryOptions:
    """Settings of the memory analysis: the GP5xx thresholds, then presentation.

    Build it from ``--option`` values with :meth:`with_options`.
    """

    # the thresholds: options of the GP5xx codes (defaults declared there, once)
    capacity_threshold: float = _d("capacity_threshold")  # GP510
    fragmentation_ratio: float = _d("fragmentation_ratio")  # GP511
    fragmentation_min_bytes: int = _d("fragmentation_min_bytes")  # GP511
    pending_share: float = _d("pending_share")  # GP513
    pending_min_bytes: int = _d("pending_min_bytes")  # GP513
    holder_share: float = _d("holder_share")  # GP514
    history_share: float = _d("history_share")  # GP515
    growth_spread: float = _d("growth_spread")  # GP512 advice
    growth_min_blocks: int = _d("growth_min_blocks")  # GP512 advice
    # presentation, not thresholds
    top: int = 10  # rows in the holder tables
    timeline_points: int = 400  # points of the totals timeline in the report
    internal_patterns: tuple[str, ...] = DEFAULT_INTERNAL_PATTERNS

    def with_options(self, options: Mapping[str, Mapping[str, Any]]) -> "MemoryOptions":
        """A copy with the parsed ``--option`` values of the memory codes set (others ignored)."""
        return replace_fields(self, memory_values(options))


def memory_values(options: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Option name -> value for the memory codes among ``options`` (code -> {name: value})."""
    mine = {s.code for s in MEMORY_CODES}
    out: dict[str, Any] = {}
    for code, values in options.items():
        if code in mine:
            out.update(values)
    return out


@dataclass
class DeviceAnalysis:
    """The analysis of one device (everything the section, the findings and the HTML need)."""

    dm: DeviceMemory
    totals: Totals
    replay: ReplayResult
    peak_moment: int  # event index of the peak (-1: snapshot time)
    fragmentation: dict[str, Any]
    ooms: list[dict[str, Any]]
    top_sites: list[dict[str, Any]]
    size_classes: list[dict[str, Any]]
    state: dict[str, Any] = field(default_factory=dict)  # breakdown at snapshot time (gpuprof.memory.breakdown)
    at_peak: dict[str, Any] = field(default_factory=dict)  # breakdown at the allocated peak
    fixes: list[dict[str, Any]] = field(default_factory=list)  # for an OOM or near-capacity peak (gpuprof.memory.fixes)

    def to_dict(self, sites: SiteTable, opts: MemoryOptions) -> dict[str, Any]:
        t = self.totals
        dm = self.dm
        r = self.replay

        def when(i: int) -> float | None:
            if not len(dm):
                return None
            return dm.time[i] if i >= 0 else dm.time[0]

        return {
            "device": dm.device,
            "total_memory": dm.total_memory,
            "history_events": len(dm),
            "time_unit": "us" if dm.has_time else "event",
            "time_start": dm.time[0] if len(dm) else None,  # times below are absolute, in time_unit
            "num_allocations": t.num_allocations,
            "live_blocks": sum(v[1] for v in r.holders[-1].by_site.values()) if -1 in r.holders else None,
            "allocated": {"initial": t.initial_allocated, "final": t.final_allocated, "peak": t.peak_allocated,
                          "peak_at": when(t.peak_allocated_at)},
            "reserved": {"initial": t.initial_reserved, "final": t.final_reserved, "peak": t.peak_reserved,
                         "peak_at": when(t.peak_reserved_at)},
            "timeline": [list(p) for p in t.timeline],
            "top_sites": self.top_sites,
            "size_classes": self.size_classes,
            "fragmentation": self.fragmentation,
            "pending_free": {"deferred_frees": r.pending_frees, "deferred_bytes": r.pending_bytes_total,
                             "max_bytes_waiting": r.pending_max_bytes, "max_wait": r.pending_max_wait},
            "ooms": self.ooms,
            # memory by category / stage / module / file at snapshot time, then at the allocated peak
            **self.state,
            "at_peak": dict(self.at_peak, time=when(self.peak_moment) if len(dm) else None),
            "fixes": self.fixes,
        }


@dataclass
class MemorySection:
    """The ``memory`` report section: one entry per device."""

    source: str
    source_type: str
    devices: list[dict[str, Any]]
    notes: list[str] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)
    pinned_host: dict[str, int] | None = None  # pinned host memory at the dump, when the file records it
    kind: str = "memory"

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "source_type": self.source_type, "devices": self.devices,
                "notes": list(self.notes), "allocator_settings": self.settings, "pinned_host": self.pinned_host}


# --------------------------------------------------------------------------- per device


# GP514 by the holder's origin (gpuprof.memory.frames.Site.origin): only a user line is "the line to change"
_HOLDER_WHAT = {"library": " (no frame of your code on its stack: this is the innermost library frame)",
                "native": " (a stack of C++ frames only: not a line of your code)"}
_HOLDER_ADVICE = {
    "user": "This line is where reducing memory pays most (smaller tensors, freeing them earlier, checkpointing "
            "the activations it creates).",
    "library": "The memory was allocated inside a library with none of your frames on the stack; look at which of "
               "your calls into it runs at the peak (record with stacks='python' to see them) rather than this line.",
    "native": "Memory allocated outside any Python frame: by the autograd engine's backward thread (gradients and "
              "backward temporaries, sized by what the forward pass saved: activation checkpointing or a smaller "
              "batch shrink it), by cuBLAS/cuDNN workspaces, or by the allocator itself. Record with "
              "torch.cuda.memory._record_memory_history(stacks='all') to see the Python caller where there is one.",
}


def _site_rows(h: Holders, sites: SiteTable, total: int, top: int) -> list[dict[str, Any]]:
    rows = sorted(h.by_site.items(), key=lambda kv: -kv[1][0])[:top]
    out = []
    for sid, (nbytes, count) in rows:
        d = sites.sites[sid].to_dict()
        d.update(bytes=nbytes, blocks=count, share=(nbytes / total) if total else None)
        out.append(d)
    return out


def _class_rows(h: Holders) -> list[dict[str, Any]]:
    acc = [[0, 0] for _ in SIZE_CLASSES]
    for s in h.sizes:
        c = acc[size_class(s)]
        c[0] += s
        c[1] += 1
    return [{"class": name, "bytes": b, "blocks": n} for (name, _), (b, n) in zip(SIZE_CLASSES, acc) if n]


def _fragmentation(dm: DeviceMemory, t: Totals) -> dict[str, Any]:
    """Free-but-reserved memory at snapshot time, how it is split, and the largest free block."""
    out: dict[str, Any] = {"unallocated_at_peak_reserved": t.unallocated_at_peak_reserved}
    if dm.segments is None:
        return out
    reserved = allocated = pending = 0
    split_n = split_b = 0
    free_n = 0
    largest = 0
    expandable = False
    for seg in dm.segments:
        reserved += seg.total_size
        expandable = expandable or seg.is_expandable
        split = len(seg.blocks) > 1
        for b in seg.blocks:
            if b.state == BlockState.ALLOCATED:
                allocated += b.size
            elif b.state == BlockState.PENDING_FREE:
                pending += b.size
            else:
                free_n += 1
                if b.size > largest:
                    largest = b.size
                if split:
                    split_n += 1
                    split_b += b.size
    out.update(segments=len(dm.segments), reserved=reserved, allocated=allocated, pending_free=pending,
               unallocated=reserved - allocated - pending, free_blocks=free_n, inactive_split_blocks=split_n,
               inactive_split_bytes=split_b, largest_free_block=largest, expandable_segments=expandable)
    return out


def analyze_device(dm: DeviceMemory, sites: SiteTable, opts: MemoryOptions, kinds: KindTable | None = None,
                   annotations: tuple[tuple[int, str, float, float], ...] | list[tuple[int, str, float, float]] = ()
                   ) -> DeviceAnalysis:
    kinds = kinds if kinds is not None else KindTable()
    oom_idx = tuple(o.index for o in dm.ooms[:3])
    totals = replay_totals(dm, buckets=opts.timeline_points, mark=oom_idx)
    peak_moment = totals.peak_allocated_at if len(dm) else -1
    moments = tuple(sorted({peak_moment, -1, *oom_idx}))
    rep = replay_holders(dm, moments)
    if not dm.has_addresses:
        # Without addresses the replay cannot tell which block a free releases: attribute nothing.
        rep.holders = {m: Holders() for m in moments}
    peak_h = rep.holders[peak_moment]
    # What the replay cannot attribute (traces: blocks from before the first event) is shown as such.
    gap = totals.peak_allocated - peak_h.total
    if gap > 0:
        sid = SiteTable.PRE_TRACE if dm.has_addresses else sites.add_label(UNATTRIBUTED)
        peak_h.by_site.setdefault(sid, [0, 0])[0] += gap
    frag = _fragmentation(dm, totals)
    ranges = StageRanges(annotations, dm.index)
    peak_h.by_kind.setdefault((0, SiteTable.PRE_TRACE), [0, 0, -1.0])[0] += max(gap, 0)
    if dm.segments is not None:
        state_kinds = state_by_kind(dm)
        state_reserved: int | None = frag.get("reserved")
    else:
        state_kinds = rep.holders[-1].by_kind
        state_reserved = totals.final_reserved
    non_pytorch = None
    if dm.total_memory and dm.free_memory is not None and state_reserved is not None:
        non_pytorch = max(0, dm.total_memory - dm.free_memory - state_reserved)
    state = breakdown(state_kinds, kinds, sites, state_reserved, non_pytorch, ranges, opts.top,
                      backward_ended(dm, kinds, -1))
    if frag.get("reserved") is not None:
        # fragmentation is named only for cache held in split segments (free blocks beside live ones)
        state["allocator_cache_in_split_segments"] = frag["inactive_split_bytes"]
    at_peak = breakdown(peak_h.by_kind, kinds, sites, totals.reserved_at_peak_allocated, None, ranges, opts.top,
                        backward_ended(dm, kinds, peak_moment))
    state["stage_timeline"] = stage_timeline(dm, kinds, ranges)
    ooms = []
    for o in dm.ooms[:3]:
        h = rep.holders.get(o.index, Holders())
        alloc_at = totals.allocated_at.get(o.index)
        res_at = totals.reserved_at.get(o.index)
        if o.index >= len(dm):  # recorded by gpuprof's observer after the history: the state at the dump
            alloc_at, res_at = totals.final_allocated, totals.final_reserved
        ooms.append({
            "time": o.time,
            "requested": o.size,
            "stream": o.stream,
            "device_free": o.device_free,
            "allocated": alloc_at,
            "reserved": res_at,
            "cached_free": (res_at - alloc_at - rep.pending_at.get(o.index, 0))
            if (res_at is not None and alloc_at is not None) else None,
            "pending_free": rep.pending_at.get(o.index, 0),
            "site": sites.sites[o.site].to_dict(),
            "top_live_sites": _site_rows(h, sites, alloc_at or h.total, opts.top),
            "growing_sites": _growing_sites(h, dm, sites, opts),
            "at_oom": _at_oom(dm, o, h, state, res_at, kinds, sites, ranges, opts),
        })
    return DeviceAnalysis(dm=dm, totals=totals, replay=rep, peak_moment=peak_moment, fragmentation=frag, ooms=ooms,
                          top_sites=_site_rows(peak_h, sites, totals.peak_allocated, opts.top),
                          size_classes=_class_rows(peak_h), state=state, at_peak=at_peak)


def _at_oom(dm: DeviceMemory, o: OomEvent, h: Holders, state: dict[str, Any], res_at: int | None, kinds: KindTable,
            sites: SiteTable, ranges: StageRanges, opts: MemoryOptions) -> dict[str, Any]:
    """The breakdown at an OOM. One recorded after the history (gpuprof's observer) is the snapshot's own state,
    read from its blocks (exact sizes), with the memory not PyTorch's from the device's free bytes then."""
    non_pytorch = (max(0, dm.total_memory - o.device_free - res_at)
                   if (dm.total_memory and o.device_free is not None and res_at is not None) else None)
    if o.index >= len(dm) and dm.segments is not None:
        at = {k: v for k, v in state.items() if k != "stage_timeline"}  # a moment, not the run
        at["categories"] = dict(state["categories"], non_pytorch=non_pytorch)
        return at
    return breakdown(h.by_kind, kinds, sites, res_at, non_pytorch, ranges, opts.top, backward_ended(dm, kinds, o.index))


def _growing_sites(h: Holders, dm: DeviceMemory, sites: SiteTable, opts: MemoryOptions) -> list[dict[str, Any]]:
    """Sites whose live blocks were allocated all through the history: references kept across iterations."""
    if len(dm) < 2:
        return []
    span = dm.time[-1] - dm.time[0]
    if span <= 0:
        return []
    out: list[dict[str, Any]] = []
    for sid, times in h.alloc_times.items():
        if sid <= SiteTable.PRE_TRACE or len(times) < opts.growth_min_blocks:
            continue
        spread = (max(times) - min(times)) / span
        if spread >= opts.growth_spread:
            out.append({"site": sites.sites[sid].label, "bytes": h.by_site[sid][0], "blocks": h.by_site[sid][1],
                        "spread": spread, "location": _loc(sites.sites[sid])})
    out.sort(key=lambda d: -d["bytes"])
    return out[:5]


def _loc(site: Site) -> dict[str, Any] | None:
    return {"file": site.file, "line": site.line, "function": site.function} if site.file else None


# --------------------------------------------------------------------------- findings


def _finding(code: str, severity: Severity, message: str, advice: str, evidence: list[Evidence],
             source: str, location: SourceLocation | None = None) -> Finding:
    return Finding(code=code, name=CODES[code][0], severity=severity, message=message, advice=advice,
                   evidence=tuple(evidence), location=location, origin="memory", source=source)


def _location(site_dict: dict[str, Any] | None) -> SourceLocation | None:
    if not site_dict or not site_dict.get("file"):
        return None
    return SourceLocation(site_dict["file"], site_dict.get("line"), site_dict.get("function"))


def device_findings(da: DeviceAnalysis, sites: SiteTable, opts: MemoryOptions, source: str) -> list[Finding]:
    out: list[Finding] = []
    dm, t, frag, rep = da.dm, da.totals, da.fragmentation, da.replay
    dev = dm.device

    # GP510: near capacity
    if dm.total_memory and t.peak_reserved is not None:
        share = t.peak_reserved / dm.total_memory
        if share >= opts.capacity_threshold:
            out.append(_finding(
                "GP510", Severity.WARNING,
                f"{dev}: peak reserved {fmt_bytes(t.peak_reserved)} is {share:.0%} of the device's "
                f"{fmt_bytes(dm.total_memory)}",
                "One larger batch or sequence will run out of memory. Find the largest holders at the peak "
                f"(below) and shrink them: {'' if run_mode(sites) == 'inference' else 'activation checkpointing, '}"
                f"{precision_advice(dm.bf16, run_mode(sites))}, smaller batch." + _fixes_text(da.fixes),
                [Evidence("peak_reserved_share", round(share, 4), opts.capacity_threshold, "fraction",
                          extra={"peak_reserved": t.peak_reserved, "total_memory": dm.total_memory,
                                 "peak_allocated": t.peak_allocated})],
                source,
            ))

    # GP512 / GP511 at an OOM
    for o in da.ooms:
        out.extend(_oom_findings(o, da, opts, source, sites))

    # GP511 without an OOM: much reserved memory free in split segments. Free memory in whole free segments is
    # simply cached (reusable by any request up to the segment's size): not fragmentation, not counted.
    if not da.ooms and frag.get("reserved"):
        split = frag["inactive_split_bytes"]
        ratio = split / frag["reserved"]
        if ratio >= opts.fragmentation_ratio and split >= opts.fragmentation_min_bytes:
            cached = max(frag["unallocated"] - split, 0)
            out.append(_finding(
                "GP511", Severity.INFO,
                f"{dev}: {fmt_bytes(split)} ({ratio:.0%}) of the {fmt_bytes(frag['reserved'])} reserved is free in "
                f"{frag['inactive_split_blocks']} pieces of split segments (fragmented: only requests that fit a "
                f"piece can use it; largest free block {fmt_bytes(frag['largest_free_block'])}); another "
                f"{fmt_bytes(cached)} is simply cached in whole free segments",
                "Fragmented memory is fine while requests fit in its pieces. If this process or another on the GPU "
                "runs short, set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True so segments grow in place instead "
                "of splitting.",
                [Evidence("split_free_share", round(ratio, 4), opts.fragmentation_ratio, "fraction",
                          extra={**{k: frag[k] for k in ("reserved", "allocated", "unallocated",
                                                         "inactive_split_blocks", "inactive_split_bytes",
                                                         "largest_free_block")}, "cached_whole_segments": cached})],
                source,
            ))

    # GP513: record_stream
    if rep.pending_frees and rep.pending_max_bytes >= opts.pending_min_bytes:
        share = rep.pending_max_bytes / t.peak_allocated if t.peak_allocated else 0.0
        sev = Severity.WARNING if share >= opts.pending_share else Severity.INFO
        out.append(_finding(
            "GP513", sev,
            f"{dev}: up to {fmt_bytes(rep.pending_max_bytes)} of freed blocks waited on other streams "
            f"({share:.0%} of the peak allocated); {rep.pending_frees} frees deferred",
            "Blocks used on a side stream (tensor.record_stream, NCCL, prefetch) can only be reused once that "
            "stream's work is done. Free them earlier, synchronise the side stream sooner, or allocate them on the "
            "stream that uses them.",
            [Evidence("pending_free_share", round(share, 4), opts.pending_share, "fraction",
                      extra={"max_bytes_waiting": rep.pending_max_bytes, "deferred_frees": rep.pending_frees,
                             "deferred_bytes": rep.pending_bytes_total, "max_wait": rep.pending_max_wait})],
            source,
        ))

    # GP514: dominant holder at the peak
    if da.top_sites:
        top = da.top_sites[0]
        origin = top.get("origin") or ""
        if origin and top["share"] is not None and top["share"] >= opts.holder_share:
            out.append(_finding(
                "GP514", Severity.INFO,
                f"{dev}: {top['site']} holds {fmt_bytes(top['bytes'])} ({top['share']:.0%}) of the peak "
                f"{fmt_bytes(t.peak_allocated)} in {top['blocks']} blocks" + _HOLDER_WHAT.get(origin, ""),
                _HOLDER_ADVICE.get(origin, _HOLDER_ADVICE["user"]),
                [Evidence("top_site_share", round(top["share"], 4), opts.holder_share, "fraction",
                          extra={"bytes": top["bytes"], "blocks": top["blocks"], "peak_allocated": t.peak_allocated,
                                 "origin": origin})],
                source,
                _location(top) if origin == "user" else None,
            ))

    # GP515: history truncated
    pre = next((r for r in da.top_sites if r["site"] == sites.sites[SiteTable.PRE_TRACE].label), None)
    if pre and t.peak_allocated and pre["bytes"] / t.peak_allocated >= opts.history_share:
        out.append(_finding(
            "GP515", Severity.INFO,
            f"{dev}: {fmt_bytes(pre['bytes'])} ({pre['bytes'] / t.peak_allocated:.0%}) of the peak was allocated "
            "before the recorded history began, so its allocation sites are unknown",
            ("Start recording earlier (torch.cuda.memory._record_memory_history() before building the model) or "
             "raise max_entries.") if dm.segments is not None else
            ("In a profiler trace these are usually the weights, gradients and optimizer state allocated before "
             "profiling began; a memory snapshot recorded from the start names their lines."),
            [Evidence("pre_history_share", round(pre["bytes"] / t.peak_allocated, 4), opts.history_share, "fraction",
                      extra={"bytes": pre["bytes"]})],
            source,
        ))
    return out


def observer_dump(dm: DeviceMemory, path: str, name_counts: bool = True) -> bool:
    """A snapshot an out-of-memory observer wrote: no OOM event, and the history ends with the allocator
    releasing cached segments (``segment_free``; it empties its cache before it gives up) or the file's name
    says ``oom`` (``name_counts``: False when another device of the file recorded its OOM, which the name is
    then about). Without history only the name can say it."""
    if dm.ooms or dm.segments is None:
        return False
    named = name_counts and "oom" in os.path.basename(path).lower().replace("room", "")
    tail = 0
    for a in reversed(dm.action):
        if a == SEGMENT_FREE:
            tail += 1
        elif a in (FREE_REQUESTED, FREE_COMPLETED) and tail == 0:
            continue  # frees between the release and the dump
        else:
            break
    return named or tail >= 1


SMALL_REQUEST = 1 << 20  # the allocator's kSmallSize: requests up to 1 MiB come from the small pool (2 MiB segments)


def _pool_free(dm: DeviceMemory, req: int, stream: int | None) -> dict[str, Any] | None:
    """Free bytes and the largest free block where the allocator looks for a ``req``-byte block at snapshot time: the
    pool of its size (small: <= 1 MiB, else large) on the request's stream (each stream has its own blocks; a
    stream no segment has, e.g. an OOM recorded by an observer, searches all). None without segments."""
    if dm.segments is None:
        return None
    pool = "small" if req <= SMALL_REQUEST else "large"
    segs = [g for g in dm.segments if (g.segment_type or "large") == pool]
    on_stream = [g for g in segs if g.stream == stream]
    if on_stream or stream is None:
        segs = on_stream
    total = largest = n = 0
    for g in segs:
        for b in g.blocks:
            if b.state == BlockState.INACTIVE:
                total += b.size
                n += 1
                if b.size > largest:
                    largest = b.size
    where = f" on stream {stream}" if on_stream and len({g.stream for g in dm.segments}) > 1 else ""
    return {"pool": pool, "free": total, "largest_free_block": largest, "free_blocks": n, "where": where}


def _fixes_text(fixes: list[dict[str, Any]]) -> str:
    if not fixes:
        return ""
    return " Ranked by the bytes each saves here: " + "; ".join(
        f"{i}. {f['what']} ({fmt_bytes(f['saves_bytes'])})" for i, f in enumerate(fixes[:4], 1)) + "."


def _observer_finding(da: DeviceAnalysis, source: str) -> Finding:
    """GP512 for an out-of-memory dump that recorded no OOM event: the run did fail, the request is unknown."""
    t = da.totals
    cats = da.state.get("categories") or {}
    held = ", ".join(f"{k.replace('_', ' ')} {fmt_bytes(v)}" for k, v in sorted(
        ((k, v) for k, v in cats.items() if v and k != "non_pytorch"), key=lambda kv: -kv[1])[:4])
    return _finding(
        "GP512", Severity.ERROR,
        f"{da.dm.device}: an out-of-memory dump (written by an out-of-memory observer; the failed request's size "
        f"was not recorded): {fmt_bytes(t.final_allocated)} allocated, {fmt_bytes(t.final_reserved)} reserved"
        + (f"; held as {held}" if held else ""),
        "The run failed to allocate here. The categories and holders at snapshot time are what filled the device: "
        "shrink the largest of them; record the request's size with the observer's alloc argument next time."
        + _fixes_text(da.fixes),
        [Evidence("requested", None, None, "bytes", extra={"allocated": t.final_allocated, "reserved": t.final_reserved,
                                                           "observer_dump": True, "categories": cats})],
        source,
    )


def _oom_findings(o: dict[str, Any], da: DeviceAnalysis, opts: MemoryOptions, source: str,
                  sites: SiteTable) -> list[Finding]:
    dev = da.dm.device
    mode = run_mode(sites)
    training = mode != "inference"
    precision = precision_advice(da.dm.bf16, mode)
    frag = da.fragmentation
    req = o["requested"]
    free = o["device_free"]
    cached = o["cached_free"]
    pending = o["pending_free"] or 0
    largest = frag.get("largest_free_block")
    total = da.dm.total_memory
    out: list[Finding] = []
    advice_kinds: list[str] = []
    advice: list[str] = []

    pool = _pool_free(da.dm, req, o.get("stream"))
    pool_free, pool_largest = (pool["free"], pool["largest_free_block"]) if pool else (None, largest)
    # Fragmentation: the pool the allocator searched held more free bytes than the request, in no piece big enough.
    # A request larger than all the free bytes is not fragmentation, whatever the largest piece.
    fragmented = pool is not None and pool_largest is not None and pool_largest < req <= pool["free"]
    o["pool"] = {k: v for k, v in pool.items() if k != "where"} if pool else None
    if fragmented:
        assert pool is not None
        advice_kinds.append("expandable_segments")
        advice.append(
            f"{fmt_bytes(pool['free'])} was free in the allocator's {pool['pool']} pool{pool['where']}, more than the "
            f"{fmt_bytes(req)} requested, but in {pool['free_blocks']} pieces, the largest "
            f"{fmt_bytes(pool['largest_free_block'])}: set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (or "
            "max_split_size_mb) so free pieces can be reused for other sizes."
        )
        evidence = [Evidence("request_vs_largest_free_block", req, pool["largest_free_block"], "bytes", extra={
            "requested": req, "largest_free_block": pool["largest_free_block"], "free_in_pool": pool["free"],
            "pool": pool["pool"], "unallocated_reserved": cached,
            "inactive_split_blocks": frag.get("inactive_split_blocks"),
            "inactive_split_bytes": frag.get("inactive_split_bytes"), "device_free": free,
        })]
        out.append(_finding(
            "GP511", Severity.WARNING,
            f"{dev}: out of memory from fragmentation: {fmt_bytes(req)} requested, {fmt_bytes(pool['free'])} free in "
            f"the {pool['pool']} pool in {pool['free_blocks']} pieces, the largest {fmt_bytes(pool['largest_free_block'])}",
            advice[-1], evidence, source,
        ))
    elif pool is not None or free is not None:
        parts = []
        if pool is not None:
            parts.append(f"{fmt_bytes(pool['free'])} in the allocator's {pool['pool']} pool{pool['where']} (largest "
                         f"free block {fmt_bytes(pool['largest_free_block'])})")
        if free is not None:
            parts.append(f"{fmt_bytes(free)} on the device")
        advice_kinds.append("exceeds_free")
        short = (f"; it needed {fmt_bytes(req - free)} more free on the device (or a free block that large)"
                 if free is not None and req > free else "")
        advice.append(f"The {fmt_bytes(req)} request exceeds what was free: " + " and ".join(parts)
                      + f": not fragmentation{short}.")
    if pending and pending >= min(req, opts.pending_min_bytes):
        advice_kinds.append("record_stream")
        advice.append(f"{fmt_bytes(pending)} of freed blocks were still waiting on other streams (record_stream): "
                      "synchronise or free them earlier.")
    growing = o["growing_sites"]
    if growing:
        advice_kinds.append("free_references")
        g = growing[0]
        advice.append(
            f"{g['site']} kept {g['blocks']} blocks ({fmt_bytes(g['bytes'])}) alive from all through the run: "
            "references held across iterations (a list of outputs, a loss summed without .item()/.detach()). "
            "Drop them."
        )
    if not fragmented:
        if total and req > total:
            advice_kinds.append("smaller_batch")
            advice.append(f"A single {fmt_bytes(req)} allocation is larger than the whole device: shrink the batch "
                          "or the sequence/image size.")
        else:
            if training:
                advice_kinds.extend(["smaller_batch", "activation_checkpointing", "amp"])
                advice.append("Live tensors fill the device: use a smaller batch (with gradient accumulation), "
                              f"activation checkpointing (torch.utils.checkpoint) or {precision} to shrink "
                              "activations.")
            else:
                advice_kinds.extend(["smaller_batch", "amp"])
                advice.append(f"Live tensors fill the device: use a smaller batch or {precision}.")
    if total and free is not None and o["reserved"] is not None:
        others = total - free - o["reserved"]
        if others > 0.1 * total:
            advice_kinds.append("other_processes")
            advice.append(f"About {fmt_bytes(others)} of the device is held outside this allocator (other processes, "
                          "NCCL, cuBLAS workspaces): check nvidia-smi.")
    o["advice_kinds"] = advice_kinds
    loc = _location(o["site"])
    msg = (f"{dev}: CUDA out of memory: {fmt_bytes(req)} requested with {fmt_bytes(free)} free on the device; "
           f"{fmt_bytes(o['allocated'])} allocated, {fmt_bytes(o['reserved'])} reserved")
    if o["site"].get("file"):
        msg += f", at {o['site']['site']}"
    out.insert(0, _finding(
        "GP512", Severity.ERROR, msg, " ".join(advice) + _fixes_text(da.fixes),
        [Evidence("requested", req, free, "bytes", extra={
            "device_free": free, "allocated": o["allocated"], "reserved": o["reserved"], "cached_free": cached,
            "pending_free": pending, "largest_free_block": pool_largest, "free_in_pool": pool_free,
            "pool": pool["pool"] if pool else None, "fragmentation": fragmented, "advice": advice_kinds,
            "top_live_sites": [{"site": s["site"], "bytes": s["bytes"]} for s in o["top_live_sites"][:5]],
        })],
        source, loc,
    ))
    return out


# --------------------------------------------------------------------------- entry points


def analyze_memory(data: MemoryData, opts: MemoryOptions | None = None
                   ) -> tuple[MemorySection, list[Finding], list[DeviceAnalysis]]:
    """Analyse every device of ``data``: the section, the findings, and the per-device analyses."""
    opts = opts or MemoryOptions()
    analyses = [analyze_device(dm, data.sites, opts, data.kinds, data.annotations) for dm in data.devices]
    notes = list(data.notes)
    findings: list[Finding] = []
    file_has_oom = any(d.ooms for d in data.devices)
    training = run_mode(data.sites) != "inference"
    for da in analyses:
        observed = observer_dump(da.dm, data.path, name_counts=not file_has_oom)
        near = bool(da.dm.total_memory and da.totals.peak_reserved is not None
                    and da.totals.peak_reserved >= opts.capacity_threshold * da.dm.total_memory)
        if da.ooms or observed or near:
            # the moment that failed (or came closest): the first OOM, the dump's state, else the peak
            at = da.ooms[0]["at_oom"] if da.ooms else (da.state if observed else da.at_peak)
            split = da.fragmentation.get("inactive_split_bytes")
            da.fixes = rank_fixes(at, split, bool(da.fragmentation.get("expandable_segments")), training)
        if observed:
            findings.append(_observer_finding(da, data.path))
            notes.append(
                f"{da.dm.device}: this looks like a dump written by an out-of-memory observer (the history ends with "
                "the allocator releasing its cached segments, what it does right before an allocation fails, or the "
                "file is named for an OOM) but it records no OOM event: the failed request's size is unknown. The "
                "holders at the end are what filled the device; record the size with "
                "torch._C._cuda_attach_out_of_memory_observer's alloc argument, or let the OOM event be recorded "
                "(_record_memory_history() before the run, dump after catching torch.cuda.OutOfMemoryError)")
        if da.dm.device.startswith("cuda") and not da.dm.total_memory:
            notes.append(
                f"{da.dm.device}: the device's capacity is unknown (the {data.source_type} does not record it), so "
                "how close the peak came to it (GP510) is not judged; give it with --device-memory SIZE (e.g. "
                "--device-memory 16GiB; torch.cuda.get_device_properties(0).total_memory says it)")
        if da.totals.inconsistent:
            notes.append(f"{da.dm.device}: the recorded history and the final state disagree; totals are clamped at 0")
        findings.extend(device_findings(da, data.sites, opts, data.path))
    section = MemorySection(
        source=data.path,
        source_type=data.source_type,
        devices=[da.to_dict(data.sites, opts) for da in analyses],
        notes=notes,
        settings={k: v for k, v in data.settings.items() if isinstance(v, (str, int, float, bool)) or v is None},
        pinned_host=data.pinned_host,
    )
    return section, findings, analyses


def memory_report(path: str, opts: MemoryOptions | None = None) -> Report:
    """Load ``path`` (snapshot or trace) and return the ``memory`` report."""
    from gpuprof.memory.load import load_memory

    opts = opts or MemoryOptions()
    data = load_memory(path, opts.internal_patterns)
    section, findings, _ = analyze_memory(data, opts)
    return Report(command="memory", inputs=[path], sections=[section], findings=findings)

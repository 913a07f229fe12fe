"""Memory by category, stage, module and source file at one moment (the tables of ``categories``/``stages``/...).

Input: the live blocks at the moment as (kind id, site id) -> [bytes, blocks,
first allocation time] (:class:`gpuprof.memory.replay.Holders.by_kind`), the
reserved bytes then, and what the device says about memory PyTorch does not
own. Output: plain dicts for the report section, in bytes:

* ``categories``: every key of :data:`~gpuprof.memory.attribution.CATEGORIES`;
  ``allocator_cache`` = reserved - allocated (free in PyTorch's cache, blocks
  waiting on other streams included); all but ``non_pytorch`` add up to
  ``reserved_bytes``. A value is None where it cannot be measured (no reserved
  total: ``allocator_cache``; no device total/free: ``non_pytorch``).
* ``stages``/``modules``/``files``: rows ``{name, bytes, share}`` ranked by
  bytes, share of the allocated bytes at the moment.

The stage of a block is its stack's; where the stack names none, the
innermost ``record_function`` range the snapshot recorded around its
allocation (``external_annotations``) names it.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Any, Mapping, Sequence

from gpuprof.memory.attribution import BLOCK_CATEGORIES, CATEGORIES, STAGES, KindTable, annotation_stage
from gpuprof.memory.frames import SiteTable
from gpuprof.memory.replay import bucket_peaks

__all__ = ["StageRanges", "backward_ended", "breakdown", "state_by_kind", "stage_timeline"]


class StageRanges:
    """The annotated ranges of one device that name a stage, for "which stage was running at time t"."""

    _MAX_WALK = 64  # ranges looked at per query: nested annotations are shallow

    def __init__(self, annotations: Sequence[tuple[int, str, float, float]], device: int) -> None:
        rows = []
        for dev, name, start, end in annotations:
            stage = annotation_stage(name)
            if dev == device and stage is not None and end >= start:
                rows.append((start, end, stage))
        rows.sort()
        self._starts = [r[0] for r in rows]
        self._rows = rows

    def __bool__(self) -> bool:
        return bool(self._rows)

    def at(self, t: float) -> str | None:
        """The stage of the latest-starting range around ``t``."""
        i = bisect_right(self._starts, t)
        for j in range(i - 1, max(-1, i - 1 - self._MAX_WALK), -1):
            start, end, stage = self._rows[j]
            if start <= t <= end:
                return stage
        return None


def _rows(acc: Mapping[str, int], total: int, top: int, key: str) -> list[dict[str, Any]]:
    rows = sorted(acc.items(), key=lambda kv: (-kv[1], kv[0]))
    out = [{key: k, "bytes": b, "share": (b / total) if total else None} for k, b in rows[:top]]
    rest = sum(b for _, b in rows[top:])
    if rest:
        out.append({key: f"<{len(rows) - top} more>", "bytes": rest, "share": (rest / total) if total else None})
    return out


def backward_ended(dm: Any, kinds: KindTable, moment: int) -> float | None:
    """The time of the last allocation outside the backward pass at or before event ``moment`` (-1: the end):
    a block the backward pass allocated before it outlived that pass (None: no such allocation recorded)."""
    from gpuprof.memory.model import ALLOC

    n = len(dm)
    if len(dm.kind) != n or n == 0:
        return None
    i = n - 1 if moment < 0 or moment >= n else moment
    ks = kinds.kinds
    while i >= 0:
        if dm.action[i] == ALLOC:
            st = ks[dm.kind[i]].stage
            if st not in ("backward", "unknown"):
                return float(dm.time[i])
        i -= 1
    return None


def breakdown(by_kind: Mapping[tuple[int, int], Sequence[float]], kinds: KindTable, sites: SiteTable,
              reserved: int | None, non_pytorch: int | None, ranges: StageRanges | None = None,
              top: int = 10, backward_end: float | None = None) -> dict[str, Any]:
    """Categories (with ``reserved_bytes`` and ``allocated_bytes``), stages, modules and files of one moment.

    ``backward_end``: see :func:`backward_ended`. A block the backward pass allocated before it is a gradient
    (the autograd engine hands a parameter's first gradient to ``.grad`` without a copy, so its stack is the
    backward node's, not ``AccumulateGrad``'s); one allocated after it, or without that time, is a temporary of
    a backward pass still running.
    """
    cats = dict.fromkeys(BLOCK_CATEGORIES, 0)
    stages: dict[str, int] = {}
    modules: dict[str, int] = {}
    files: dict[str, int] = {}
    reasons: dict[str, dict[str, int]] = {}
    act_modules: dict[str, int] = {}  # activations per module: what checkpointing it would free
    temp_sites: dict[int, int] = {}  # temporaries per site outside the backward pass: holders one could free
    allocated = 0
    for (kid, sid), (nbytes_f, _blocks, t) in by_kind.items():
        nbytes = int(nbytes_f)
        k = kinds.kinds[kid] if 0 <= kid < len(kinds.kinds) else kinds.kinds[0]
        allocated += nbytes
        cat, reason = k.category, k.reason
        if cat == "temporaries" and k.stage == "backward" and backward_end is not None and 0 <= t < backward_end:
            cat, reason = "gradients", "made by the backward pass and outlived it"
        cats[cat] += nbytes
        stage = k.stage
        if stage in ("other", "unknown") and ranges and t >= 0:
            stage = ranges.at(t) or stage
        stages[stage] = stages.get(stage, 0) + nbytes
        if k.module:
            modules[k.module] = modules.get(k.module, 0) + nbytes
            if cat == "activations":
                act_modules[k.module] = act_modules.get(k.module, 0) + nbytes
        if cat == "temporaries" and stage != "backward":
            temp_sites[sid] = temp_sites.get(sid, 0) + nbytes
        site = sites.sites[sid] if 0 <= sid < len(sites.sites) else sites.sites[0]
        fname = site.file or site.label
        files[fname] = files.get(fname, 0) + nbytes
        r = reasons.setdefault(cat, {})
        r[reason] = r.get(reason, 0) + nbytes
    out_cats: dict[str, int | None] = {c: cats.get(c, 0) for c in CATEGORIES}
    if reserved is not None and reserved < allocated:
        # no caching allocator behind the figure (a CPU trace's "reserved" is 0) or a torn file: not measurable
        reserved = None
    out_cats["allocator_cache"] = (reserved - allocated) if reserved is not None else None
    out_cats["non_pytorch"] = non_pytorch
    return {
        "categories": out_cats,
        "reserved_bytes": reserved,
        "allocated_bytes": allocated,
        "unattributed_share": (cats["unattributed"] / allocated) if allocated else None,
        "why": {c: _rows(v, cats[c], 3, "reason") for c, v in reasons.items()},
        "stages": _rows(stages, allocated, len(stages), "stage"),
        "modules": _rows(modules, allocated, top, "module"),
        "files": _rows(files, allocated, top, "file"),
        "activations_by_module": _rows(act_modules, allocated, top, "module"),
        "temporaries_by_site": [
            dict(sites.sites[sid].to_dict(), bytes=b, stack=None)
            for sid, b in sorted(temp_sites.items(), key=lambda kv: -kv[1])[:5]
            if 0 <= sid < len(sites.sites) and sites.sites[sid].file],
    }


def state_by_kind(dm: Any) -> dict[tuple[int, int], list[float]]:
    """The allocated blocks of a snapshot's final state as (kind, site) -> [bytes, blocks, first allocation time];
    a block's time is that of the last recorded allocation at its address (-1: before the history)."""
    from gpuprof.memory.model import ALLOC, BlockState

    when: dict[int, float] = {}
    kind_n = len(dm.kind) == len(dm)
    for i, a in enumerate(dm.action):
        if a == ALLOC and kind_n:
            when[dm.addr[i]] = dm.time[i]
    out: dict[tuple[int, int], list[float]] = {}
    for seg in dm.segments or ():
        for b in seg.blocks:
            if b.state != BlockState.ALLOCATED:
                continue
            t = when.get(b.address, -1.0)
            e = out.get((b.kind, b.site))
            if e is None:
                out[(b.kind, b.site)] = [b.size, 1, t]
            else:
                e[0] += b.size
                e[1] += 1
                if 0 <= t < e[2] or e[2] < 0:
                    e[2] = t
    return out


def stage_timeline(dm: Any, kinds: KindTable, ranges: StageRanges | None, buckets: int = 100) -> dict[str, Any]:
    """Live bytes per stage over time: ``{"stages", "t", "bytes"}``, one row per time bucket (the bucket's
    highest moment, so peaks survive), one column per stage in ``stages``. Only what the history allocated:
    blocks older than it are in no stage here (the totals timeline has them)."""
    if not len(dm) or len(dm.kind) != len(dm) or not dm.has_addresses:
        return {"stages": [], "t": [], "bytes": []}
    col = {s: i for i, s in enumerate(STAGES)}
    ks, kind, tm = kinds.kinds, dm.kind, dm.time

    def column_of(i: int) -> int:
        st = ks[kind[i]].stage
        if st in ("other", "unknown") and ranges:
            st = ranges.at(tm[i]) or st
        return col[st]

    times, rows = bucket_peaks(dm, column_of, len(STAGES), buckets)
    used = [i for i in range(len(STAGES)) if any(r[i] for r in rows)]
    return {"stages": [STAGES[i] for i in used], "t": times, "bytes": [[r[i] for i in used] for r in rows]}

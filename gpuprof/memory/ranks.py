"""``gpuprof memory S0 S1 S2 S3``: several ranks' snapshots read together, one cross-rank view.

A data-parallel job (DDP, FSDP) runs the same program on every rank, so its ranks' memory should match: the
view says whether it does. Per rank (one row per file and device, in the order given): peak allocated and
reserved, allocated and reserved at the end, the categories at the moment that matters (the first OOM when
there was one, else the allocated peak) and the OOM request. The ranks are **identical** when every one of these
figures spreads (max - min over the ranks) by at most ``max(1 %`` of its largest value``, 2 MiB)``; otherwise the
view names the rank holding the most at that moment, how much more than the rank holding the least, and where
the difference is: by category and by allocation site (the sites' bytes at the peak).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Sequence

from gpuprof.memory.units import fmt_bytes

__all__ = ["RanksSection", "ranks_view", "REL_TOLERANCE", "ABS_TOLERANCE"]

REL_TOLERANCE = 0.01  # a figure is the same on every rank when it spreads by at most this share of its largest value
ABS_TOLERANCE = 2 << 20  # or by at most this many bytes (a few small blocks: RNG state, a rank's own scalars)


@dataclass
class RanksSection:
    """The ``memory-ranks`` report section."""

    ranks: list[dict[str, Any]]
    verdict: str  # "identical", "different" or "one" (a single rank: nothing to compare)
    summary: str
    differences: list[dict[str, Any]] = field(default_factory=list)  # figures beyond tolerance, largest first
    where: dict[str, Any] = field(default_factory=dict)  # the most-holding rank against the least: categories, sites
    tolerance: dict[str, float] = field(default_factory=lambda: {"relative": REL_TOLERANCE, "bytes": ABS_TOLERANCE})
    kind: str = "memory-ranks"

    def to_dict(self) -> dict[str, Any]:
        return {"ranks": self.ranks, "verdict": self.verdict, "summary": self.summary,
                "differences": self.differences, "where": self.where, "tolerance": dict(self.tolerance)}


def _moment(dev: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The moment a rank is compared at: its first OOM (the failing moment), else its allocated peak."""
    ooms = dev.get("ooms") or []
    if ooms and ooms[0].get("at_oom"):
        return "oom", ooms[0]["at_oom"]
    return "peak", dev.get("at_peak") or {}


def _row(rank: int, path: str, dev: dict[str, Any]) -> dict[str, Any]:
    moment, at = _moment(dev)
    ooms = dev.get("ooms") or []
    cats = {k: v for k, v in (at.get("categories") or {}).items() if v is not None}
    return {
        "rank": rank,  # the file's position among those given (give them in rank order)
        "file": os.path.basename(path),
        "device": dev.get("device"),
        "peak_allocated": (dev.get("allocated") or {}).get("peak"),
        "peak_reserved": (dev.get("reserved") or {}).get("peak"),
        "final_allocated": (dev.get("allocated") or {}).get("final"),
        "final_reserved": (dev.get("reserved") or {}).get("final"),
        "moment": moment,
        "allocated_at_moment": at.get("allocated_bytes"),
        "categories": cats,
        "oom_requested": ooms[0].get("requested") if ooms else None,
        "ooms": len(ooms),
        "_sites": {s["site"]: int(s["bytes"]) for s in dev.get("top_sites") or ()},
    }


_FIGURES = ("peak_allocated", "peak_reserved", "final_allocated", "final_reserved", "allocated_at_moment",
            "oom_requested")


def _spread(values: Sequence[int | None]) -> tuple[int, int] | None:
    vals = [v for v in values if v is not None]
    if len(vals) < 2:
        return None
    return min(vals), max(vals)


def _beyond(lo: int, hi: int) -> bool:
    return hi - lo > max(REL_TOLERANCE * abs(hi), ABS_TOLERANCE)


def ranks_view(files: Sequence[tuple[str, dict[str, Any]]]) -> RanksSection:
    """The cross-rank view of ``files``: (path, that file's ``memory`` section as a dict), in rank order."""
    rows = [_row(i, path, dev) for i, (path, sec) in enumerate(files) for dev in sec.get("devices") or ()]
    public = [{k: v for k, v in r.items() if not k.startswith("_")} for r in rows]
    if len(rows) < 2:
        return RanksSection(public, "one", "one rank: nothing to compare")
    diffs: list[dict[str, Any]] = []
    for fig in _FIGURES:
        s = _spread([r[fig] for r in rows])
        if s and _beyond(*s):
            diffs.append({"figure": fig, "min": s[0], "max": s[1], "spread": s[1] - s[0]})
    for cat in sorted({c for r in rows for c in r["categories"]}):
        s = _spread([r["categories"].get(cat, 0) for r in rows])
        if s and _beyond(*s):
            diffs.append({"figure": f"categories.{cat}", "min": s[0], "max": s[1], "spread": s[1] - s[0]})
    if (len({r["ooms"] > 0 for r in rows}) > 1):
        diffs.append({"figure": "ooms", "min": min(r["ooms"] for r in rows), "max": max(r["ooms"] for r in rows),
                      "spread": None})
    diffs.sort(key=lambda d: -(d["spread"] or 0))
    names = [f"rank {r['rank']} ({r['file']} {r['device']})" for r in rows]
    moments = {r["moment"] for r in rows}
    at = "the OOM" if moments == {"oom"} else ("the allocated peak" if moments == {"peak"} else "the OOM or peak")
    if not diffs:
        oom = [r for r in rows if r["ooms"]]
        what = (f"; every rank ran out of memory asking for {fmt_bytes(oom[0]['oom_requested'])}"
                if len(oom) == len(rows) and oom[0]["oom_requested"] is not None else "")
        summary = (f"the {len(rows)} ranks are identical within {REL_TOLERANCE:.0%} (or {fmt_bytes(ABS_TOLERANCE)}): "
                   f"peak allocated {fmt_bytes(rows[0]['peak_allocated'])}, peak reserved "
                   f"{fmt_bytes(rows[0]['peak_reserved'])}, the same categories at {at}{what}; one rank's "
                   "analysis stands for all")
        return RanksSection(public, "identical", summary)
    key = "allocated_at_moment" if all(r["allocated_at_moment"] is not None for r in rows) else "peak_allocated"
    hi = max(range(len(rows)), key=lambda i: rows[i][key] or 0)
    lo = min(range(len(rows)), key=lambda i: rows[i][key] or 0)
    more = (rows[hi][key] or 0) - (rows[lo][key] or 0)
    cat_diff = sorted(((c, rows[hi]["categories"].get(c, 0) - rows[lo]["categories"].get(c, 0))
                       for c in set(rows[hi]["categories"]) | set(rows[lo]["categories"])
                       if c not in ("allocator_cache", "non_pytorch")), key=lambda kv: -abs(kv[1]))
    site_diff = sorted(((s, rows[hi]["_sites"].get(s, 0) - rows[lo]["_sites"].get(s, 0))
                        for s in set(rows[hi]["_sites"]) | set(rows[lo]["_sites"])), key=lambda kv: -abs(kv[1]))
    where = {"most": names[hi], "least": names[lo], "figure": key, "more_bytes": more,
             "categories": [{"category": c, "bytes": b} for c, b in cat_diff if b][:5],
             "sites": [{"site": s, "bytes": b} for s, b in site_diff if b][:5]}
    parts = ", ".join(f"{c.replace('_', ' ')} {'+' if b > 0 else '-'}{fmt_bytes(abs(b))}"
                      for c, b in cat_diff[:3] if b)
    sites = "; ".join(f"{s} {'+' if b > 0 else '-'}{fmt_bytes(abs(b))}" for s, b in site_diff[:2] if b)
    which = "at the OOM" if key == "allocated_at_moment" and moments == {"oom"} else (
        "at the allocated peak" if key == "allocated_at_moment" and moments == {"peak"} else "at its moment" if
        key == "allocated_at_moment" else "at the peak")
    summary = (f"the {len(rows)} ranks differ: {names[hi]} holds {fmt_bytes(more)} more than {names[lo]} {which}"
               + (f" ({parts})" if parts else "") + (f"; by site: {sites}" if sites else "")
               + f"; figures beyond {REL_TOLERANCE:.0%} (or {fmt_bytes(ABS_TOLERANCE)}): "
               + ", ".join(d["figure"].replace("_", " ") for d in diffs[:5]))
    return RanksSection(public, "different", summary, diffs, where)

"""``gpuprof memory diff A B``: which allocation sites grew, ranked by bytes (the leak finder).

The live blocks at the end of A and at the end of B (a snapshot's state, or
a trace's last event) are summed per allocation site; a site's *growth* is
its live bytes in B minus in A. With one trace and no B, the two moments are
the ends of its first and last profiler steps (``ProfilerStep#N``), and the
allocated total at every step end is checked for steady growth.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Mapping

from gpuprof.codespec import option_default, replace_fields
from gpuprof.errors import InputError
from gpuprof.findings import Evidence, Finding, Severity, SourceLocation
from gpuprof.memory.analysis import CODES, MemoryOptions, memory_values
from gpuprof.memory.codes import MEMORY_CODES
from gpuprof.memory.frames import Site, SiteTable
from gpuprof.memory.load import load_memory
from gpuprof.memory.model import DeviceMemory, MemoryData
from gpuprof.memory.replay import Holders, replay_holders, replay_totals
from gpuprof.memory.units import fmt_bytes
from gpuprof.report import Report

__all__ = ["DiffOptions", "MemoryDiffSection", "diff_memory", "diff_report"]


@dataclass(frozen=True)
class DiffOptions:
    """Settings of the diff: the GP520/GP521 thresholds (options, declared in gpuprof.memory.codes), then rows."""

    min_growth: int = option_default(MEMORY_CODES, "min_growth")  # GP520, GP521
    max_findings: int = option_default(MEMORY_CODES, "max_findings")  # GP520
    min_steps: int = option_default(MEMORY_CODES, "min_steps")  # GP521
    top: int = 15  # rows in the growth table

    def with_options(self, options: Mapping[str, Mapping[str, Any]]) -> "DiffOptions":
        """A copy with the parsed ``--option`` values of the memory codes set (others ignored)."""
        return replace_fields(self, memory_values(options))


@dataclass
class MemoryDiffSection:
    """The ``memory-diff`` report section."""

    before: str
    after: str
    devices: list[dict[str, Any]]
    notes: list[str] = field(default_factory=list)
    kind: str = "memory-diff"

    def to_dict(self) -> dict[str, Any]:
        return {"before": self.before, "after": self.after, "devices": self.devices, "notes": list(self.notes)}


def _by_key(h: Holders, sites: SiteTable) -> dict[str, tuple[int, int, Site]]:
    # Sites from two files are matched by their label (file:line (function)), not by id.
    out: dict[str, tuple[int, int, Site]] = {}
    for sid, (nbytes, count) in h.by_site.items():
        s = sites.sites[sid]
        prev = out.get(s.label)
        out[s.label] = (nbytes + (prev[0] if prev else 0), count + (prev[1] if prev else 0), s)
    return out


def _compare(ha: Holders, sa: SiteTable, hb: Holders, sb: SiteTable, top: int) -> list[dict[str, Any]]:
    a = _by_key(ha, sa)
    b = _by_key(hb, sb)
    rows = []
    for key in set(a) | set(b):
        ba, ca, site_a = a.get(key, (0, 0, None))
        bb, cb, site_b = b.get(key, (0, 0, None))
        site = site_b or site_a
        assert site is not None
        d = site.to_dict()
        d.update(before=ba, after=bb, growth=bb - ba, blocks_before=ca, blocks_after=cb)
        rows.append(d)
    rows.sort(key=lambda r: (-r["growth"], r["site"]))
    return rows[:top]


def _end_index_of_step(dm: DeviceMemory, end_us: float) -> int:
    from bisect import bisect_right

    return bisect_right(dm.time, end_us) - 1


def diff_memory(a: MemoryData, b: MemoryData | None, opts: DiffOptions | None = None
                ) -> tuple[MemoryDiffSection, list[Finding]]:
    opts = opts or DiffOptions()
    findings: list[Finding] = []
    devices: list[dict[str, Any]] = []
    notes: list[str] = []
    if b is None:
        if a.source_type != "trace":
            raise InputError(a.path, "diff of one file needs a profiler trace with steps; give two snapshots")
        if len(a.steps) < 2:
            raise InputError(a.path, "the trace has fewer than 2 ProfilerStep events to compare; give two files")
        for dm in a.devices:
            ends = [(n, _end_index_of_step(dm, end)) for n, _, end in a.steps]
            ends = [(n, i) for n, i in ends if i >= 0]
            if len(ends) < 2:
                continue
            moments = tuple(i for _, i in ends)
            rep = replay_holders(dm, moments)
            tot = replay_totals(dm, mark=moments)
            first_n, first_i = ends[0]
            last_n, last_i = ends[-1]
            if dm.has_addresses:
                rows = _compare(rep.holders[first_i], a.sites, rep.holders[last_i], a.sites, opts.top)
            else:
                rows = []  # frees cannot be matched with allocations: only the step totals mean something
                notes.append(f"{dm.device}: the trace has no allocation addresses; only step totals are compared")
            per_step = [{"step": n, "allocated": tot.allocated_at.get(i)} for n, i in ends]
            devices.append({"device": dm.device, "before": f"end of step {first_n}", "after": f"end of step {last_n}",
                            "sites": rows, "step_allocated": per_step})
            findings.extend(_growth_findings(dm.device, rows, opts, a.path, f"step {first_n}", f"step {last_n}"))
            findings.extend(_steady_growth(dm.device, per_step, opts, a.path))
        return MemoryDiffSection(a.path, a.path, devices, notes), findings

    names_b = {d.device: d for d in b.devices}
    for da in a.devices:
        db = names_b.get(da.device)
        if db is None:
            notes.append(f"{da.device} is only in {a.path}")
            continue
        ra = replay_holders(da, (-1,))
        rb = replay_holders(db, (-1,))
        rows = _compare(ra.holders[-1], a.sites, rb.holders[-1], b.sites, opts.top)
        devices.append({"device": da.device, "before": os.path.basename(a.path), "after": os.path.basename(b.path),
                        "allocated_before": ra.holders[-1].total, "allocated_after": rb.holders[-1].total,
                        "sites": rows})
        findings.extend(_growth_findings(da.device, rows, opts, b.path, os.path.basename(a.path),
                                         os.path.basename(b.path)))
    for dbn in names_b:
        if dbn not in {d.device for d in a.devices}:
            notes.append(f"{dbn} is only in {b.path}")
    return MemoryDiffSection(a.path, b.path, devices, notes), findings


def _growth_findings(dev: str, rows: list[dict[str, Any]], opts: DiffOptions, source: str, before: str,
                     after: str) -> list[Finding]:
    out: list[Finding] = []
    for r in rows:
        if r["growth"] < opts.min_growth or len(out) >= opts.max_findings:
            break
        loc = SourceLocation(r["file"], r["line"], r["function"]) if r["file"] else None
        out.append(Finding(
            code="GP520", name=CODES["GP520"][0], severity=Severity.WARNING,
            message=(f"{dev}: {r['site']} holds {fmt_bytes(r['growth'])} more at {after} than at {before} "
                     f"({fmt_bytes(r['before'])} in {r['blocks_before']} blocks -> {fmt_bytes(r['after'])} in "
                     f"{r['blocks_after']} blocks)"),
            advice=("Memory allocated here is not released between the two points: look for tensors kept in a "
                    "list or dict, a loss accumulated without .item()/.detach(), or a cache that only grows."),
            evidence=(Evidence("growth", r["growth"], opts.min_growth, "bytes",
                               extra={"before": r["before"], "after": r["after"],
                                      "blocks_before": r["blocks_before"], "blocks_after": r["blocks_after"]}),),
            location=loc, origin="memory", source=source,
        ))
    return out


def _steady_growth(dev: str, per_step: list[dict[str, Any]], opts: DiffOptions, source: str) -> list[Finding]:
    vals = [p["allocated"] for p in per_step if p["allocated"] is not None]
    if len(vals) < opts.min_steps:
        return []
    rises = all(b > a for a, b in zip(vals, vals[1:]))
    growth = vals[-1] - vals[0]
    if not rises or growth < opts.min_growth:
        return []
    per = growth / (len(vals) - 1)
    return [Finding(
        code="GP521", name=CODES["GP521"][0], severity=Severity.WARNING,
        message=(f"{dev}: allocated memory grows at every step end, {fmt_bytes(vals[0])} -> {fmt_bytes(vals[-1])} "
                 f"over {len(vals)} steps (+{fmt_bytes(per)} per step)"),
        advice="Something allocated each step survives it: the site table below ranks the lines that grew.",
        evidence=(Evidence("growth_per_step", int(per), None, "bytes", extra={"allocated_at_step_end": vals}),),
        origin="memory", source=source,
    )]


def diff_report(path_a: str, path_b: str | None, opts: DiffOptions | None = None,
                mem_opts: MemoryOptions | None = None) -> Report:
    mem_opts = mem_opts or MemoryOptions()
    a = load_memory(path_a, mem_opts.internal_patterns)
    b = load_memory(path_b, mem_opts.internal_patterns) if path_b else None
    section, findings = diff_memory(a, b, opts)
    return Report(command="memory-diff", inputs=[p for p in (path_a, path_b) if p], sections=[section],
                  findings=findings)

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
from gpuprof.memory.attribution import KindTable
from gpuprof.memory.breakdown import backward_ended
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
    programs: dict[str, Any] | None = None  # same_program(A, B); None for the steps of one trace
    kind: str = "memory-diff"

    def to_dict(self) -> dict[str, Any]:
        return {"before": self.before, "after": self.after, "devices": self.devices, "notes": list(self.notes),
                "programs": self.programs}


# What makes growth at a site one-time, by the cause of its bytes (gpuprof.memory.attribution.StackKind):
# these appear once (the first optimizer step, the first backward, loading or moving the model, turning
# autocast on, filling a pre-allocated cache) and then are reused, step after step.
ONE_TIME_CAUSES: dict[str, str] = {
    "optimizer_state": "optimizer state, created by the first optimizer step",
    "gradients": "gradients, created by the first backward pass (kept in .grad between steps)",
    "parameters": "parameters or buffers, loaded or moved to the device",
    "autocast": "tensors made under autocast (cast copies and lower-precision outputs), present once autocast is on",
    "cache": "a pre-allocated cache (such as a KV cache), filled once",
    "library_workspaces": "a cuBLAS/cuDNN workspace, allocated once per handle and stream and kept",
    "first_step": "grew at one step and then stayed flat: a first-step allocation, not a per-step leak",
}
ONE_TIME_SHARE = 0.9  # a growth is one-time when its one-time causes explain at least this share of it
# Two files are of different programs when fewer than this share of the user frames of the one with fewer of them
# appear in the other (see same_program). Measured on the seven shared snapshots: the same program with and without
# autocast shares 0.94; two runs of one benchmark (eager and compiled, other commits) 0.58-0.59; unrelated ones 0.
SAME_PROGRAM_SHARE = 0.5


def same_program(a: MemoryData, b: MemoryData) -> dict[str, Any]:
    """Whether A and B come from the same program, from the user frames on their recorded stacks (file's base
    name, line, function; history and blocks): ``overlap`` = shared frames / frames of the file with fewer, and the
    scripts their stacks start in (the outermost ``<module>`` frame). ``verdict``: "different" when the overlap is
    under SAME_PROGRAM_SHARE or the two ran disjoint scripts (``train_ddp.py`` and ``train_fsdp.py`` importing one
    model share its frames), "same" otherwise, "unknown" when a file records no user frame (no stacks, or a
    profiler trace without them). Sizes per site mean growth only within one program."""
    fa, fb = a.sites.user_frames(), b.sites.user_frames()
    ea, eb = a.sites.entry_scripts(), b.sites.entry_scripts()
    shared = len(fa & fb)
    small = min(len(fa), len(fb))
    overlap = shared / small if small else None
    other_script = bool(ea and eb and not ea & eb)  # each started from a script the other never ran
    if overlap is None:
        verdict = "unknown"
    else:
        verdict = "same" if overlap >= SAME_PROGRAM_SHARE and not other_script else "different"
    return {"verdict": verdict, "overlap": round(overlap, 4) if overlap is not None else None,
            "shared_frames": shared, "frames_before": len(fa), "frames_after": len(fb),
            "scripts_before": sorted(ea)[:10], "scripts_after": sorted(eb)[:10], "threshold": SAME_PROGRAM_SHARE}


def _cause(kinds: KindTable, kid: int, t: float = -1.0, backward_end: float | None = None) -> str:
    k = kinds.kinds[kid] if 0 <= kid < len(kinds.kinds) else kinds.kinds[0]
    if k.category in ("optimizer_state", "gradients", "parameters", "library_workspaces"):
        return k.category
    if k.category == "temporaries" and k.stage == "backward" and backward_end is not None and 0 <= t < backward_end:
        return "gradients"  # made by a backward pass that has ended: .grad (gpuprof.memory.breakdown.breakdown)
    return k.trait  # "autocast", "cache" or "" (nothing one-time about it)


def _by_key(h: Holders, sites: SiteTable, kinds: KindTable, backward_end: float | None = None
            ) -> dict[str, tuple[int, int, Site, dict[str, int]]]:
    # Sites from two files are matched by their label (file:line (function)), not by id.
    causes: dict[int, dict[str, int]] = {}
    for (kid, sid), (nbytes, _n, t) in h.by_kind.items():
        c = causes.setdefault(sid, {})
        key = _cause(kinds, kid, t, backward_end)
        c[key] = c.get(key, 0) + int(nbytes)
    out: dict[str, tuple[int, int, Site, dict[str, int]]] = {}
    for sid, (nbytes, count) in h.by_site.items():
        s = sites.sites[sid]
        prev = out.get(s.label)
        merged = dict(prev[3]) if prev else {}
        for k, v in causes.get(sid, {}).items():
            merged[k] = merged.get(k, 0) + v
        out[s.label] = (nbytes + (prev[0] if prev else 0), count + (prev[1] if prev else 0), s, merged)
    return out


def classify_growth(growth: int, before: Mapping[str, int], after: Mapping[str, int]) -> tuple[str, list[str]]:
    """``("one_time", causes)`` when one-time causes explain the growth, else ``("steady", [])``."""
    if growth <= 0:
        return "none", []
    grew = {c: after.get(c, 0) - before.get(c, 0) for c in ONE_TIME_CAUSES if c}
    explained = sum(v for v in grew.values() if v > 0)
    if explained >= ONE_TIME_SHARE * growth:
        return "one_time", [c for c, v in sorted(grew.items(), key=lambda kv: -kv[1]) if v > 0]
    return "steady", []


def _compare(ha: Holders, sa: SiteTable, ka: KindTable, hb: Holders, sb: SiteTable, kb: KindTable, top: int,
             ends: tuple[float | None, float | None] = (None, None)) -> list[dict[str, Any]]:
    a = _by_key(ha, sa, ka, ends[0])
    b = _by_key(hb, sb, kb, ends[1])
    rows = []
    for key in set(a) | set(b):
        ba, ca, site_a, causes_a = a.get(key, (0, 0, None, {}))
        bb, cb, site_b, causes_b = b.get(key, (0, 0, None, {}))
        site = site_b or site_a
        assert site is not None
        d = site.to_dict()
        kind, why = classify_growth(bb - ba, causes_a, causes_b)
        d.update(before=ba, after=bb, growth=bb - ba, blocks_before=ca, blocks_after=cb, growth_kind=kind,
                 one_time=why)
        rows.append(d)
    rows.sort(key=lambda r: (-r["growth"], r["site"]))
    return rows[:top]


def _first_step_growth(rows: list[dict[str, Any]], series: dict[str, list[int]], min_growth: int) -> None:
    """Trace diffs: a site that grew in one interval between step ends and was flat in every other (three step
    ends at least) grew once, at the first step; that is one-time, whatever its stack."""
    for r in rows:
        vals = series.get(r["site"])
        if r["growth_kind"] != "steady" or not vals or len(vals) < 3:
            continue
        rises = [b - a for a, b in zip(vals, vals[1:])]
        if sum(1 for x in rises if x > 0) == 1 and all(x >= 0 for x in rises) and max(rises) >= min_growth:
            r["growth_kind"] = "one_time"
            r["one_time"] = ["first_step"]


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
                rows = _compare(rep.holders[first_i], a.sites, a.kinds, rep.holders[last_i], a.sites, a.kinds,
                                opts.top)
                series: dict[str, list[int]] = {}
                for _n, i in ends:
                    per = _by_key(rep.holders[i], a.sites, a.kinds)
                    for r in rows:
                        series.setdefault(r["site"], []).append(per.get(r["site"], (0,))[0])
                _first_step_growth(rows, series, opts.min_growth)
            else:
                rows = []  # frees cannot be matched with allocations: only the step totals mean something
                notes.append(f"{dm.device}: the trace has no allocation addresses; only step totals are compared")
            per_step = [{"step": n, "allocated": tot.allocated_at.get(i)} for n, i in ends]
            devices.append({"device": dm.device, "before": f"end of step {first_n}", "after": f"end of step {last_n}",
                            "sites": rows, "step_allocated": per_step})
            findings.extend(_growth_findings(dm.device, rows, opts, a.path, f"step {first_n}", f"step {last_n}"))
            findings.extend(_steady_growth(dm.device, per_step, opts, a.path))
        return MemoryDiffSection(a.path, a.path, devices, notes), findings

    programs = same_program(a, b)
    different = programs["verdict"] == "different"
    if different:
        why = (f"{programs['shared_frames']} of the {min(programs['frames_before'], programs['frames_after'])} "
               f"user frames (file, line, function) on the stacks of the one with fewer are in the other "
               f"({programs['overlap']:.0%}; the same program shares at least {SAME_PROGRAM_SHARE:.0%})")
        if programs["scripts_before"] and programs["scripts_after"] and not (
                set(programs["scripts_before"]) & set(programs["scripts_after"])):
            why += (f", and they ran different scripts ({', '.join(programs['scripts_before'])} vs "
                    f"{', '.join(programs['scripts_after'])})")
        notes.append(
            f"{os.path.basename(a.path)} and {os.path.basename(b.path)} are different programs: {why}. The sites "
            "are compared by name, but a difference between two programs is not growth: no leak is named")
    names_b = {d.device: d for d in b.devices}
    for da in a.devices:
        db = names_b.get(da.device)
        if db is None:
            notes.append(f"{da.device} is only in {a.path}")
            continue
        ra = replay_holders(da, (-1,))
        rb = replay_holders(db, (-1,))
        rows = _compare(ra.holders[-1], a.sites, a.kinds, rb.holders[-1], b.sites, b.kinds, opts.top,
                        (backward_ended(da, a.kinds, -1), backward_ended(db, b.kinds, -1)))
        if different:
            for r in rows:  # a difference between two programs, not a growth of either
                if r["growth_kind"] != "none":
                    r["growth_kind"], r["one_time"] = "different_programs", []
        devices.append({"device": da.device, "before": os.path.basename(a.path), "after": os.path.basename(b.path),
                        "allocated_before": ra.holders[-1].total, "allocated_after": rb.holders[-1].total,
                        "sites": rows})
        if not different:
            findings.extend(_growth_findings(da.device, rows, opts, b.path, os.path.basename(a.path),
                                             os.path.basename(b.path)))
    for dbn in names_b:
        if dbn not in {d.device for d in a.devices}:
            notes.append(f"{dbn} is only in {b.path}")
    return MemoryDiffSection(a.path, b.path, devices, notes, programs=programs), findings


def _growth_findings(dev: str, rows: list[dict[str, Any]], opts: DiffOptions, source: str, before: str,
                     after: str) -> list[Finding]:
    """GP520 (warning) for steady growth, naming the line that keeps it; GP522 (info) saying what a one-time
    growth is. No leak advice for a growth that one-time causes explain."""
    out: list[Finding] = []
    leaks = 0
    for r in rows:
        if r["growth"] < opts.min_growth:
            break
        loc = SourceLocation(r["file"], r["line"], r["function"]) if r["file"] else None
        change = (f"{fmt_bytes(r['before'])} in {r['blocks_before']} blocks -> {fmt_bytes(r['after'])} in "
                  f"{r['blocks_after']} blocks")
        ev = Evidence("growth", r["growth"], opts.min_growth, "bytes",
                      extra={"before": r["before"], "after": r["after"], "blocks_before": r["blocks_before"],
                             "blocks_after": r["blocks_after"], "growth_kind": r["growth_kind"],
                             "one_time": list(r["one_time"])})
        if r["growth_kind"] == "one_time":
            what = "; ".join(ONE_TIME_CAUSES[c] for c in r["one_time"])
            out.append(Finding(
                code="GP522", name=CODES["GP522"][0], severity=Severity.INFO,
                message=(f"{dev}: {r['site']} holds {fmt_bytes(r['growth'])} more at {after} than at {before} "
                         f"({change}): one-time growth, {what}"),
                advice=("Not a leak: this memory appears once and is reused at every later step. If it does not "
                        "fit, shrink it where it is made (optimizer state in lower precision or sharded, fewer "
                        "parameters on the device, a smaller cache) rather than looking for a kept reference."),
                evidence=(ev,), location=loc, origin="memory", source=source,
            ))
            continue
        if leaks >= opts.max_findings:
            continue
        leaks += 1
        out.append(Finding(
            code="GP520", name=CODES["GP520"][0], severity=Severity.WARNING,
            message=(f"{dev}: {r['site']} holds {fmt_bytes(r['growth'])} more at {after} than at {before} "
                     f"({change}); no one-time cause explains it (steady growth)"),
            advice=("Memory allocated here is not released between the two points: look for tensors kept in a "
                    "list or dict, a loss accumulated without .item()/.detach(), or a cache that only grows."),
            evidence=(ev,), location=loc, origin="memory", source=source,
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

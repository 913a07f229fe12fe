"""Terminal and markdown drawing of the ``memory`` and ``memory-diff`` report sections.

Registered with :mod:`gpuprof.render.sections` on import; the generic
renderers call these for ``report.sections``. Sections arrive as the objects
of :mod:`gpuprof.memory.analysis` / :mod:`gpuprof.memory.diff`; only their
``to_dict()`` form is read, so a section rebuilt from JSON draws the same.

Site labels, file names and notes come from the snapshot, that is from
strangers: every such string is made inert (control characters visible,
rich markup escaped, markdown code spans that cannot be broken out of) and
long sites are cut in the middle, so one huge frame name cannot flood the
terminal.
"""

from __future__ import annotations

from typing import Any

from gpuprof.memory.units import fmt_bytes
from gpuprof.render.layout import emit_table, wrap_text
from gpuprof.render.markdown import md_code, md_escape, md_table
from gpuprof.render.safe import one_line, shorten, visible
from gpuprof.render.sections import register_section, section_dict

__all__ = ["memory_terminal", "memory_markdown", "diff_terminal", "diff_markdown"]

SITE_WIDTH = 400  # allocation sites are cut in the middle beyond this many characters (a hostile frame name)


def _when(v: Any, unit: str, start: Any) -> str:
    """An event time as an offset from the start of the recorded history."""
    if v is None:
        return "-"
    if unit == "event":
        return f"event {int(v)}"
    if start is not None and v <= start:
        return "the start of the history (already at its peak)"
    return f"+{(v - (start or 0)) / 1e6:.6f} s into the history"


def _no_reserved(dev: dict[str, Any]) -> bool:
    """No caching allocator behind this device (the CPU's): every reserved figure is zero or unknown."""
    r = dev["reserved"]
    return not any(r.get(k) for k in ("peak", "initial", "final"))


def device_label(dev: dict[str, Any], devices: list[dict[str, Any]]) -> str:
    """The device's name as the screen shows it: a trace of a CPU-only run says so."""
    name = str(dev["device"])
    if name == "cpu":
        if all(str(d["device"]) == "cpu" for d in devices):
            return "CPU only (no GPU device in the trace)"
        return "cpu (host memory)"
    return name


def _summary_rows(dev: dict[str, Any]) -> list[tuple[str, str]]:
    a, r = dev["allocated"], dev["reserved"]
    u = dev["time_unit"]
    t0 = dev.get("time_start")
    rows = []
    if a["peak"]:  # a peak of 0 B (nothing allocated) has no meaningful time
        rows.append(("peak allocated", f"{fmt_bytes(a['peak'])} at {_when(a['peak_at'], u, t0)}"))
    if not _no_reserved(dev):
        rows.append(("peak reserved", f"{fmt_bytes(r['peak'])} at {_when(r['peak_at'], u, t0)}" if r["peak"] is not None else "unknown"))
    rows.append(("allocated (start -> end)", f"{fmt_bytes(a['initial'])} -> {fmt_bytes(a['final'])}"))
    if not _no_reserved(dev):
        rows.append(("reserved (start -> end)", f"{fmt_bytes(r['initial'])} -> {fmt_bytes(r['final'])}"))
    rows.append(("allocations recorded", f"{dev['num_allocations']:,} in {dev['history_events']:,} events"))
    if dev.get("total_memory"):
        rows.insert(0, ("device memory", fmt_bytes(dev["total_memory"])))
    f = dev["fragmentation"]
    if "reserved" in f:
        rows.append(("free but reserved (now)", f"{fmt_bytes(f['unallocated'])} in {f['free_blocks']} blocks, "
                     f"{f['inactive_split_blocks']} in split segments; largest {fmt_bytes(f['largest_free_block'])}"))
    p = dev["pending_free"]
    if p["deferred_frees"]:
        rows.append(("waiting on other streams", f"{p['deferred_frees']} frees deferred, up to "
                     f"{fmt_bytes(p['max_bytes_waiting'])} at once"))
    return rows


_CAT_LABEL = {"parameters": "parameters", "gradients": "gradients", "optimizer_state": "optimizer state",
              "activations": "activations", "temporaries": "temporaries",
              "library_workspaces": "library workspaces (cuBLAS, cuDNN)",
              "allocator_cache": "allocator cache (reserved, free)", "non_pytorch": "not PyTorch's (NCCL, cuBLAS...)",
              "unattributed": "unattributed (no stack says)"}


def _b(v: Any) -> str:
    return "-" if v is None else fmt_bytes(v)


def category_rows(dev: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(category, at the peak, at the end) rows, then the reserved total; empty when the section has none."""
    now = dev.get("categories")
    if not now:
        return []
    peak = (dev.get("at_peak") or {}).get("categories") or {}
    rows = [(_CAT_LABEL.get(k, k), _b(peak.get(k)), _b(v)) for k, v in now.items()
            if v or peak.get(k)]
    peak_r, now_r = (dev.get("at_peak") or {}).get("reserved_bytes"), dev.get("reserved_bytes")
    if peak_r is not None or now_r is not None:
        rows.append(("= reserved by PyTorch", _b(peak_r), _b(now_r)))
    split = dev.get("allocator_cache_in_split_segments")
    if split:
        rows.append(("  of the cache: in split segments (fragmentation)", "", fmt_bytes(split)))
    return rows


def table_rows(rows: list[dict[str, Any]], key: str) -> list[tuple[str, str, str]]:
    return [(_site(r[key]), fmt_bytes(r["bytes"]), f"{r['share']:.0%}" if r.get("share") is not None else "-")
            for r in rows]


def _site(site: Any) -> str:
    """A site label for a table: visible and cut in the middle (the file and the function both stay)."""
    return shorten(visible(site), SITE_WIDTH)


def _note(text: Any) -> str:
    return shorten(" ".join(str(text).split()), 4 * SITE_WIDTH)


def _print_wrapped(console: Any, text: str, style: str = "", indent: int = 2) -> None:
    from rich.text import Text

    for line in wrap_text(one_line(text), console.width, indent=indent):
        console.print(Text(line, style=style), no_wrap=True, overflow="ignore", crop=False)


def memory_terminal(console: Any, section: Any) -> None:
    """The memory section at ``console.width``: tables laid out by :mod:`gpuprof.render.layout`, so a
    site (``file.py:LINE (function)``) wraps between its parts instead of losing its line number."""
    from rich.text import Text

    d = section_dict(section)
    head = Text("Memory", style="bold")
    head.append(f" ({one_line(d['source_type'])}: {one_line(d['source'])})")
    for line in head.wrap(console, console.width, overflow="fold"):
        console.print(line, no_wrap=True, crop=False)
    for dev in d["devices"]:
        console.print()
        _print_wrapped(console, device_label(dev, d["devices"]), style="bold", indent=0)
        emit_table(console, "", [("", "left"), ("", "wrap")], _summary_rows(dev), header=False)
        if dev["top_sites"]:
            console.print()
            emit_table(console, "Top holders at the peak, by allocation site",
                       [("site", "wrap"), ("bytes", "right"), ("blocks", "right"), ("share", "right")],
                       [(_site(s["site"]), fmt_bytes(s["bytes"]), str(s["blocks"]),
                         f"{s['share']:.0%}" if s["share"] is not None else "-") for s in dev["top_sites"]])
        cats = category_rows(dev)
        if cats:
            console.print()
            emit_table(console, "Memory by category", [("category", "wrap"), ("at the peak", "right"),
                                                       ("at the end", "right")], cats)
        peak = dev.get("at_peak") or {}
        for key, title in (("stages", "At the peak, by stage"), ("modules", "At the peak, by module or compiled graph")):
            if peak.get(key):
                console.print()
                emit_table(console, title, [(key[:-1], "wrap"), ("bytes", "right"), ("share", "right")],
                           table_rows(peak[key], key[:-1]))
        if dev.get("fixes"):
            console.print()
            emit_table(console, "Fixes ranked by the bytes each saves", [("fix", "wrap"), ("saves", "right")],
                       [(_note(f["what"]), fmt_bytes(f["saves_bytes"])) for f in dev["fixes"]])
        if dev["size_classes"]:
            console.print()
            emit_table(console, "At the peak, by size class", [("size class", "left"), ("bytes", "right"), ("blocks", "right")],
                       [(s["class"], fmt_bytes(s["bytes"]), str(s["blocks"])) for s in dev["size_classes"]])
        for o in dev["ooms"]:
            console.print()
            _print_wrapped(console, f"OOM: {fmt_bytes(o['requested'])} requested, {fmt_bytes(o['device_free'])} free, "
                           f"{fmt_bytes(o['allocated'])} allocated, {fmt_bytes(o['reserved'])} reserved at "
                           f"{_site(o['site']['site'])}", style="bold red")
    ph = d.get("pinned_host")
    if ph:
        _print_wrapped(console, f"pinned host memory held by PyTorch: {fmt_bytes(ph.get('allocated_bytes'))} "
                       f"({fmt_bytes(ph.get('active_bytes'))} in use)", indent=0)
    for n in d["notes"]:
        _print_wrapped(console, f"note: {_note(n)}", style="dim")


MD_SITE_WIDTH = 100  # report.md's site cells are cut in the middle beyond this (a table row per site)


def _md_site(site: Any) -> str:
    return md_code(shorten(visible(site), MD_SITE_WIDTH), cell=True)


def memory_markdown(section: Any) -> str:
    d = section_dict(section)
    parts = [f"## Memory\n\n{md_escape(d['source_type'])}: {md_code(d['source'])}"]
    for dev in d["devices"]:
        parts.append(f"### {md_escape(device_label(dev, d['devices']))}")
        parts.append(md_table(["metric", "value"], [[md_escape(k), md_escape(v)] for k, v in _summary_rows(dev)]))
        if dev["top_sites"]:
            parts.append("**Top holders at the peak, by allocation site**")
            parts.append(md_table(["site", "bytes", "blocks", "share"], [
                [_md_site(s["site"]), fmt_bytes(s["bytes"]), str(s["blocks"]),
                 f"{s['share']:.0%}" if s["share"] is not None else "-"] for s in dev["top_sites"]]))
        cats = category_rows(dev)
        if cats:
            parts.append("**Memory by category**")
            parts.append(md_table(["category", "at the peak", "at the end"],
                                   [[md_escape(c) for c in r] for r in cats]))
        peak = dev.get("at_peak") or {}
        for key, title in (("stages", "At the peak, by stage"), ("modules", "At the peak, by module or compiled graph")):
            if peak.get(key):
                parts.append(f"**{title}**")
                parts.append(md_table([key[:-1], "bytes", "share"], [
                    [md_code(r[0], cell=True), md_escape(r[1]), md_escape(r[2])] for r in table_rows(peak[key], key[:-1])]))
        if dev.get("fixes"):
            parts.append("**Fixes ranked by the bytes each saves**")
            parts.append(md_table(["fix", "saves"], [[md_escape(_note(f["what"])), fmt_bytes(f["saves_bytes"])]
                                                      for f in dev["fixes"]]))
        if dev["size_classes"]:
            parts.append("**At the peak, by size class**")
            parts.append(md_table(["size class", "bytes", "blocks"], [
                [md_escape(s["class"]), fmt_bytes(s["bytes"]), str(s["blocks"])] for s in dev["size_classes"]]))
        for o in dev["ooms"]:
            parts.append(f"**OOM**: {fmt_bytes(o['requested'])} requested, {fmt_bytes(o['device_free'])} free, "
                         f"{fmt_bytes(o['allocated'])} allocated, {fmt_bytes(o['reserved'])} reserved at "
                         f"{md_code(_site(o['site']['site']))}")
    ph = d.get("pinned_host")
    if ph:
        parts.append(f"Pinned host memory held by PyTorch: {fmt_bytes(ph.get('allocated_bytes'))} "
                     f"({fmt_bytes(ph.get('active_bytes'))} in use)")
    parts += [f"_note: {md_escape(_note(n))}_" for n in d["notes"]]
    return "\n\n".join(parts) + "\n"


def _growth_kind(r: dict[str, Any]) -> str:
    kind = r.get("growth_kind")
    if kind == "one_time":
        return "one-time: " + ", ".join(str(c).replace("_", " ") for c in r.get("one_time") or ())
    if kind == "different_programs":
        return "different programs"
    return "steady" if kind == "steady" else ""


def _diff_rows(dev: dict[str, Any]) -> list[list[str]]:
    return [[_site(r["site"]), fmt_bytes(r["growth"]), fmt_bytes(r["before"]), fmt_bytes(r["after"]),
             f"{r['blocks_before']} -> {r['blocks_after']}", _growth_kind(r)] for r in dev["sites"]]


_DIFF_HEAD = ["site", "growth", "before", "after", "blocks", "kind"]


def diff_terminal(console: Any, section: Any) -> None:
    d = section_dict(section)
    _print_wrapped(console, f"Memory diff: {d['before']} -> {d['after']}", style="bold", indent=0)
    for dev in d["devices"]:
        console.print()
        emit_table(console, f"{dev['device']}: sites ranked by growth ({dev['before']} -> {dev['after']})",
                   [(c, "wrap" if c in ("site", "kind") else "right") for c in _DIFF_HEAD], _diff_rows(dev))
    for n in d["notes"]:
        _print_wrapped(console, f"note: {_note(n)}", style="dim")


def diff_markdown(section: Any) -> str:
    d = section_dict(section)
    parts = [f"## Memory diff\n\n{md_code(d['before'])} -> {md_code(d['after'])}"]
    for dev in d["devices"]:
        parts.append(f"### {md_escape(dev['device'])} ({md_escape(dev['before'])} -> {md_escape(dev['after'])})")
        rows = [[md_code(r[0], cell=True), *(md_escape(c) for c in r[1:])] for r in _diff_rows(dev)]
        parts.append(md_table(_DIFF_HEAD, rows))
    parts += [f"_note: {md_escape(_note(n))}_" for n in d["notes"]]
    return "\n\n".join(parts) + "\n"


_RANK_HEAD = ["rank (file, device)", "peak allocated", "peak reserved", "allocated at", "OOM request"]


def _rank_rows(d: dict[str, Any]) -> list[list[str]]:
    return [[_site(f"{r['rank']}: {r['file']} {r['device']}"), fmt_bytes(r["peak_allocated"]), _b(r["peak_reserved"]),
             f"{fmt_bytes(r['allocated_at_moment'])} ({'OOM' if r['moment'] == 'oom' else 'peak'})",
             _b(r["oom_requested"])] for r in d["ranks"]]


def ranks_terminal(console: Any, section: Any) -> None:
    d = section_dict(section)
    console.print()
    emit_table(console, "Across ranks", [(c, "wrap" if i == 0 else "right") for i, c in enumerate(_RANK_HEAD)],
               _rank_rows(d))
    _print_wrapped(console, _note(visible(d["summary"])), style="bold", indent=0)


def ranks_markdown(section: Any) -> str:
    d = section_dict(section)
    rows = [[md_code(r[0], cell=True), *(md_escape(c) for c in r[1:])] for r in _rank_rows(d)]
    return "\n\n".join(["## Across ranks", md_table(_RANK_HEAD, rows), md_escape(_note(d["summary"]))]) + "\n"


register_section("memory", terminal=memory_terminal, markdown=memory_markdown)
register_section("memory-ranks", terminal=ranks_terminal, markdown=ranks_markdown)
register_section("memory-diff", terminal=diff_terminal, markdown=diff_markdown)

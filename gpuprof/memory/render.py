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
from gpuprof.render.markdown import md_code, md_escape
from gpuprof.render.safe import clip, shorten, visible
from gpuprof.render.sections import register_section

__all__ = ["memory_terminal", "memory_markdown", "diff_terminal", "diff_markdown"]

SITE_WIDTH = 100  # allocation sites are cut in the middle beyond this many characters


def _d(section: Any) -> dict[str, Any]:
    return section.to_dict() if hasattr(section, "to_dict") else dict(section)


def _when(v: Any, unit: str, start: Any) -> str:
    """An event time as an offset from the start of the recorded history."""
    if v is None:
        return "-"
    if unit == "event":
        return f"event {int(v)}"
    return f"+{(v - (start or 0)) / 1e6:.6f} s into the history"


def _summary_rows(dev: dict[str, Any]) -> list[tuple[str, str]]:
    a, r = dev["allocated"], dev["reserved"]
    u = dev["time_unit"]
    t0 = dev.get("time_start")
    rows = [
        ("peak allocated", f"{fmt_bytes(a['peak'])} at {_when(a['peak_at'], u, t0)}"),
        ("peak reserved", f"{fmt_bytes(r['peak'])} at {_when(r['peak_at'], u, t0)}" if r["peak"] is not None else "unknown"),
        ("allocated (start -> end)", f"{fmt_bytes(a['initial'])} -> {fmt_bytes(a['final'])}"),
        ("reserved (start -> end)", f"{fmt_bytes(r['initial'])} -> {fmt_bytes(r['final'])}"),
        ("allocations recorded", f"{dev['num_allocations']:,} in {dev['history_events']:,} events"),
    ]
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


def _esc(text: Any) -> str:
    # Site labels, paths and notes may hold "[...]" (e.g. "[memory]"), which rich would read as markup,
    # and control characters, which the terminal would obey.
    from rich.markup import escape

    return escape(clip(text))


def _site(site: Any) -> str:
    """A site label for a table: visible and cut in the middle (the file and the function both stay)."""
    return shorten(visible(site), SITE_WIDTH)


def _note(text: Any) -> str:
    return shorten(" ".join(str(text).split()), 4 * SITE_WIDTH)


def memory_terminal(console: Any, section: Any) -> None:
    from rich.table import Table

    d = _d(section)
    console.print(f"[bold]Memory[/bold] ({_esc(d['source_type'])}: {_esc(d['source'])})")
    for dev in d["devices"]:
        t = Table(title=_esc(dev["device"]), show_header=False, title_justify="left")
        t.add_column("metric")
        t.add_column("value")
        for k, v in _summary_rows(dev):
            t.add_row(_esc(k), _esc(v))
        console.print(t)
        if dev["top_sites"]:
            h = Table(title="Top holders at the peak, by allocation site", title_justify="left")
            for c in ("site", "bytes", "blocks", "share"):
                h.add_column(c, justify="right" if c != "site" else "left")
            for s in dev["top_sites"]:
                h.add_row(_esc(_site(s["site"])), fmt_bytes(s["bytes"]), str(s["blocks"]),
                          f"{s['share']:.0%}" if s["share"] is not None else "-")
            console.print(h)
        if dev["size_classes"]:
            sc = Table(title="At the peak, by size class", title_justify="left")
            for col in ("size class", "bytes", "blocks"):
                sc.add_column(col, justify="right" if col != "size class" else "left")
            for s in dev["size_classes"]:
                sc.add_row(_esc(s["class"]), fmt_bytes(s["bytes"]), str(s["blocks"]))
            console.print(sc)
        for o in dev["ooms"]:
            console.print(f"[bold red]OOM[/bold red]: {fmt_bytes(o['requested'])} requested, "
                          f"{fmt_bytes(o['device_free'])} free, {fmt_bytes(o['allocated'])} allocated, "
                          f"{fmt_bytes(o['reserved'])} reserved at {_esc(_site(o['site']['site']))}")
    for n in d["notes"]:
        console.print(f"[dim]note: {_esc(_note(n))}[/dim]")


def _md_table(head: list[str], rows: list[list[str]]) -> str:
    """A GFM table of cells that are already markdown (escaped with md_escape or md_code(cell=True))."""
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def _md_site(site: Any) -> str:
    return md_code(_site(site), cell=True)


def memory_markdown(section: Any) -> str:
    d = _d(section)
    parts = [f"## Memory\n\n{md_escape(d['source_type'])}: {md_code(d['source'])}"]
    for dev in d["devices"]:
        parts.append(f"### {md_escape(dev['device'])}")
        parts.append(_md_table(["metric", "value"], [[md_escape(k), md_escape(v)] for k, v in _summary_rows(dev)]))
        if dev["top_sites"]:
            parts.append("**Top holders at the peak, by allocation site**")
            parts.append(_md_table(["site", "bytes", "blocks", "share"], [
                [_md_site(s["site"]), fmt_bytes(s["bytes"]), str(s["blocks"]),
                 f"{s['share']:.0%}" if s["share"] is not None else "-"] for s in dev["top_sites"]]))
        if dev["size_classes"]:
            parts.append("**At the peak, by size class**")
            parts.append(_md_table(["size class", "bytes", "blocks"], [
                [md_escape(s["class"]), fmt_bytes(s["bytes"]), str(s["blocks"])] for s in dev["size_classes"]]))
        for o in dev["ooms"]:
            parts.append(f"**OOM**: {fmt_bytes(o['requested'])} requested, {fmt_bytes(o['device_free'])} free, "
                         f"{fmt_bytes(o['allocated'])} allocated, {fmt_bytes(o['reserved'])} reserved at "
                         f"{md_code(_site(o['site']['site']))}")
    parts += [f"_note: {md_escape(_note(n))}_" for n in d["notes"]]
    return "\n\n".join(parts) + "\n"


def _diff_rows(dev: dict[str, Any]) -> list[list[str]]:
    return [[_site(r["site"]), fmt_bytes(r["growth"]), fmt_bytes(r["before"]), fmt_bytes(r["after"]),
             f"{r['blocks_before']} -> {r['blocks_after']}"] for r in dev["sites"]]


_DIFF_HEAD = ["site", "growth", "before", "after", "blocks"]


def diff_terminal(console: Any, section: Any) -> None:
    from rich.table import Table

    d = _d(section)
    console.print(f"[bold]Memory diff[/bold]: {_esc(d['before'])} -> {_esc(d['after'])}")
    for dev in d["devices"]:
        t = Table(title=_esc(f"{dev['device']}: sites ranked by growth ({dev['before']} -> {dev['after']})"),
                  title_justify="left")
        for c in _DIFF_HEAD:
            t.add_column(c, justify="left" if c == "site" else "right")
        for r in _diff_rows(dev):
            t.add_row(*(_esc(c) for c in r))
        console.print(t)
    for n in d["notes"]:
        console.print(f"[dim]note: {_esc(_note(n))}[/dim]")


def diff_markdown(section: Any) -> str:
    d = _d(section)
    parts = [f"## Memory diff\n\n{md_code(d['before'])} -> {md_code(d['after'])}"]
    for dev in d["devices"]:
        parts.append(f"### {md_escape(dev['device'])} ({md_escape(dev['before'])} -> {md_escape(dev['after'])})")
        rows = [[md_code(r[0], cell=True), *(md_escape(c) for c in r[1:])] for r in _diff_rows(dev)]
        parts.append(_md_table(_DIFF_HEAD, rows))
    parts += [f"_note: {md_escape(_note(n))}_" for n in d["notes"]]
    return "\n\n".join(parts) + "\n"


register_section("memory", terminal=memory_terminal, markdown=memory_markdown)
register_section("memory-diff", terminal=diff_terminal, markdown=diff_markdown)

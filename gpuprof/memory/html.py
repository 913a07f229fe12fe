"""``gpuprof memory FILE --html OUT.html``: one self-contained page, no network access.

The page shows, per device, allocated memory stacked by allocation site, the
allocated and reserved totals as lines, and the top-holders table. Drag to
zoom into a time range, wheel to zoom around the cursor, double-click to
reset; hovering shows the totals and the allocation stack of the site under
the cursor.

It stays responsive on snapshots with millions of events because the
aggregation happens here, in Python: the history is cut into at most
``points`` time buckets (each keeps its highest moment, so peaks survive)
and sites beyond the ``sites`` largest at the peak are summed into "other".
The page then draws a few thousand numbers, whatever the input size. All
JavaScript and CSS are inline; the page loads nothing.

Every name on the page comes from the input file, i.e. from a stranger, so
the page is inert by construction (see :mod:`gpuprof.memory.htmlsafe`): the
data is an escaped JSON document, the script builds the DOM with
``textContent``/``setAttribute`` only, and the policy allows that script and
stylesheet by hash and nothing else.
"""

from __future__ import annotations

import os
from typing import Any

from gpuprof.atomic import write_output
from gpuprof.findings import Finding
from gpuprof.memory.analysis import DeviceAnalysis
from gpuprof.memory.frames import SiteTable
from gpuprof.memory.htmlsafe import fill_template, page_head, script_json, text_for_html
from gpuprof.memory.model import MemoryData
from gpuprof.memory.replay import replay_totals, site_series
from gpuprof.render import web

__all__ = ["build_page_data", "render_html", "write_html"]

_PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7",
            "#9c755f", "#86bcb6", "#d37295", "#a0cbe8"]
_OTHER = "#bab0ac"
_PRE = "#d4d4d4"


def build_page_data(data: MemoryData, analyses: list[DeviceAnalysis], findings: list[Finding],
                    points: int = 1500, sites: int = 12) -> dict[str, Any]:
    """The aggregated numbers the page draws (also what tests inspect)."""
    devices = []
    for da in analyses:
        dm = da.dm
        peak = da.replay.holders[da.peak_moment]
        ranked = [sid for sid, _ in sorted(peak.by_site.items(), key=lambda kv: -kv[1][0])
                  if sid > SiteTable.PRE_TRACE][:sites]
        slot_of = {sid: i for i, sid in enumerate(ranked)}
        tot = replay_totals(dm, buckets=points)
        times, rows = site_series(dm, slot_of, len(ranked), points)
        t0 = dm.time[0] if len(dm) else 0.0
        unit = 1e6 if dm.has_time else 1.0
        alloc = [p[1] for p in tot.timeline]
        reserved = [p[2] for p in tot.timeline]
        if len(rows) != len(alloc):  # both bucket the same events the same way; guard anyway
            rows = rows[: len(alloc)] + [[0] * (len(ranked) + 1)] * max(0, len(alloc) - len(rows))
        # Blocks from before the history are in the totals but in no site: show them as their own band.
        pre = [max(0, a - sum(r)) for a, r in zip(alloc, rows)]
        slots = [{"label": data.sites.sites[sid].label, "stack": list(data.sites.sites[sid].stack),
                  "color": _PALETTE[i % len(_PALETTE)]} for i, sid in enumerate(ranked)]
        slots.append({"label": "other sites", "stack": [], "color": _OTHER})
        slots.append({"label": "allocated before the recorded history / unattributed", "stack": [], "color": _PRE})
        series = [r + [p] for r, p in zip(rows, pre)]
        # No history, or a single event (one point draws no line): the page shows the segments instead of a timeline
        no_history = len(dm) < 2
        if no_history:
            h = da.replay.holders[-1]
            row = [h.by_site.get(sid, [0])[0] for sid in ranked]
            row.append(h.total - sum(row))
            row.append(0)
            times, series, alloc, reserved = [0.0], [row], [h.total], [da.totals.final_reserved]
            t0 = 0.0
        devices.append({
            "no_history": no_history,
            "segments": _segment_view(dm.segments) if no_history and dm.segments else [],
            "device": dm.device,
            "time_unit": "s" if dm.has_time else "event",
            "t": [round((x - t0) / unit, 6) for x in times][: len(series)],
            "allocated": alloc[: len(series)],
            "reserved": reserved[: len(series)],
            "slots": slots,
            "series": series,
            "total_memory": dm.total_memory,
            "top": [{"site": r["site"], "bytes": r["bytes"], "blocks": r["blocks"], "share": r["share"],
                     "stack": r["stack"]} for r in da.top_sites],
            # failed allocations, on the chart's time axis (at most the 3 the analysis keeps)
            "ooms": [{"t": round((o["time"] - t0) / unit, 6),
                      "requested": o["requested"], "site": o["site"].get("site", "")} for o in da.ooms],
            # memory by category (at the peak and at snapshot time), by stage and module at the peak, the fixes
            "categories": {"peak": da.at_peak.get("categories"), "peak_reserved": da.at_peak.get("reserved_bytes"),
                           "now": da.state.get("categories"), "now_reserved": da.state.get("reserved_bytes")},
            "stages": da.at_peak.get("stages") or [],
            "modules": da.at_peak.get("modules") or [],
            "fixes": [{"what": f["what"], "saves": f["saves_bytes"]} for f in da.fixes],
            "peak_allocated": da.totals.peak_allocated,
            "peak_reserved": da.totals.peak_reserved,
            "events": len(dm),
        })
    return {"source": data.path, "source_type": data.source_type, "devices": devices,
            "findings": [{"code": f.code, "severity": f.severity.value, "message": f.message} for f in findings],
            "notes": list(data.notes)}


_STATE = {"active_allocated": 0, "active_pending_free": 2, "inactive": 1}
MAX_SEGMENTS = 256  # segments drawn (the largest); the rest summed in the note
MAX_BLOCKS = 128  # blocks drawn per segment; the rest merged into one "more blocks" piece


def _segment_view(segments: Any) -> list[dict[str, Any]]:
    """The allocator's segments at snapshot time, largest first: size and blocks ``[size, state]`` (0 allocated,
    1 free, 2 freed but waiting on another stream), for a snapshot without history."""
    out = []
    for seg in sorted(segments, key=lambda g: -g.total_size)[:MAX_SEGMENTS]:
        blocks = [[b.size, _STATE.get(b.state, 0)] for b in seg.blocks[:MAX_BLOCKS]]
        rest = seg.blocks[MAX_BLOCKS:]
        if rest:
            blocks.append([sum(b.size for b in rest), 3])  # 3: more blocks, not drawn one by one
        out.append({"size": seg.total_size, "blocks": blocks, "stream": seg.stream})
    return out


def render_html(page: dict[str, Any]) -> str:
    """The page for ``page`` (from :func:`build_page_data`): inert whatever names the data holds.

    Only two values are substituted, in one pass: the ``<title>`` text
    (HTML-escaped) and the JSON document (see :func:`script_json`). Every
    other piece of text on the page is put there by the page's script with
    ``textContent``.
    """
    from gpuprof.render.safe import clip

    # the file's last part only (no directory of this machine), control characters as visible escapes
    title = f"gpuprof memory: {clip(os.path.basename(str(page['source']).rstrip('/')) or page['source'], 120)}"
    return fill_template(_TEMPLATE, {"TITLE": text_for_html(title), "DATA": script_json(dict(page, title=title))})


def write_html(data: MemoryData, analyses: list[DeviceAnalysis], findings: list[Finding], out: str,
               points: int = 1500, sites: int = 12) -> None:
    text = render_html(build_page_data(data, analyses, findings, points, sites))
    write_output(out, text, "the HTML")  # atomic: a full disk leaves the previous page intact


# The stylesheet and the script are package files (gpuprof/render/web/memory.css, memory.js), constants of the
# package: the policy allows them by hash, and nothing else. Data reaches the DOM only through textContent, Text
# nodes (append) and setAttribute of fixed attribute names; there is no innerHTML, insertAdjacentHTML, outerHTML
# or document.write in the script.
_STYLE = web.read("memory.css")
_SCRIPT = web.read("memory.js")

# __TITLE__ and __DATA__ are the only substitutions (one pass, fill_template). The policy must come before
# anything it governs, so it is the first thing after the charset.
_TEMPLATE = (page_head(_SCRIPT, _STYLE) + """<h1 id="title"></h1><div class="sum" id="sum"></div>
<div id="findings"></div><ul class="notes" id="notes"></ul>
<label>Device <select id="dev"></select></label>
<span class="hint">drag: zoom to a range &middot; wheel: zoom &middot; double-click: reset &middot; hover: allocation stack</span>
<div id="wrap"><canvas id="c" width="1100" height="420"></canvas><div id="tip"></div></div>
<div id="legend"></div><div id="segs"></div>
<div id="fixes"></div>
<h2>Memory by category</h2><table id="cats"></table>
<h2>At the peak, by stage and by module or compiled graph</h2><table id="stages"></table><table id="modules"></table>
<h2>Top holders at the peak</h2><table id="top"></table>
<script id="data" type="application/json">__DATA__</script>
<script>""" + _SCRIPT + """</script></body></html>
""")


def inline_script_hashes() -> list[str]:
    """The CSP hashes (``'sha256-...'``) of the page's inline script: for a server that sends its own policy header."""
    from gpuprof.memory.htmlsafe import csp_hash

    return [csp_hash(_SCRIPT)]

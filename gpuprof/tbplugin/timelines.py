"""The tab's timelines, kept out of the run answer and fetched one trace at a time.

A trace's timeline (``traces[].timeline`` of the report, docs/views.md
"Timeline") is a few hundred kB: a 64-rank run's answer carrying all of them
would be ~20 MB before anything is drawn, and most are never looked at. So the
analysis of a trace (:func:`gpuprof.tbplugin.data.analyse_trace_file`) keeps its
timeline beside the summary, cached with it by the analysis store; the run
answer carries only :func:`timeline_ref` per trace (what the page needs to ask
for it), and the ``timeline`` route answers one trace's timeline when the user
opens it.

The "Collectives per rank" view needs only the collective lanes of every rank:
:func:`collective_lanes` keeps those (and the names they use) once, at analysis
time, for the ``timeline_ranks`` route. The page merges them with
``GP.timeline.ranks``, the code the ``--html`` page uses on whole timelines; the
result is the same, since that merge reads nothing else.
"""

from __future__ import annotations

from typing import Any

__all__ = ["collective_lanes", "timeline_ref"]


def timeline_ref(file: str, timeline: dict[str, Any] | None, ranks: dict[str, Any] | None) -> dict[str, Any] | None:
    """What the run answer says of a trace's timeline: how to ask for it and its size; ``None`` without one.

    ``file`` is the trace as the run answer names it (relative to the logdir),
    the ``trace`` parameter of the ``timeline`` route.
    """
    if not isinstance(timeline, dict):
        return None
    lanes = timeline.get("lanes")
    return {"trace": file, "lanes": len(lanes) if isinstance(lanes, list) else 0,
            "events_kept": timeline.get("events_kept", 0), "collectives": ranks is not None}


def collective_lanes(timeline: dict[str, Any] | None) -> dict[str, Any] | None:
    """``timeline`` with only its collective lanes, its name table cut to the names they use; ``None`` without any.

    Everything ``GP.timeline.ranks`` reads is kept (kinds, steps, span,
    resolution, each lane's id, kind, label, total and events); event rows keep
    their layout, their name index renumbered into the smaller table.
    """
    if not isinstance(timeline, dict):
        return None
    lanes = [ln for ln in timeline.get("lanes") or [] if isinstance(ln, dict) and ln.get("kind") == "collective"]
    if not lanes:
        return None
    names = timeline.get("names") or []
    index: dict[int, int] = {}  # old name index -> new
    kept: list[str] = []
    out_lanes = []
    for ln in lanes:
        events = []
        for row in ln.get("events") or []:
            old = row[2]
            if old not in index:
                index[old] = len(kept)
                kept.append(names[old] if isinstance(old, int) and 0 <= old < len(names) else "")
            events.append([row[0], row[1], index[old], *row[3:]])
        out_lanes.append({**ln, "events": events})
    return {**{k: v for k, v in timeline.items() if k not in ("lanes", "names", "markers", "critical")},
            "names": kept, "lanes": out_lanes, "markers": [], "critical": [], "critical_step": None}

"""Links between the findings of one report that the rules cannot make while they run.

GP101 splits the GPU's idle time into parts (a runtime call, an operator, a
Python frame); another finding of the same trace often explains a part (a
GP203 host sync, a GP206 start-up call). GP101 cannot see the other rules'
findings while it runs, so the link is made once the report's findings are
known (:func:`gpuprof.flow.finish`), as data: the part's ``explained_by``
codes in its evidence and one :class:`~gpuprof.findings.Link` per part and
code on the finding. The message is left as the rule wrote it; renderers draw
the links (:func:`gpuprof.render.format.linked_message`).
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

from gpuprof.findings import Finding, Link, SourceLocation

__all__ = ["link_idle_parts"]


def link_idle_parts(findings: Sequence[Finding]) -> list[Finding]:
    """``findings`` with each GP101 idle part linked to the codes of the findings that explain it.

    A finding of the same trace explains a part when one of its evidence
    events has the part's name (a runtime call, an operator), its evidence
    names it as its ``call``, or, for a Python frame, its source location is
    that frame's file and function. Idempotent: links made before are replaced.
    """
    from gpuprof.trace.stacks import parse_frame

    out = []
    for f in findings:
        ev = next((e for e in f.evidence if e.metric == "idle_parts_us_per_step"), None) if f.code == "GP101" else None
        if ev is None or not ev.extra.get("parts"):
            out.append(f)
            continue
        others = [o for o in findings if o.code != "GP101" and o.source == f.source]
        parts = []
        links = [k for k in f.links if k.kind != "explained_by"]
        for part in ev.extra["parts"]:
            frame = parse_frame(part["name"]) if part["kind"] == "python" else None
            codes = sorted({o.code for o in others if _explains(o, part["name"], frame)})
            parts.append({**part, "explained_by": codes})
            links += [Link("explained_by", c, part=part.get("label") or part["name"]) for c in codes]
        evidence = tuple(dataclasses.replace(e, extra={**e.extra, "parts": parts}) if e is ev else e for e in f.evidence)
        out.append(dataclasses.replace(f, evidence=evidence, links=tuple(links)))
    return out


def _explains(o: Finding, name: str, frame: SourceLocation | None) -> bool:
    if frame is not None:
        loc = o.location
        return loc is not None and loc.function == frame.function and (
            loc.file == frame.file or loc.file.endswith("/" + frame.file) or frame.file.endswith("/" + loc.file))
    for e in o.evidence:
        if e.extra.get("call") == name or any(r.name == name for r in e.events):
            return True
    return False

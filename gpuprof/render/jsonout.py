"""JSON rendering: ``Report.to_dict()`` as indented JSON (schema in docs/report-schema.md)."""

from __future__ import annotations

import math
import os
import re
from typing import Any

import msgspec

from gpuprof.report import Report

__all__ = ["render_json", "report_json_bytes", "json_safe"]


def json_safe(obj: Any) -> Any:
    """``obj`` with every NaN/infinite float (nested in dicts, lists, tuples) replaced by None.

    JSON has no NaN/Infinity, so an undefined number is written as null.
    msgspec's encoder does that by itself (the report JSON, the annotated
    trace's events); this is for writers that refuse NaN instead
    (``json.dumps(..., allow_nan=False)`` in the memory page).
    """
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj


_TOKEN = re.compile(rb'"gpuprof-timeline-[0-9a-f]{32}"')
SPLICE_MAX_BYTES = 32 << 20  # reports above this are not spliced (a second copy of them in memory)


def report_json_bytes(report: Report) -> bytes:
    """The report as indented JSON; each trace's timeline compact, on one line.

    A timeline is thousands of short event rows (``[start, dur, name, kind, depth, count]``): indented, each
    number would take a line of its own and the timeline three times the bytes. So each is encoded compact
    and put in the indented text in place of a random token (one pass over the text).
    """
    doc = report.to_dict()
    compact: dict[bytes, bytes] = {}
    kept: list[tuple[dict[str, Any], Any]] = []
    for t in doc.get("traces", []):
        if isinstance(t, dict) and t.get("timeline") is not None:
            # what secrets.token_hex(16) gives, without importing secrets (hmac, hashlib, OpenSSL: ~3 ms)
            token = f"gpuprof-timeline-{os.urandom(16).hex()}"
            compact[f'"{token}"'.encode()] = msgspec.json.encode(t["timeline"])
            kept.append((t, t["timeline"]))
            t["timeline"] = token
    # msgspec writes NaN and infinities as null, as json_safe would: no scrubbing pass needed
    out = msgspec.json.format(msgspec.json.encode(doc), indent=2)
    if not compact:
        return out
    if len(out) > SPLICE_MAX_BYTES:
        # a huge report (hostile names of tens of MB): splicing would hold a second copy of it; the timelines
        # (bounded, a few hundred kB) are written indented instead, the text encoded once more after freeing it
        del out
        for t, timeline in kept:
            t["timeline"] = timeline
        return msgspec.json.format(msgspec.json.encode(doc), indent=2)
    return _TOKEN.sub(lambda m: compact.get(m.group(), m.group()), out)


def render_json(report: Report) -> str:
    return report_json_bytes(report).decode("utf-8") + "\n"

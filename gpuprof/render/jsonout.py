"""JSON rendering: ``Report.to_dict()`` as indented JSON (schema in docs/report-schema.md)."""

from __future__ import annotations

import math
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


def report_json_bytes(report: Report) -> bytes:
    # msgspec writes NaN and infinities as null, as json_safe would: no scrubbing pass needed
    return msgspec.json.format(msgspec.json.encode(report.to_dict()), indent=2)


def render_json(report: Report) -> str:
    return report_json_bytes(report).decode("utf-8") + "\n"

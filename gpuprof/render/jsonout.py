"""JSON rendering: ``Report.to_dict()`` as indented JSON (schema in docs/report-schema.md)."""

from __future__ import annotations

import math
from typing import Any

import msgspec

from gpuprof.report import Report

__all__ = ["render_json", "report_json_bytes", "json_safe"]


def json_safe(obj: Any) -> Any:
    """``obj`` with every NaN/infinite float (nested in dicts, lists, tuples) replaced by None.

    JSON has no NaN/Infinity, so an undefined number is written as null; the
    report JSON and the annotated trace's new events both go through this.
    """
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj


def report_json_bytes(report: Report) -> bytes:
    return msgspec.json.format(msgspec.json.encode(json_safe(report.to_dict())), indent=2)


def render_json(report: Report) -> str:
    return report_json_bytes(report).decode("utf-8") + "\n"

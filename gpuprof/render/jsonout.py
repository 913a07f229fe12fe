"""JSON rendering: ``Report.to_dict()`` as indented JSON (schema in docs/report-schema.md)."""

from __future__ import annotations

import math
from typing import Any

import msgspec

from gpuprof.report import Report

__all__ = ["render_json", "report_json_bytes"]


def _finite(obj: Any) -> Any:
    # JSON has no NaN/Infinity; a metric that is undefined is written as null.
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def report_json_bytes(report: Report) -> bytes:
    return msgspec.json.format(msgspec.json.encode(_finite(report.to_dict())), indent=2)


def render_json(report: Report) -> str:
    return report_json_bytes(report).decode("utf-8") + "\n"

"""Rank summaries in JSON reports: written by one analysis, merged by a later one.

A cluster analyses each node's ranks where the traces are
(``gpuprof analyze node3/ --format json -o node3.json``); the report carries
a ``rank_summaries`` section with every rank's
:class:`~gpuprof.distributed.summary.RankSummary` (a few KB each). Then one
``gpuprof analyze node*.json`` merges them into the cross-rank view without
moving any trace.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from gpuprof.distributed.summary import SUMMARY_VERSION, RankSummary
from gpuprof.errors import InputError

__all__ = ["RankSummaries", "is_report_file", "summaries_from_report", "KIND"]

KIND = "rank_summaries"
_PEEK = 512
MAX_REPORT_BYTES = 1 << 30  # a report this big is not one gpuprof wrote for a merge


@dataclass
class RankSummaries:
    """The ``rank_summaries`` report section: the inputs of a later cross-rank merge."""

    kind = KIND
    summaries: list[RankSummary] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"version": SUMMARY_VERSION, "ranks": [msgspec.to_builtins(s) for s in self.summaries]}


def is_report_file(path: str | os.PathLike[str]) -> bool:
    """True for a JSON report gpuprof wrote (uncompressed, ``schema_version`` near the start), not a trace."""
    p = Path(path)
    if not p.name.endswith(".json") or not p.is_file():
        return False
    try:
        with open(p, "rb") as f:
            head = f.read(_PEEK)
    except OSError:
        return False
    return b'"schema_version"' in head and b'"traceEvents"' not in head


def summaries_from_report(path: str | os.PathLike[str]) -> list[RankSummary]:
    """The rank summaries a JSON report carries; InputError (one line) when it has none or is malformed."""
    p = Path(path)
    try:
        if p.stat().st_size > MAX_REPORT_BYTES:
            raise InputError(p, f"report larger than {MAX_REPORT_BYTES >> 20} MiB")
        data = json.loads(p.read_bytes())
    except (OSError, ValueError, RecursionError) as err:
        raise InputError(p, f"unreadable gpuprof report ({type(err).__name__}: {err})") from None
    sections = data.get("sections") if isinstance(data, dict) else None
    found = [s for s in sections or () if isinstance(s, dict) and s.get("kind") == KIND]
    if not found:
        raise InputError(p, "a gpuprof report without rank summaries (analyse a trace with distributedInfo, "
                            "or a gpuprof version that writes them)")
    out: list[RankSummary] = []
    for s in found:
        if s.get("version") != SUMMARY_VERSION:
            raise InputError(p, f"rank summaries of version {s.get('version')!r}; this gpuprof reads {SUMMARY_VERSION}")
        try:
            out.extend(msgspec.convert(r, RankSummary) for r in s.get("ranks", ()))
        except msgspec.ValidationError as err:
            raise InputError(p, f"malformed rank summary: {err}") from None
    return out

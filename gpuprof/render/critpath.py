"""The critical path and the what-if as text: the rows and lines every renderer shows the same way.

The figures are the report's (``traces[].critical_path``, ``findings[].what_if_*``,
docs/critical-path.md); this only picks the top parts and words them.
"""

from __future__ import annotations

from gpuprof.findings import Finding
from gpuprof.report import TraceSummary
from gpuprof.units import fmt_pct, fmt_us

__all__ = ["PATH_LABELS", "TOP_PARTS", "critical_rows", "fmt_what_if", "host_ahead_line"]

TOP_PARTS = 6  # the section is short: the largest parts, the rest summed

PATH_LABELS = {"operator": "host op", "kernel": "kernel", "copy": "copy", "sync_wait": "sync wait",
               "data_wait": "data wait", "launch_gap": "launch", "idle": "idle"}


def critical_rows(t: TraceSummary, top: int = TOP_PARTS) -> list[tuple[str, str, str, str]]:
    """``(kind, name, time per step, share of the path)`` of the largest parts, then one row for the rest."""
    cp = t.critical_path
    if cp is None or cp.length_us <= 0 or not cp.parts:
        return []
    rows = [(PATH_LABELS.get(p.kind, p.kind), p.name, fmt_us(p.us), fmt_pct(p.us / cp.length_us)) for p in cp.parts[:top]]
    rest = sum(p.us for p in cp.parts[top:])
    if len(cp.parts) > top and rest > 0:
        rows.append(("", f"{len(cp.parts) - top} more parts", fmt_us(rest), fmt_pct(rest / cp.length_us)))
    return rows


def host_ahead_line(t: TraceSummary) -> str | None:
    """``The host ran 12.3 ms ahead of the GPU ...`` under the critical path (its ``host_ahead_us``, the launch
    queue's depth on the path); None where the path crosses no GPU work launched ahead."""
    cp = t.critical_path
    if cp is None or cp.host_ahead_us <= 0 or cp.length_us <= 0:
        return None
    return (f"The host ran {fmt_us(cp.host_ahead_us)} ahead of the GPU on the path (the launch queue's depth: "
            "from each launch to its work's start, mean over the path's GPU time)")


def fmt_what_if(f: Finding) -> str | None:
    """``saves 12.3 ms/step if removed (replayed on the step graph)`` with the finding's note; None when the
    finding has neither (memory and runtime findings, trace findings without a cost)."""
    if f.what_if_saving_us is None:
        return f.what_if_note
    text = f"saves {fmt_us(f.what_if_saving_us)}/step when removed (replayed on the step graph)"
    return f"{text}; {f.what_if_note}" if f.what_if_note else text

"""The top rows of a trace's views, for the terminal and markdown (the JSON has up to 500 rows per view).

One table model (:func:`view_tables`) feeds both renderers; names from the
trace go through the renderers' own inert-text paths.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuprof.trace.viewrows import TraceViews
from gpuprof.units import fmt_count, fmt_pct, fmt_us

__all__ = ["ViewTable", "view_tables", "TOP"]

TOP = 10


@dataclass
class ViewTable:
    """A titled table; ``columns`` are (header, kind) with kind ``name``, ``left`` or ``right``."""

    title: str
    columns: list[tuple[str, str]]
    rows: list[list[str]]


def _tflops(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def view_tables(v: TraceViews | None, top: int = TOP) -> list[ViewTable]:
    """The top rows of each non-empty view."""
    if v is None:
        return []
    out = []
    if v.operators:
        out.append(ViewTable(
            "Operators by input shapes (GPU self time)",
            [("Operator", "name"), ("Input shapes", "name"), ("Calls", "right"), ("CPU self", "right"), ("GPU self", "right"),
             ("GPU total", "right")],
            [[o.name, o.input_shapes or "-", fmt_count(o.calls), fmt_us(o.cpu_self_us), fmt_us(o.gpu_self_us), fmt_us(o.gpu_total_us)]
             for o in v.operators[:top]]))
    if v.kernels:
        mfu_head = f"MFU ({v.peak_device})" if v.peak_device else "MFU"
        out.append(ViewTable(
            "Kernels: precision and throughput",
            [("Kernel", "name"), ("Calls", "right"), ("Total", "right"), ("Precision", "left"), ("Tensor cores", "left"),
             ("TFLOP/s", "right"), (mfu_head, "right")],
            [[k.name, fmt_count(k.calls), fmt_us(k.total_us), k.precision or "-",
              "-" if k.tensor_cores is None else ("yes" if k.tensor_cores else "no"), _tflops(k.tflops),
              "-" if k.mfu is None else fmt_pct(k.mfu)]
             for k in v.kernels[:top]]))
    for rows, title, head in ((v.modules, "Modules (nn.Module paths)", "Module"), (v.ranges, "User ranges (record_function)", "Range")):
        if rows:
            out.append(ViewTable(
                title,
                [(head, "name"), ("Calls", "right"), ("CPU total", "right"), ("GPU self", "right"), ("GPU total", "right")],
                [[r.name, fmt_count(r.calls), fmt_us(r.cpu_total_us), fmt_us(r.gpu_self_us), fmt_us(r.gpu_total_us)]
                 for r in rows[:top]]))
    return out

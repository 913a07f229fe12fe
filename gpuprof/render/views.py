"""The top rows of a trace's tables and views, for the terminal and markdown (the JSON has up to 500 rows per view).

One table model (:func:`top_tables`, :func:`view_tables`) feeds both renderers; names from the
trace go through the renderers' own inert-text paths.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpuprof.trace.viewrows import TraceViews
from gpuprof.units import fmt_bytes, fmt_count, fmt_gbps, fmt_pct, fmt_us

if TYPE_CHECKING:  # pragma: no cover
    from gpuprof.report import TraceSummary

__all__ = ["ViewTable", "top_tables", "view_tables", "TOP"]

TOP = 10


@dataclass
class ViewTable:
    """A titled table; ``columns`` are (header, kind) with kind ``name``, ``left`` or ``right``."""

    title: str
    columns: list[tuple[str, str]]
    rows: list[list[str]]


def _tflops(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def _flop_count(x: float | None) -> str:
    """FLOPs with an SI prefix: 44.6G, 1.2T."""
    if x is None:
        return "-"
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if x >= scale:
            return f"{x / scale:.3g}{prefix}"
    return f"{x:.0f}"


def top_tables(t: TraceSummary, top: int = TOP) -> list[ViewTable]:
    """The summary's top kernels, operators and copies (the host synchronisations' cells differ per renderer)."""
    out = []
    if t.top_kernels:
        out.append(ViewTable("Top kernels", [("Kernel", "name"), ("Calls", "right"), ("Total", "right"), ("Mean", "right"), ("% GPU", "right")],
                             [[k.name, fmt_count(k.count), fmt_us(k.total_us), fmt_us(k.mean_us), fmt_pct(k.share_of_gpu)] for k in t.top_kernels[:top]]))
    if t.top_ops:
        out.append(ViewTable("Top operators", [("Operator", "name"), ("Calls", "right"), ("Total", "right"), ("Self", "right"), ("GPU self", "right")],
                             [[o.name, fmt_count(o.count), fmt_us(o.total_us), fmt_us(o.self_us), fmt_us(o.gpu_us)] for o in t.top_ops[:top]]))
    if t.copies:
        out.append(ViewTable("Copies", [("Direction", "left"), ("Host memory", "left"), ("Count", "right"), ("Bytes", "right"), ("Time", "right"), ("Bandwidth", "right")],
                             [[c.direction, c.memory, fmt_count(c.count), fmt_bytes(c.bytes), fmt_us(c.total_us), fmt_gbps(c.bandwidth_gbps)] for c in t.copies[:top]]))
    return out


def view_tables(v: TraceViews | None, top: int = TOP) -> list[ViewTable]:
    """The top rows of each non-empty view."""
    if v is None:
        return []
    out = []
    if v.operators:
        ops = v.operators[:top]
        # FLOP columns only when a shown operator has FLOPs (recorded, or estimated from its input shapes)
        flops = any(o.flops is not None for o in ops)
        rate = any(o.tflops is not None for o in ops)
        out.append(ViewTable(
            "Operators by input shapes (GPU self time)",
            [("Operator", "name"), ("Input shapes", "name"), ("Calls", "right"), ("CPU self", "right"), ("GPU self", "right"),
             ("GPU total", "right")] + [("FLOPs", "right")] * flops + [("TFLOP/s", "right")] * rate,
            [[o.name, o.input_shapes or "-", fmt_count(o.calls), fmt_us(o.cpu_self_us), fmt_us(o.gpu_self_us), fmt_us(o.gpu_total_us)]
             + [_flop_count(o.flops)] * flops + [_tflops(o.tflops)] * rate
             for o in ops]))
    if v.kernels:
        mfu_head = f"MFU ({v.peak_device}, its precision)" if v.peak_device else "MFU"
        # beside each MFU, the same FLOPs against the device's dense BF16 (FP16) tensor-core peak
        ref_head = [(f"MFU vs {v.reference_precision.upper()}", "right")] if v.reference_precision else []
        out.append(ViewTable(
            "Kernels: precision and throughput",
            [("Kernel", "name"), ("Calls", "right"), ("Total", "right"), ("Precision", "left"), ("Tensor cores", "left"),
             ("TFLOP/s", "right"), (mfu_head, "right")] + ref_head,
            [[k.name, fmt_count(k.calls), fmt_us(k.total_us), k.precision or "-",
              "-" if k.tensor_cores is None else ("yes" if k.tensor_cores else "no"), _tflops(k.tflops),
              "-" if k.mfu is None else fmt_pct(k.mfu)] + ["-" if k.reference_mfu is None else fmt_pct(k.reference_mfu)] * len(ref_head)
             for k in v.kernels[:top]]))
    for rows, title, head in ((v.modules, "Modules (nn.Module paths)", "Module"), (v.ranges, "User ranges (record_function)", "Range")):
        if rows:
            # MFU columns only when a shown row has kernels with known FLOPs (docs/views.md, "MFU")
            mfu = any(r.known_flops_share for r in rows[:top])
            ref = bool(mfu and v.reference_precision)
            out.append(ViewTable(
                title,
                [(head, "name"), ("Calls", "right"), ("CPU total", "right"), ("GPU self", "right"), ("GPU total", "right")]
                + [(f"Kernel MFU ({v.peak_device})" if v.peak_device else "Kernel MFU", "right"), ("Peak", "left"),
                   ("FLOPs known", "right")] * mfu
                + [(f"MFU vs {(v.reference_precision or '').upper()}", "right")] * ref,
                [[r.name, fmt_count(r.calls), fmt_us(r.cpu_total_us), fmt_us(r.gpu_self_us), fmt_us(r.gpu_total_us)]
                 + ["-" if r.mfu is None else fmt_pct(r.mfu), (r.peak_precision or "-").upper(),
                    "-" if r.known_flops_share is None else fmt_pct(r.known_flops_share)] * mfu
                 + ["-" if r.reference_mfu is None else fmt_pct(r.reference_mfu)] * ref
                 for r in rows[:top]]))
    return out

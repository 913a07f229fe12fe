"""Number and name formatting shared by the terminal and markdown renderers.

Every renderer formats a duration, a share or a byte count the same way, so a
number in ``report.md`` and the terminal output is the same string. The plain
value formats (``fmt_us``, ``fmt_bytes``, ``fmt_pct``, ...) are
:mod:`gpuprof.units`, which the rules use too (import them from there); this
module adds what only a renderer needs (evidence values, devices, step ranges,
findings).
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Sequence

from gpuprof.findings import Evidence, Finding, Severity
from gpuprof.report import DeviceInfo, Report, TraceSummary
from gpuprof.units import fmt_bytes, fmt_gbps, fmt_pct, fmt_us

# what a finding of origin "runtime" says about where it comes from (terminal and markdown)
RUNTIME_ORIGIN = "the capture's runtime checks (measured while the run trained)"

__all__ = ["RUNTIME_ORIGIN", "mfu_against", "fmt_lead_in", "BREAKDOWN_LABELS", "IDLE_LABELS", "fmt_number", "fmt_value",
           "fmt_cc", "fmt_device", "fmt_devices", "CPU_ONLY", "DEVICE_UNRECORDED", "fmt_rank", "fmt_steps", "fmt_cost",
           "fmt_evidence", "fmt_location", "ordered_items", "step_basis_us", "findings_total", "short_message",
           "linked_message"]

# Row labels of the step-time and GPU-idle breakdowns; the keys and their order
# come from the metrics module that defines them. A key without a label still
# renders, under its own name.
COMM_WAIT = "communication_wait"  # a sub-row of the breakdown's communication (breakdown_rows), not a part of it
BREAKDOWN_LABELS: dict[str, str] = {"kernel": "Kernels", "memcpy": "Memcpy", "memset": "Memset",
                                    "communication": "Communication", COMM_WAIT: "  of which waiting for other ranks",
                                    "runtime": "CUDA runtime", "data_loading": "Data loading", "cpu_exec": "CPU exec",
                                    "other": "Other"}
IDLE_LABELS: dict[str, str] = {"data_loading": "Data loading", "sync": "Host sync", "blocking_copy": "Blocking copy",
                               "runtime": "CUDA runtime", "optimizer": "Optimizer (CPU)", "cpu_other": "Other CPU work"}


def fmt_number(x: Any) -> str:
    """A plain number for evidence values: integers as is, floats with up to 3 significant decimals."""
    if x is None:
        return "n/a"
    if isinstance(x, bool):
        return str(x).lower()
    if isinstance(x, int):
        return f"{x:,}"
    if isinstance(x, float):
        if not math.isfinite(x):
            return "n/a"
        if x == int(x) and abs(x) < 1e15:
            return f"{int(x):,}"
        if abs(x) >= 100:
            return f"{x:,.1f}"
        return f"{x:.3g}"
    return str(x)


def fmt_value(value: Any, unit: str = "") -> str:
    """An evidence value with its unit, using the duration/bytes/share formats for known units."""
    if value is None:
        return "n/a"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if unit == "us":
            return fmt_us(float(value))
        if unit == "ms":
            return fmt_us(float(value) * 1000)
        if unit == "bytes":
            return fmt_bytes(value)
        if unit in ("fraction", "share", "ratio_of_step"):
            return fmt_pct(float(value))
        if unit in ("%", "percent"):
            return f"{fmt_number(value)}%"
        if unit == "GB/s":
            return fmt_gbps(float(value))
    text = fmt_number(value)
    return f"{text} {unit}" if unit else text


def fmt_cc(cc: Sequence[int] | None) -> str:
    """A CUDA compute capability: ``(8, 0)`` -> ``8.0``."""
    if not cc:
        return "n/a"
    return ".".join(str(x) for x in cc)


def fmt_device(d: DeviceInfo) -> str:
    """``GPU 0: NVIDIA H100 (sm 9.0, 79.1 GiB, 132 SMs)`` with only the parts the trace knows."""
    parts = []
    if d.compute_capability:
        parts.append(f"sm {fmt_cc(d.compute_capability)}")
    if d.total_memory:
        parts.append(fmt_bytes(d.total_memory))
    if d.num_sms:
        parts.append(f"{d.num_sms} SMs")
    name = d.name or "unknown GPU"
    extra = f" ({', '.join(parts)})" if parts else ""
    return f"GPU {d.id}: {name}{extra}"


CPU_ONLY = "CPU only (no GPU device in the trace)"
DEVICE_UNRECORDED = "not recorded (the trace has GPU activity but no device properties)"


def fmt_devices(devices: Sequence[DeviceInfo], gpu_activity: bool = False) -> str:
    """All devices of a trace; identical devices are folded (``8 x NVIDIA H100 (sm 9.0)``).

    Without devices: :data:`CPU_ONLY`, or, when the trace still shows GPU work
    (``gpu_activity``, an older profiler that wrote no ``deviceProperties``),
    :data:`DEVICE_UNRECORDED`.
    """
    if not devices:
        return DEVICE_UNRECORDED if gpu_activity else CPU_ONLY
    groups: dict[tuple[str, Any], list[int]] = {}
    for d in devices:
        groups.setdefault((d.name, d.compute_capability), []).append(d.id)
    if len(groups) == 1 and len(devices) > 1:
        d = devices[0]
        return f"{len(devices)} x {fmt_device(d).split(': ', 1)[1]}"
    return "; ".join(fmt_device(d) for d in devices)


def fmt_rank(rank: int | None, world_size: int | None) -> str:
    """``rank 3 of 8``, ``rank 3``, ``world of 8`` or ``single process``."""
    if rank is None and world_size is None:
        return "single process"
    if rank is None:
        return f"world of {world_size}"
    if world_size is None:
        return f"rank {rank}"
    return f"rank {rank} of {world_size}"


def fmt_steps(step_ids: Iterable[int], limit: int = 8) -> str:
    """Step ids folded into ranges: ``[3, 4, 5, 9]`` -> ``3-5, 9`` (at most ``limit`` ranges shown)."""
    ids = sorted(set(step_ids))
    if not ids:
        return "none"
    ranges: list[tuple[int, int]] = []
    lo = hi = ids[0]
    for x in ids[1:]:
        if x == hi + 1:
            hi = x
            continue
        ranges.append((lo, hi))
        lo = hi = x
    ranges.append((lo, hi))
    parts = [str(a) if a == b else f"{a}-{b}" for a, b in ranges]
    if len(parts) > limit:
        parts = parts[:limit] + [f"... ({len(parts) - limit} more ranges)"]
    return ", ".join(parts)


def fmt_cost(f: Finding) -> str:
    """The estimated cost per step: ``12.3 ms/step (18.5% of step)``, or ``not estimated``."""
    if f.cost_us_per_step is None:
        return "not estimated"
    text = f"{fmt_us(f.cost_us_per_step)}/step"
    if f.cost_share is not None:
        text += f" ({fmt_pct(f.cost_share)} of step)"
    return text


def fmt_evidence(e: Evidence) -> str:
    """``metric = value (threshold: x)``, values with their units."""
    text = f"{e.metric} = {fmt_value(e.value, e.unit)}"
    if e.threshold is not None:
        text += f" (threshold {fmt_value(e.threshold, e.unit)})"
    return text


def fmt_location(f: Finding) -> str | None:
    return str(f.location) if f.location is not None else None


def linked_message(f: Finding) -> str:
    """The finding's message with its links drawn: each explained idle part followed by ``(see CODE)``.

    Every renderer shows a message through this function, so the links (data
    on the finding: :class:`gpuprof.findings.Link`) read the same everywhere.
    """
    message = f.message
    by_part: dict[str, list[str]] = {}
    for link in f.links:
        if link.kind == "explained_by" and link.part:
            by_part.setdefault(link.part, []).append(link.code)
    for part, codes in by_part.items():
        if part in message:
            message = message.replace(part, f"{part} (see {', '.join(codes)})", 1)
    return message


def short_message(message: str, width: int = 80) -> str:
    """The message cut at ``width`` characters (at a word boundary when one is near)."""
    message = " ".join(message.split())
    if len(message) <= width:
        return message
    cut = message.rfind(" ", 0, width - 1)
    if cut < width // 2:
        cut = width - 1
    return message[:cut].rstrip(" ,;:") + "…"


def fmt_lead_in(us: float) -> str:
    """The lead-in row: its length and that it is left out of the step (see gpuprof.trace.metrics)."""
    return f"{fmt_us(us)} before the first GPU work, not counted in the step time or the utilisation"


def fmt_comm_wait(t: TraceSummary) -> str | None:
    """What the busy time holds of waiting in collectives for other ranks (gpuprof.distributed.waiting);
    None without collectives or without such waiting."""
    if not t.comm_wait_us or t.gpu_working_utilization is None:
        return None
    basis = "across the ranks given" if t.comm_wait_source == "ranks" else "one-rank estimate"
    return (f"{fmt_pct(t.gpu_working_utilization)} working: {fmt_us(t.comm_wait_us)} per step of it waits inside "
            f"collectives for other ranks ({basis})")


def fmt_mfu(t: TraceSummary) -> str | None:
    """The MFU row (docs/views.md, "MFU"): the figure, the peak it is taken against and the share of the
    steps' kernel time whose FLOPs are unknown; None when the trace has no GPU work to measure."""
    m = t.mfu
    if m is None or m.known_flops_share is None:
        return None
    unknown = f"FLOPs unknown for {fmt_pct(1.0 - m.known_flops_share)} of the steps' kernel time"
    if m.value is None:
        why = "no peak for this GPU" if m.peak_source is None else "no kernel with known FLOPs and a peak"
        return f"n/a ({why}); {unknown}"
    return f"{mfu_against(m.value, m.peak_source, m.peak_precision, m.reference_value, m.reference_precision)} " \
           f"(a lower bound: {unknown})"


def mfu_against(value: float, device: str | None, precision: str | None, reference: float | None,
                reference_precision: str | None) -> str:
    """An MFU figure with the precision of its peak, and beside it the figure against the device's dense BF16 (FP16)
    tensor-core peak when that is another peak: ``34.2% of the a100 FP32 peak, 2.1% of its dense BF16 peak``."""
    ref = (reference_precision or "").upper()
    if precision is None:
        text = f"{fmt_pct(value)} of the {device} peak"
    elif "+" in precision:
        text = f"{fmt_pct(value)} of the {device} peaks of its kernels' precisions ({precision.upper()})"
    elif precision.upper() == ref:
        return f"{fmt_pct(value)} of the {device} dense {ref} peak"
    else:
        text = f"{fmt_pct(value)} of the {device} {precision.upper()} peak"
    if reference is None or not ref:
        return text
    return f"{text}, {fmt_pct(reference)} of its dense {ref} tensor-core peak"


def step_basis_us(t: TraceSummary) -> float:
    """The step time the breakdown percentages are taken of.

    The breakdowns are means per step, so their shares are of the mean step
    time (then they add up to 100%); the median is the fallback when the mean
    is unknown.
    """
    return t.step_time_mean_us or t.step_time_us


def breakdown_rows(t: TraceSummary, order: Sequence[str]) -> tuple[dict[str, float], list[str]]:
    """The step breakdown with, under communication, the part of it waiting for other ranks (a sub-row the
    label says is "of which": the parts still add up without it)."""
    if not t.comm_wait_us or "communication" not in order:
        return t.breakdown_us, list(order)
    keys = list(order)
    keys.insert(keys.index("communication") + 1, COMM_WAIT)
    return {**t.breakdown_us, COMM_WAIT: t.comm_wait_us}, keys


def ordered_items(d: dict[str, float], order: Sequence[str]) -> list[tuple[str, float]]:
    """The known keys in ``order``, then any other keys in the dict's own order."""
    out = [(k, d[k]) for k in order if k in d]
    out += [(k, v) for k, v in d.items() if k not in order]
    return out


def findings_total(report: Report) -> str:
    """``3 findings: 1 error, 2 warnings`` (or ``No findings.``).

    When rules failed (``report.failed_rules``) the line says the analysis is
    incomplete: their findings are unknown, so it is never a clean "No findings."
    """
    n = len(report.findings)
    failed = report.failed_rules
    if failed:
        rules = ("rule " if len(failed) == 1 else "rules ") + ", ".join(failed)
        incomplete = f"the analysis is incomplete: {rules} failed (a gpuprof bug)"
        if n == 0:
            return f"No findings, but {incomplete}."
        return f"{_total(report, n)}; {incomplete}"
    if n == 0:
        return "No findings."
    return _total(report, n)


def _total(report: Report, n: int) -> str:
    counts = {s: 0 for s in Severity}
    for f in report.findings:
        counts[f.severity] += 1
    parts = []
    for sev in (Severity.ERROR, Severity.WARNING, Severity.INFO):
        c = counts[sev]
        if c:
            word = sev.value if c == 1 else ("info" if sev is Severity.INFO else f"{sev.value}s")
            parts.append(f"{c} {word}")
    return f"{n} finding{'s' if n != 1 else ''}: {', '.join(parts)}"

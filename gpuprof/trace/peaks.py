"""Peak dense throughput per device and precision, the denominator of MFU (docs/views.md lists the table).

Figures are the vendors' published dense peaks (no structured sparsity), in
TFLOP/s, for the SXM/OAM part unless the name says PCIe. FP32 is the
non-tensor-core SIMT rate; TF32, BF16, FP16, FP8, FP4 and INT8 (TOP/s) are tensor-core
rates;
FP64 is the best FP64 rate (tensor core where the part has one); the
Ampere and Ada parts outside the datacenter line (A10, A10G, L4, L40, L40S)
run FP64 at 1/64 of their FP32 rate (their architecture whitepapers; the
datasheets leave it out), so a float64 GEMM there shows a tiny peak, not
none. ``None``: the part has no such path (a V100 has no BF16, TF32, FP8 or INT8
tensor cores; only Blackwell computes FP4). The A10G's INT8 rate is twice its FP16
one, as on every Ampere part (AWS publishes none).

:func:`reference_precision` names the column the field quotes MFU against: the
part's dense BF16 tensor-core peak, FP16 on parts without BF16 (V100, T4).

A device is found by its name (``deviceProperties.name``), longest pattern
first; failing that, by compute capability, using the datacenter part of that
generation (a guess, reported as such in ``peak_device``).
"""

from __future__ import annotations

__all__ = ["PEAKS", "PRECISIONS", "peak_for", "device_row", "reference_precision"]

PRECISIONS = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "fp4", "int8")

_Row = tuple[float | None, float | None, float | None, float | None, float | None, float | None, float | None,
             float | None]
# name pattern (lower case) -> (fp64, fp32, tf32, bf16, fp16, fp8, fp4, int8) TFLOP/s (INT8: TOP/s)
PEAKS: dict[str, _Row] = {
    "b200": (40.0, 80.0, 1100.0, 2250.0, 2250.0, 4500.0, 9000.0, 4500.0),
    "h200": (67.0, 67.0, 494.7, 989.4, 989.4, 1978.9, None, 1978.9),
    "h100 pcie": (51.2, 51.2, 378.0, 756.0, 756.0, 1513.0, None, 1513.0),
    "h100": (67.0, 67.0, 494.7, 989.4, 989.4, 1978.9, None, 1978.9),
    "h800": (67.0, 67.0, 494.7, 989.4, 989.4, 1978.9, None, 1978.9),
    "h20": (1.0, 44.0, 74.0, 148.0, 148.0, 296.0, None, 296.0),
    "gh200": (67.0, 67.0, 494.7, 989.4, 989.4, 1978.9, None, 1978.9),
    "a100": (19.5, 19.5, 156.0, 312.0, 312.0, None, None, 624.0),
    "a800": (19.5, 19.5, 156.0, 312.0, 312.0, None, None, 624.0),
    "a10g": (0.49, 31.2, 35.0, 70.0, 70.0, None, None, 140.0),
    "a10": (0.49, 31.2, 62.5, 125.0, 125.0, None, None, 250.0),
    "l40s": (1.43, 91.6, 183.0, 362.1, 362.1, 733.0, None, 733.0),
    "l40": (1.41, 90.5, 90.5, 181.0, 181.0, 362.0, None, 362.0),
    "l4": (0.47, 30.3, 60.0, 121.0, 121.0, 242.5, None, 242.5),
    "v100 pcie": (7.0, 14.0, None, None, 112.0, None, None, None),
    "v100": (7.8, 15.7, None, None, 125.0, None, None, None),
    "t4": (0.25, 8.1, None, None, 65.0, None, None, 130.0),
    "mi325x": (163.4, 163.4, 653.7, 1307.4, 1307.4, 2614.9, None, 2614.9),
    "mi300x": (163.4, 163.4, 653.7, 1307.4, 1307.4, 2614.9, None, 2614.9),
    "mi250x": (95.7, 47.9, None, 383.0, 383.0, None, None, 383.0),
}

# compute capability -> the datacenter part of that generation (a guess when the name is unknown)
_BY_CC = {(7, 0): "v100", (7, 5): "t4", (8, 0): "a100", (8, 6): "a10", (8, 9): "l40s", (9, 0): "h100", (10, 0): "b200"}


def device_row(name: str, compute_capability: tuple[int, int] | None) -> str | None:
    """The PEAKS key for a device: by name (longest pattern first); None when the name is not in the table.

    The compute capability decides only when the trace names no device at all: an unknown part is never
    given another card's peak (an RTX 2080 Ti is compute capability 7.5 like a T4, with other peaks), so
    its MFU is unknown rather than wrong (issue 37).
    """
    low = " ".join(name.lower().replace("-", " ").split())
    for key in sorted(PEAKS, key=len, reverse=True):
        if key in low:
            return key
    if compute_capability is not None and not low.strip():
        return _BY_CC.get((compute_capability[0], compute_capability[1]))
    return None


def peak_for(row: str | None, precision: str | None) -> float | None:
    """Peak TFLOP/s of ``row`` (a PEAKS key) at ``precision`` (one of PRECISIONS); None when unknown."""
    if row is None or precision not in PRECISIONS:
        return None
    return PEAKS[row][PRECISIONS.index(precision)]


def reference_precision(row: str | None) -> str | None:
    """The precision of the peak the field quotes MFU against: dense BF16 tensor cores, FP16 where the part has no
    BF16 (V100, T4); None for an unknown device."""
    if row is None:
        return None
    peaks = PEAKS[row]
    for precision in ("bf16", "fp16"):
        if peaks[PRECISIONS.index(precision)] is not None:
            return precision
    return None
